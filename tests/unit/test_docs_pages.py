"""The manual is a manual: no page of docs/ is over 350 lines (the guide's ~300, with room for a
table), except the measurements log, docs/measurements.md, where dated runs, before/after tables
and the reasons for a bar go. A page that grows past it is split, or its history moves to the log."""

from __future__ import annotations

import yaml
from fixtures.paths import REPO

DOCS = REPO / "docs"
MAX_LINES = 350
LOG = "measurements.md"


def test_no_manual_page_is_over_350_lines() -> None:
    long = {
        page.name: lines
        for page in sorted(DOCS.glob("*.md"))
        if page.name != LOG and (lines := len(page.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"pages over {MAX_LINES} lines (split them, or move dated runs to docs/{LOG}): {long}"


def test_the_measurements_log_is_in_the_site() -> None:
    """The log exists and the site's navigation reaches it, as it reaches every page."""
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]

    def pages(entry: object) -> list[str]:
        if isinstance(entry, str):
            return [entry]
        if isinstance(entry, list):
            return [p for item in entry for p in pages(item)]
        if isinstance(entry, dict):
            return [p for value in entry.values() for p in pages(value)]
        return []

    listed = set(pages(nav))
    assert (DOCS / LOG).is_file() and LOG in listed
    assert {p.name for p in DOCS.glob("*.md")} <= listed, "a page of docs/ is missing from mkdocs.yml's nav"
