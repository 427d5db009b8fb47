"""End to end: the measured step and the decision against simulators whose truth is known (their
settings, their truth log of every step, and a real run of the changed simulator), never the
code under test:

- a model past its batch limit (6 sequences, rungs up to 12) with acceptance drawn per step:
  `llmload budget`'s step within 10 % of the truth log's median step at every rung;
- the decision on a 10 ms step change (`--saves-ms 10`): "worth it", and the changed simulator's
  measured gain inside the stated interval at every production rung; the Amdahl bound never
  below that interval (a pure step change); a threshold inside a rung's interval:
  "cannot tell" (exit 9);
- the twin fits its own simulator over drawn models (base, per-sequence cost, acceptance 1-5,
  prefill, batch limit), outputs of 32-512 tokens, one prompt or many (a seeded property test,
  few examples).

Short runs: steps of 10-40 ms, no warm-up."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path
from statistics import median
from typing import Any

import pytest
from fixtures.fuzzing import examples
from fixtures.twin_runs import sweep as run_ladder
from fixtures.twin_runs import twin
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from llmload.analysis.budget import CostModel, budget_rows, load_points
from llmload.analysis.run.postprocess import load_run
from llmload.core.exit_codes import UNDECIDED
from llmload.runner.sweep_run import SweepRun
from llmload.sim.truth import load_truth

LADDER: dict[str, Any] = {
    "rungs": [1, 4, 8, 12],
    "max_tokens": 64,
    "requests_per_user": 2,
    "warmup_requests": 0,
}
LIMITED = {"base_ms": 20.0, "per_seq_ms": 1.5, "accept_len": 3.0, "max_num_seqs": 6}


def sweep(folder: Path, sim: dict[str, Any], **ladder: Any) -> SweepRun:
    return run_ladder(folder, sim, {**LADDER, **ladder})


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> SweepRun:
    return sweep(tmp_path_factory.mktemp("limited"), LIMITED)


def test_budget_step_is_the_truth_logs_median_step_past_the_limit(limited):
    """Every rung, those past the limit of 6 included: the measured step within 10 % of the
    median of the truth log's steps in the rung's window, the batch the server ran."""
    _, steps = load_truth(limited.truth_log)
    result = load_run(limited.prefix)
    rows = budget_rows(load_points(str(limited.prefix)), CostModel("c", constant_ms=1.0), None, None)
    for row, tally in zip(rows, result.rungs, strict=True):
        truth = [
            (s["t_end"] - s["t_start"]) * 1000
            for s in steps
            if tally.first_start <= s["t_start"] <= tally.last_end
        ]
        assert row.measured
        assert row.step_ms == pytest.approx(median(truth), rel=0.10), (row.conc, row.step_ms, median(truth))
        assert row.batch == min(row.conc, 6)
    assert [r.waited for r in result.rows] == [0, 0] + [r.waited for r in result.rows][2:]
    assert all(r.waited for r in result.rows[2:])  # c8 and c12 queued: the sweep notes them


def test_a_10ms_step_change_is_worth_it_and_the_real_run_falls_inside(limited, tmp_path):
    code, doc, err = twin(limited, tmp_path / "twin", "--saves-ms", "10", "--at", "4,8,12", "--worth", "10")
    assert doc["verdict"]["fits"], doc["verdict"]
    decision = doc["decision"]
    assert code == 0 and decision["verdict"] == "worth it", (decision, err)
    assert decision["line"].startswith("worth it at conc 4, 8, 12: +")
    assert (tmp_path / "twin" / "decision.html").read_text().count("<tr>") == 4  # a real table
    report = subprocess.run(
        [sys.executable, "-m", "llmload", "report", str(limited.prefix), "--out", str(tmp_path / "report")]
        + ["--decision", str(tmp_path / "twin")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    page = (tmp_path / "report" / "run_report.html").read_text()
    assert report.returncode == 0 and "<h2>Decision</h2>" in page, report.stderr
    assert page.count("<td>worth it</td>") == 3 and html.escape(decision["line"]) in page
    changed = load_run(sweep(tmp_path / "changed", {**LIMITED, "base_ms": 10.0}).prefix)
    measured = load_run(limited.prefix)
    actual = {
        r.conc: r.agg_tok_s / m.agg_tok_s - 1.0 for r, m in zip(changed.rows, measured.rows, strict=True)
    }
    for rung in decision["rungs"]:
        assert rung["low"] <= actual[rung["conc"]] <= rung["high"], (rung, actual)
    # a pure step change: the bound on the rung's measured steps is not below the prediction's
    # interval (the real gain is inside it and at most the bound). Not "not below the prediction":
    # the fit may read a rung's step up to its agg tolerance (3 %) short of the measured mean, and
    # 10 ms of a 27 ms step then reads the gain 1.7 % of (1 + gain) high (CI: 59.0 % vs 56.4 %)
    for rung in decision["rungs"]:
        assert rung["low"] <= rung["bound"], rung
    # a threshold inside the interval of conc 4 (8 requests: the bootstrap's interval is wide)
    # and below its bound: "cannot tell", exit 9, whatever the twin's own rerun reads
    c4 = next(r for r in decision["rungs"] if r["conc"] == 4)
    assert c4["low"] < c4["bound"], c4
    worth = 100 * (c4["low"] + min(c4["high"], c4["bound"])) / 2
    code, doc, err = twin(
        limited, tmp_path / "straddle", "--saves-ms", "10", "--at", "4", "--worth", f"{worth:.2f}"
    )
    straddle = doc["decision"]
    assert code == UNDECIDED and straddle["verdict"] == "cannot tell", (straddle, c4, err)
    assert "holds the threshold: its interval is wider than the margin" in straddle["line"]
    more = re.search(r"about (\d+) more requests per rung would decide it", straddle["line"])
    assert more and int(more.group(1)) > 0, straddle["line"]  # n x (half-width / margin)^2 - n


# Steps of at least 10.5 ms: on a loaded 2-core machine a chunk is read some ms late now and then,
# and the fit's clusters of chunks need steps well above that (8.5 ms steps once failed to fit
# there). No simulator clock runs faster than its model, so a cheap example is a short one: the
# draws keep a sweep under about a minute (at most 512 tokens at 1-5 a step, three rungs).
MODELS = st.fixed_dictionaries(
    {
        "base_ms": st.sampled_from([10.0, 12.0, 20.0]),
        "per_seq_ms": st.sampled_from([0.5, 1.5, 3.0]),
        "accept_len": st.integers(2, 10).map(lambda half: half / 2.0),  # 1.0, 1.5, ... 5.0
        "prefill_ms_per_token": st.sampled_from([0.0, 0.02, 0.05]),
        "max_num_seqs": st.sampled_from([256, 3, 2]),  # 2 and 3: below the top rung
    }
)
ONE_PROMPT = "Explain how a decode step of a batched inference server is scheduled."
PROPERTY_LADDER: dict[str, Any] = {"rungs": [1, 2, 4], "requests_per_user": 3, "warmup_requests": 0}


@settings(
    max_examples=examples(2), deadline=None, derandomize=True, database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: each example is a sweep and a twin
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
@given(
    sim=MODELS,
    max_tokens=st.integers(32, 512),
    many_prompts=st.sampled_from([True, False]),  # the first (simplest) draw: many prompts
)
@example(  # the corner that once failed: 512 tokens, one prompt, past a batch limit, acceptance 5
    sim={**LIMITED, "base_ms": 12.0, "accept_len": 5.0, "prefill_ms_per_token": 0.02, "max_num_seqs": 3},
    max_tokens=512,
    many_prompts=False,
)
@example(  # the longest: 512 tokens one a step, many prompts, past a batch limit
    sim={
        "base_ms": 10.0,
        "per_seq_ms": 0.5,
        "accept_len": 1.0,
        "prefill_ms_per_token": 0.05,
        "max_num_seqs": 3,
    },
    max_tokens=512,
    many_prompts=True,
)
def test_the_twin_fits_its_own_simulator(tmp_path_factory, sim, max_tokens, many_prompts):
    """Drawn models (base, per-sequence cost, acceptance 1-5, prefill, batch limit), output
    lengths 32-512 and one or many prompts: the twin of a run of the simulator says it fits.
    Three requests a user, so that the c1 rung's medians are of more than one request."""
    folder = tmp_path_factory.mktemp("drawn")
    ladder: dict[str, Any] = {**PROPERTY_LADDER, "max_tokens": max_tokens}
    if many_prompts:  # synthetic prompts, one drawn per request
        ladder["prompt_tokens"] = 48
    else:  # one prompt named, whatever the default workload is
        ladder["prompt"] = ONE_PROMPT
    run = run_ladder(folder, sim, ladder)
    code, doc, err = twin(run, folder / "twin")
    verdict = doc.get("verdict", {})
    assert code == 0 and verdict["fits"], (sim, max_tokens, many_prompts, verdict.get("breaks"), err)
