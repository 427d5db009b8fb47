"""The what-if twin against a real llama.cpp server (SmolLM2-135M, CPU, one thread, 4 slots).

Fit on a sweep of rungs 1 and 2, predict rung 4 (`llmload twin --rungs 4`), then run rung 4 on
the server: the ground truth is that run's own table. Either the twin fits and its rung-4 agg
tok/s is within 15 % of the measured, or it says it does not fit and every reason is one of the
verdict's documented ones (docs/integrate.md, "The verdict"). The figures are printed either way,
with the plain line's rung-4 step (base + 4 x per_seq, one token a step) for comparison."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fixtures.real_runs import sweep_ladder

from llmload.analysis.run.postprocess import load_run

pytestmark = pytest.mark.real

LADDER = "max_tokens: 48\nprompt_tokens: 32\nrequests_per_user: 3\n"
TOLERANCE_PCT = 15.0
REASONS = (  # the verdict's documented breaks: the fit's checks, then a rung's figures
    "not in consecutive steps",
    "step time drifts",
    "step cost not linear in batch",
    "beyond the batch sizes the line was checked on",
    "off by",
    "not every request completed",
)


def sweep(llama_server, folder, rungs: str):
    return sweep_ladder(llama_server.url, folder / "run", f"rungs: [{rungs}]\n" + LADDER)


def test_the_twin_of_rungs_1_2_predicts_rung_4_or_says_why_not(llama_server, tmp_path):
    fitted_on = sweep(llama_server, tmp_path / "fit", "1, 2")
    proc = subprocess.run(
        [sys.executable, "-m", "llmload", "twin", str(fitted_on.prefix), "--rungs", "4"]
        + ["--run-dir", str(tmp_path / "twin"), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    actual = load_run(sweep(llama_server, tmp_path / "actual", "4").prefix).rows[0]
    p = doc["fit"]["parameters"]
    line_agg = 4 * p["accept_len"] / (p["base_ms"] + 4 * p["per_seq_ms"]) * 1000.0
    print(
        f"\nfit on c1,c2: step_ms = {p['base_ms']:.2f} + {p['per_seq_ms']:.3f} x batch, accept_len "
        f"{p['accept_len']:.2f}; drift {doc['fit']['drift_pct_per_min']:+.1f} %/min (t "
        f"{doc['fit']['drift_t']:+.1f}); c4 measured {actual.agg_tok_s:.1f} agg tok/s, the line says "
        f"{line_agg:.1f} ({(line_agg - actual.agg_tok_s) / actual.agg_tok_s * 100:+.1f} %)"
    )
    if doc["verdict"]["fits"]:
        (row,) = doc["prediction"]["rows"]
        assert row["conc"] == 4 and row["extrapolated"]
        predicted = row["predicted"]["agg_tok_s"]
        error = (predicted - actual.agg_tok_s) / actual.agg_tok_s * 100.0
        print(f"the twin fits: c4 predicted {predicted:.1f} agg tok/s, error {error:+.1f} %")
        assert abs(error) <= TOLERANCE_PCT
        assert proc.returncode == 0
    else:
        breaks = doc["verdict"]["breaks"]
        print("the twin does not fit: " + "; ".join(breaks))
        assert proc.returncode == 1 and breaks
        assert all(any(reason in b for reason in REASONS) for b in breaks), breaks
        assert doc["prediction"]["rows"] is None  # no confident wrong answer
