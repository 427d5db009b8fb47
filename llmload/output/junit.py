"""A soak verdict as JUnit XML for CI systems: one testsuite, one testcase per threshold.

A breached threshold is a `<failure>`, a threshold that could not be evaluated (too few windows,
no values) is `<skipped>`; an inconclusive drift passes with its interval in `<system-out>`. A run
that did not reach its duration adds a testcase `run_completed` with an `<error>`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from llmload.analysis.soak.verdict import BREACHED, INCONCLUSIVE, SKIPPED, SoakReport

SUITE = "llmload.analysis.soak.verdict"


def junit_xml(report: SoakReport) -> str:
    """The report as a JUnit XML document (testsuites > testsuite > testcase)."""
    cases: list[ET.Element] = []
    for check in report.checks:
        case = ET.Element("testcase", classname=SUITE, name=check.name, time="0")
        if check.status == BREACHED:
            ET.SubElement(case, "failure", message=f"{check.name} breached: {check.detail}", type="threshold")
        elif check.status == SKIPPED:
            ET.SubElement(case, "skipped", message=check.detail)
        elif check.status == INCONCLUSIVE:
            ET.SubElement(case, "system-out").text = f"inconclusive: {check.detail}"
        else:
            ET.SubElement(case, "system-out").text = check.detail
        cases.append(case)
    if not report.finished or not report.windows:
        case = ET.Element("testcase", classname=SUITE, name="run_completed", time="0")
        ET.SubElement(case, "error", message="; ".join(report.reasons) or report.status, type=report.status)
        cases.append(case)
    failures = sum(1 for c in cases if c.find("failure") is not None)
    errors = sum(1 for c in cases if c.find("error") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    duration = len(report.windows) * report.soak.window_s
    root = ET.Element("testsuites", tests=str(len(cases)), failures=str(failures), errors=str(errors))
    suite = ET.SubElement(
        root,
        "testsuite",
        name=SUITE,
        tests=str(len(cases)),
        failures=str(failures),
        errors=str(errors),
        skipped=str(skipped),
        time=f"{duration:g}",
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("prefix", report.prefix),
        ("status", report.status),
        ("exit_code", report.exit_code),
    ):
        ET.SubElement(props, "property", name=name, value=str(value))
    suite.extend(cases)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
