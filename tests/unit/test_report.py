"""The report on a golden run (tests/fixtures/report_run: hand-built records, run file, scrape
file and environment): files exist, PNGs decode at the expected size, the page holds the tables."""

from __future__ import annotations

import base64
import html
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.paths import REPO
from PIL import Image

from llmload.analysis.run.sweep_rows import SweepRow
from llmload.analysis.twin.decision import RungDecision, decide
from llmload.core.files.records import RecordFileError
from llmload.core.files.run_files import RunFiles
from llmload.output.html_report import write_report
from llmload.output.plots import pareto_front
from llmload.output.twin_report import render_json

FIXTURE = REPO / "tests" / "fixtures" / "report_run"
SCRIPT = REPO / "scripts" / "report.py"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    page, plots = write_report(FIXTURE, out)
    return page, plots, page.read_text()


def test_files_and_png_sizes(report):
    page, plots, _ = report
    assert page.name == "run_report.html"
    assert sorted(p.name for p in plots) == ["run_latency.png", "run_pareto.png", "run_throughput.png"]
    for path in plots:
        with Image.open(path) as img:
            img.verify()
        with Image.open(path) as img:
            assert img.format == "PNG" and img.size == (800, 500)


def test_page_is_self_contained(report):
    _, plots, text = report
    images = re.findall(r"src='data:image/png;base64,([^']+)'", text)
    assert len(images) == len(plots)
    for data in images:
        assert Image.open(io.BytesIO(base64.b64decode(data))).size == (800, 500)
    assert "src='http" not in text and "<link" not in text


def test_page_holds_the_tables(report):
    text = report[2]
    # the sweep table: rung 0 is 256 tokens in 2 s; rung 1 one 256-token request ended in its
    # steady 3 s (4 in flight from 1011 to 1014; tokens at a request's end: no chunk times)
    assert re.search(r"conc\s+agg_tok/s\s+per_req_tok/s", text)
    assert re.search(r"\n\s*1\s+128\.0\s+128\.0\s+256\s+2\.00", text)
    assert re.search(r"\n\s*4\s+85\.3\s+", text)
    assert "latency_ms" in text and "ttft" in text and "tpot" in text
    # server metrics per rung (golden values of the scrape file) and the token cross-check: rung
    # 02's steady window 1011-1014 is bracketed by the scrapes at 1009.8 and 1016 (1800 - 1255
    # tokens; the client's that arrived between them: the requests ending at 1014 and 1015), the
    # scrape at 1012 inside it; accept_len 1 + (1260 - 858) / (540 - 397)
    assert re.search(r"rung02 c4\s+545\s+512\s+4\.00\s+0\.00\s+10\.00\s+3\.81", text)
    assert "server metrics (vllm)" in text


def test_page_holds_config_and_environment(report):
    text = report[2]
    assert "max_tokens: 256" in text and "rungs:" in text
    assert "Test CPU 3000 x 2" in text and "0.11.0 (GET /version)" in text
    assert "locust version</th><td>2.47.0" in text and "sim-model" in text


def test_a_run_is_found_by_folder_records_file_or_prefix(tmp_path):
    assert RunFiles.find(FIXTURE).prefix == FIXTURE / "run"
    assert RunFiles.find(FIXTURE / "run_records.jsonl").prefix == FIXTURE / "run"
    assert RunFiles.find("reports/x").prefix == Path("reports/x")
    with pytest.raises(RecordFileError, match="no \\*_records.jsonl files"):
        RunFiles.find(tmp_path)


def test_script(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(FIXTURE / "run"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run_report.html").exists()
    missing = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "nothing")], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "no such records file" in missing.stderr


DECISION = decide(
    [
        RungDecision(4, 25.7, 10.0, 0.64, 0.58, 0.41, 0.70, {"ttft_p50_ms": (30.0, 22.0, 41.0)}),
        RungDecision(8, 28.5, 10.0, 0.54, 0.52, 0.50, 0.55, {"tpot_p50_ms": (8.1, 7.9, 8.3)}),
    ],
    0.10,
)


def _decision_rows(text: str) -> list[list[str]]:
    table = re.search(r"<table class='decision'>(.*?)</table>", text, re.S)
    assert table, "no decision table"
    return [re.findall(r"<t[dh]>(.*?)</t[dh]>", row) for row in re.findall(r"<tr>(.*?)</tr>", table.group(1))]


def test_the_decision_beside_the_run_is_a_table_in_the_page(tmp_path):
    """A decision.json beside the run's files (llmload twin's, read back): its rungs are the rows
    of a real table (not preformatted text), its line under it; no decision, no section."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    (run / "decision.json").write_text(render_json(DECISION.as_dict()))
    text = write_report(run, tmp_path / "out")[0].read_text()
    rows = _decision_rows(text)
    assert rows[0][0] == "conc" and rows[0][-1] == "verdict"
    assert rows[1] == ["4", "25.7", "+64.0", "+58.0 [+41.0, +70.0]", "30 [22, 41]", "-", "worth it"]
    assert rows[2] == ["8", "28.5", "+54.0", "+52.0 [+50.0, +55.0]", "-", "8.1 [7.9, 8.3]", "worth it"]
    assert f"<b>decision:</b> {html.escape(DECISION.line)}" in text
    assert text.index("<h2>Decision</h2>") < text.index("<h2>Sweep</h2>")
    assert "<h2>Decision</h2>" not in write_report(FIXTURE, tmp_path / "plain")[0].read_text()


def _report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmload", "report", *args], capture_output=True, text=True, check=False
    )


def test_decision_flag_names_a_twin_folder_or_its_file(tmp_path):
    twin = tmp_path / "twin"
    twin.mkdir()
    (twin / "decision.json").write_text(render_json(DECISION.as_dict()))
    for given in (twin, twin / "decision.json"):
        done = _report(str(FIXTURE), "--out", str(tmp_path / given.name), "--decision", str(given))
        assert done.returncode == 0, done.stderr
        assert len(_decision_rows((tmp_path / given.name / "run_report.html").read_text())) == 3


@pytest.mark.parametrize(
    "content",
    [None, "", "not json", "[]", '{"rungs": []}', json.dumps({**DECISION.as_dict(), "verdict": "maybe"}),
     json.dumps({**DECISION.as_dict(), "rungs": [{"conc": "x"}]}), "[" * 100_000],
)  # fmt: skip
def test_a_bad_decision_is_one_line_exit_2(tmp_path, content):
    given = tmp_path / "decision.json"
    if content is None:
        given = tmp_path / "empty_folder"
        given.mkdir()
    else:
        given.write_text(content)
    done = _report(str(FIXTURE), "--out", str(tmp_path / "out"), "--decision", str(given))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("llmload report: error: --decision ") and str(tmp_path) in line, line
    assert not (tmp_path / "out" / "run_report.html").exists()


def _row(conc: int, agg: float, per_req: float) -> SweepRow:
    return SweepRow(0, conc, agg, per_req, 0, 1.0, None, conc, 0)


def test_pareto_front_drops_dominated_rungs():
    rows = [_row(1, 100, 100), _row(4, 300, 80), _row(4, 250, 70), _row(8, 480, 60), _row(10, 470, 50)]
    assert [(r.conc, r.agg_tok_s) for r in pareto_front(rows)] == [(8, 480), (4, 300), (1, 100)]
