"""The report on a golden run (tests/fixtures/report_run: hand-built records, run file, scrape
file and environment): files exist, PNGs decode at the expected size, the page holds the tables."""

from __future__ import annotations

import base64
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.paths import REPO
from PIL import Image

from llmload.analysis.run.sweep_rows import SweepRow
from llmload.core.files.records import RecordFileError
from llmload.core.files.run_files import RunFiles
from llmload.output.html_report import write_report
from llmload.output.plots import pareto_front

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
    # the sweep table: rung 0 is 256 tokens in 2 s; rung 1 three 256-token requests in 10 s
    assert re.search(r"conc\s+agg_tok/s\s+per_req_tok/s", text)
    assert re.search(r"\n\s*1\s+128\.0\s+128\.0\s+256\s+2\.00", text)
    assert re.search(r"\n\s*4\s+76\.8\s+", text)
    assert "latency_ms" in text and "ttft" in text and "tpot" in text
    # server metrics per rung (golden values of the scrape file) and the token cross-check
    assert re.search(r"rung02 c4\s+808\s+805\s+3\.50\s+0\.50\s+9\.00\s+4\.00", text)
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


def _row(conc: int, agg: float, per_req: float) -> SweepRow:
    return SweepRow(0, conc, agg, per_req, 0, 1.0, None, conc, 0)


def test_pareto_front_drops_dominated_rungs():
    rows = [_row(1, 100, 100), _row(4, 300, 80), _row(4, 250, 70), _row(8, 480, 60), _row(10, 470, 50)]
    assert [(r.conc, r.agg_tok_s) for r in pareto_front(rows)] == [(8, 480), (4, 300), (1, 100)]
