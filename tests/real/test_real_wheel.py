"""The installed package against the real llama.cpp server: `llmload sweep --host URL` from a
wheel in a fresh venv, run from an empty directory, counts exactly the tokens the server says it
decoded (its `llamacpp:tokens_predicted_total`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fixtures.real_runs import sent_tokens

from llmload.core.files.records import read_records
from llmload.loadgen.transport.server_pages import scrape_metrics

pytestmark = [pytest.mark.real, pytest.mark.slow]

PREDICTED = "llamacpp:tokens_predicted_total"


def test_the_wheel_sweeps_the_real_server(llama_server, wheel_venv: Path, tmp_path: Path) -> None:
    before = scrape_metrics(llama_server.metrics_url)[PREDICTED]
    proc = subprocess.run(
        [str(wheel_venv / "llmload"), "sweep", "--host", llama_server.url, "--run-dir", "reports/real"]
        + ["--rungs", "1,2", "--requests-per-user", "2", "--max-tokens", "8", "--scrape-interval", "0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    after = scrape_metrics(llama_server.metrics_url)[PREDICTED]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [line.split()[0] for line in proc.stdout.splitlines()[1:3]] == ["1", "2"]
    records, skipped = read_records(tmp_path / "reports" / "real" / "run_records.jsonl")
    assert not skipped and all(r.ok for r in records)
    # warm-up and the per-chunk usage probe (run_calibration.jsonl) included: all decoded
    assert sent_tokens(tmp_path / "reports" / "real" / "run_records.jsonl") == after - before
