"""The simulator's accept_len that realizes a fitted one on a workload (the twin's calibration).

The simulator draws each prompt's accepted tokens from a generator seeded by the prompt, so a run
of few prompts realizes a mean off its setting, and not in proportion to it (one prompt's draws are
one sequence of uniforms: the realized mean is a step function of the setting). A first replay of
the run's ladder with `CALIBRATION_STEP_MS` steps (acceptance does not depend on timing) records
each request's seed in the simulator's truth log (`accept_seed`); `draws_of` pairs them with the
replay's records, and `solve_setting` replays the draws offline (`llmload.sim.engine`'s
`steps_to_generate`, the simulator's own rule) to find the setting whose realized mean is the
fitted one. `calibration_params`: the replay's parameters; `needs_calibration`: when there is
nothing to calibrate (every replay draws other prompts, or accept_len 1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from llmload.analysis.run.steps import stepped
from llmload.analysis.twin.fit import TwinParams, fit_accept_len
from llmload.core.files.records import RequestRecord
from llmload.sim.engine import steps_to_generate

CALIBRATION_STEP_MS = 2.0
SOLVE_STEPS = 20  # bisection steps of a setting in [1, 1 + max_draft]: 7 / 2**20, under its rounding

Draws = list[tuple[int, int]]  # (output tokens, the simulator's accept_seed) of each replayed request


def needs_calibration(ladder: Mapping[str, Any], params: TwinParams) -> bool:
    """Whether a calibration replay can tell anything: prompts repeat and there is something to draw."""
    return not ladder.get("unique_prompts") and params.accept_len > 1.0


def calibration_params(params: TwinParams) -> TwinParams:
    """The calibration replay's simulator: the fit's acceptance, short fixed steps."""
    return replace(
        params, base_ms=CALIBRATION_STEP_MS, per_seq_ms=0.0, prefill_ms_per_token=0.0, max_num_seqs=None
    )


def draws_of(records: Iterable[RequestRecord], truth: Mapping[str, Mapping[str, Any]]) -> Draws:
    """Each usable replayed request's output tokens and the seed the simulator drew it with."""
    return [
        (r.output_tokens, int(truth[r.request_id]["accept_seed"]))
        for r in records
        if stepped(r) and isinstance(truth.get(r.request_id, {}).get("accept_seed"), int)
    ]


def solve_setting(draws: Draws, target: float, max_draft: int) -> float:
    """The simulator's accept_len whose draws, replayed for these requests, realize `target` as
    the fit reads it (`fit_accept_len` of their tokens and steps). The realized mean never falls
    as the setting rises, in steps (a request takes a whole number of steps): of the two plateaus
    around the target, the one whose mean is closer, at its middle (a setting rounded to the
    simulator's four decimals stays on it)."""

    def realized(setting: float) -> float:
        steps = {d: steps_to_generate(d[1], d[0], setting, max_draft) for d in set(draws)}
        return fit_accept_len([(d[0], steps[d]) for d in draws], max_draft)

    def first(reaches: Callable[[float], bool]) -> float:
        """The smallest setting for which `reaches` holds (1 + max_draft if none)."""
        lo, hi = 1.0, 1.0 + max_draft
        for _ in range(SOLVE_STEPS):
            mid = (lo + hi) / 2.0
            lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
        return hi

    up = first(lambda s: realized(s) >= target)
    r_up = realized(up)
    plateaus = [(r_up, up, first(lambda s: realized(s) > r_up))]
    if up > 1.0 + 1e-9:
        r_down = realized(max(1.0, up - 1e-6))
        plateaus.append((r_down, first(lambda s: realized(s) >= r_down), up))
    _, start, end = min(plateaus, key=lambda p: abs(p[0] - target))
    return (start + end) / 2.0
