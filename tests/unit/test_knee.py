"""The knee of the ladder and the fall that stops it (llmload.analysis.knee), on synthetic curves
whose knee is known by construction: a server of batch limit L decodes min(c, L) sequences a step,
so its agg tok/s is per-user rate x min(c, L); a server without a limit in the range scales
linearly; an over-saturated one loses throughput past L. Noise is multiplicative and seeded."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from fixtures.paths import REPO

from llmload.analysis.knee import FALL_PCT, MIN_CONCS, Knee, falling, knee_of, row_batch_limit, sweep_knee
from llmload.analysis.run.sweep_rows import SweepRow
from llmload.analysis.twin.decision import Decision, RungDecision, decide

PER_USER = 200.0  # tok/s one user gets
RUNGS = range(1, 17)


def limited(limit: int, noise: float = 0.0, seed: int = 0, rungs=RUNGS) -> list[tuple[int, float]]:
    rng = np.random.default_rng(seed)
    return [(c, PER_USER * min(c, limit) * (1 + noise * rng.standard_normal())) for c in rungs]


def linear(noise: float = 0.0, seed: int = 0) -> list[tuple[int, float]]:
    rng = np.random.default_rng(seed)
    return [(c, PER_USER * c * (1 + noise * rng.standard_normal())) for c in RUNGS]


@pytest.mark.parametrize("limit", [3, 4, 6, 9, 12, 14])
def test_a_clean_batch_limit_is_the_knee(limit):
    knee = knee_of(limited(limit))
    assert knee is not None
    assert (knee.conc, knee.low, knee.high) == (limit, limit, limit)
    assert knee.slope_below == pytest.approx(PER_USER)
    assert knee.slope_above == pytest.approx(0.0, abs=1e-6)


def test_noisy_rungs_place_the_knee_within_one_and_its_interval_holds_it():
    """5 % noise on every rung, 40 seeds: the knee at the limit +-1 every time, its 95 % interval
    holding the limit in at least 36."""
    knees = [knee_of(limited(6, noise=0.05, seed=s)) for s in range(40)]
    assert all(k is not None and k.conc is not None and abs(k.conc - 6) <= 1 for k in knees)
    held = sum(
        1
        for k in knees
        if k is not None and k.low is not None and k.high is not None and k.low <= 6 <= k.high
    )
    assert held >= 36


def test_a_curve_that_scales_to_the_top_has_no_knee():
    clean = knee_of(linear())
    assert clean is not None and clean.conc is None and clean.low is None
    assert clean.slope_below == pytest.approx(PER_USER)
    assert "knee: none in the range conc 1-16" in clean.line()
    noisy = [knee_of(linear(noise=0.05, seed=s)) for s in range(40)]
    assert sum(1 for k in noisy if k is not None and k.conc is None) >= 36


def test_a_gentler_slope_past_the_bend_is_still_scaling():
    """Past c=8 each user adds 60 % of what one added below: more than KNEE_SHARE, no knee."""
    curve = [(c, PER_USER * min(c, 8) + 0.6 * PER_USER * max(c - 8, 0)) for c in RUNGS]
    knee = knee_of(curve)
    assert knee is not None and knee.conc is None
    steeper = [(c, PER_USER * min(c, 8) + 0.3 * PER_USER * max(c - 8, 0)) for c in RUNGS]
    assert (k := knee_of(steeper)) is not None and k.conc == 8


def test_over_saturation_is_a_knee_too():
    curve = [(c, PER_USER * min(c, 6) - 30.0 * max(c - 6, 0)) for c in RUNGS]
    knee = knee_of(curve)
    assert knee is not None and knee.conc == 6 and knee.slope_above == pytest.approx(-30.0)
    assert knee.past(7) and not knee.past(6)


def test_a_curve_flat_from_the_first_rung_has_its_knee_there():
    knee = knee_of([(c, 500.0) for c in (2, 4, 8, 12, 16)])
    assert knee is not None and knee.conc == 2


def test_too_few_concurrencies_place_no_knee():
    assert knee_of(limited(2, rungs=range(1, MIN_CONCS))) is None
    # a repeated concurrency is one concurrency
    assert knee_of([(1, 200.0), (2, 400.0), (2, 410.0), (4, 420.0)]) is None
    assert knee_of(limited(2, rungs=range(1, MIN_CONCS + 1))) is not None


def test_unevenly_spaced_rungs():
    rungs = (1, 2, 4, 8, 16, 32)
    knee = knee_of(limited(8, rungs=rungs))
    assert knee is not None and knee.conc == 8


def _row(rung: int, conc: int, agg: float, **kw) -> SweepRow:
    return SweepRow(rung, conc, agg, None, 0, 1.0, None, conc, 0, **kw)


def test_the_sweep_rows_knee_and_batch_limit():
    rows = [
        _row(i, c, r, waited=max(c - 6, 0), decoding_max=min(c, 6))
        for i, (c, r) in enumerate(limited(6, rungs=range(1, 11)))
    ]
    rows.append(_row(10, 30, 1.0, partial=True))  # a partial rung is not a point
    rows.append(_row(11, 20, 1.0, rate=5.0))  # nor a rate rung
    knee = sweep_knee(rows)
    assert knee is not None and knee.conc == 6 and knee.highest == 10
    assert knee.batch_limit == 6 and "batch limit 6" in knee.line()
    assert row_batch_limit([_row(0, 4, 1.0, waited=0, decoding_max=4)]) is None


def test_the_knee_as_json():
    knee = Knee(6, 5, 7, 200.0, 1.0, 1, 16, 6, "the most streams decoding at once")
    doc = knee.as_dict()
    assert (doc["conc"], doc["low"], doc["high"], doc["batch_limit"], doc["range"]) == (6, 5, 7, 6, [1, 16])
    assert knee.line().startswith("knee: conc 6 [5, 7] (95 %)")


def test_throughput_falling_over_consecutive_rungs_stops_the_ladder():
    over = [(c, PER_USER * min(c, 6) * (0.85 ** max(c - 6, 0))) for c in RUNGS]
    stops = [c for i, (c, _) in enumerate(over) if falling(over[: i + 1])]
    assert stops[0] == 8  # two falls in a row of 15 %: 7 and 8


def test_noise_and_a_single_fall_do_not_stop_the_ladder():
    flat = limited(6, noise=0.01, seed=3)
    assert not any(falling(flat[: i + 1]) for i in range(len(flat)))
    dip = [(1, 200.0), (2, 400.0), (3, 300.0), (4, 410.0), (5, 300.0)]  # falls, but never twice in a row
    assert not any(falling(dip[: i + 1]) for i in range(len(dip)))
    small = [(1, 400.0), (2, 400.0 * (1 - FALL_PCT / 200)), (3, 400.0 * (1 - FALL_PCT / 100) ** 2)]
    assert not falling(small)  # falls under FALL_PCT each
    repeated = [(4, 400.0), (4, 300.0), (4, 200.0)]  # the same users: not a rise in load
    assert not falling(repeated)
    # a sweep on the busy build machine against a batch limit of 6 (a plateau, no over-saturation):
    # its rungs 12-14 fell by 14 % and 5 % in a row
    plateau = [
        (c, r)
        for c, r in zip(
            range(6, 17),
            (525.6, 516.8, 517.6, 576.4, 556.2, 545.8, 592.0, 509.5, 482.7, 591.2, 579.2),
            strict=True,
        )
    ]
    assert not any(falling(plateau[: i + 1]) for i in range(len(plateau)))


def test_the_decision_names_the_production_rungs_past_the_knee_as_queueing(tmp_path):
    """A table of a server of batch limit 6 (200 tok/s a user up to it, none after): of the
    production rungs 4 and 10, 10 is past the knee, named queueing in the line and marked in the
    table; the decision's json carries the knee."""
    table = tmp_path / "limited.csv"
    table.write_text("conc,agg_tok/s\n" + "".join(f"{c},{r}\n" for c, r in limited(6, rungs=range(1, 13))))
    args = [str(table), "--accept-len", "1", "--saves-ms", "1", "--at", "4,10"]
    done = subprocess.run(
        [sys.executable, "-m", "llmload", "twin", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert "Traceback" not in done.stderr, done.stderr
    line = next(n for n in done.stdout.splitlines() if n.startswith("decision: "))
    assert line.endswith(
        "; conc 10 past the knee (conc 6 [6, 6]): queueing (added users there add latency, not tok/s)"
    )
    verdicts = {
        n.split()[0]: n for n in done.stdout.splitlines() if n.split() and n.split()[0] in ("4", "10")
    }
    assert verdicts["10"].endswith(", queueing") and not verdicts["4"].endswith("queueing")
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "llmload", "twin", *args, "--format", "json"],
            capture_output=True,
            text=True,
            check=False,
            cwd=REPO,
        ).stdout
    )["decision"]
    assert doc["knee"]["conc"] == 6 and [r["queueing"] for r in doc["rungs"]] == [False, True]
    again = Decision.from_dict(doc)
    assert again.knee == doc["knee"] and [r.queueing for r in again.rungs] == [False, True]
    before = doc | {
        "knee": None,
        "rungs": [{k: v for k, v in r.items() if k != "queueing"} for r in doc["rungs"]],
    }
    assert not any(r.queueing for r in Decision.from_dict(before).rungs)  # a decision.json from before


def test_a_decision_without_a_knee_names_no_rung_queueing():
    plain = decide([RungDecision(8, 36.0, 10.0, 0.385, 0.36, 0.33, 0.39)], 0.1)
    assert "knee" not in plain.line and plain.knee is None
