"""Output identity across two runs: did the candidate return the base's greedy texts?

`llmload compare BASE CAND` judges speed (llmload.analysis.compare) and, from the same records,
whether the outputs changed. Greedy decoding (temperature 0) is a function of the prompt, so a
candidate server that is only faster returns the same text for every prompt; one whose numerics
changed (a new kernel, another batch layout) may not.

Matching: rungs are matched by ladder index and concurrency (as the speed comparison matches
them); inside a rung, a candidate request is matched with the base request at the same place: the
same prompt (`prompt_hash`) and `max_tokens`, the k-th such request in send order; a session's
turn: the same session id and turn (ids are seeded: llmload.loadgen.workload.sessions). The same
seeded workload sends the same prompts in the same order, so every request finds its partner. Each pair is
compared by llmload.analysis.identity.text_identity (as the greedy-determinism check inside one run): its
texts differ or not (`text_hash`), and where they first differ (`chunk_hashes`).

Not judged, and said why, when the prompts cannot be matched: a run without prompt or text hashes
(the check was off: `check_determinism: false`, `unique_prompts`, or temperature > 0), a run that
samples (temperature > 0: its texts are not a function of the prompt), runs of different `seed`
(other prompts), `unique_prompts` (a prompt is sent once, ever), or no request of the candidate at
any place of the base.

Verdict: "outputs identical" when no matched pair differs, "outputs changed on N of M" (N pairs of
the M matched differ).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmload.analysis.identity.text_identity import checkable, compare_pairs, pair_places
from llmload.analysis.run.postprocess import RunResult
from llmload.analysis.run.sweep_rows import Rung
from llmload.core.config import SweepConfig
from llmload.core.names import rung_name

IDENTICAL, CHANGED, UNMATCHED = "identical", "changed", "cannot be matched"


@dataclass(frozen=True, slots=True)
class RungOutputs:
    """One matched rung: its candidate requests compared with the base's at the same place."""

    rung: int
    conc: int
    compared: int
    differing: int
    first_diff_median: float | None  # median first differing token (or chunk) index
    unit: str  # "token" or "chunk"
    cand_unmatched: int  # checkable candidate requests without a base request at their place
    base_unmatched: int
    reasoning_only: int = 0  # differing pairs whose answers and tool calls agree: the reasoning changed
    tool_calls_changed: int = 0  # differing pairs whose tool calls (names or arguments) differ

    def as_dict(self) -> dict[str, Any]:
        return {
            "rung": rung_name(self.rung, self.conc),
            "index": self.rung,
            "conc": self.conc,
            "compared": self.compared,
            "differing": self.differing,
            "first_differing_median": self.first_diff_median,
            "unit": self.unit,
            "cand_unmatched": self.cand_unmatched,
            "base_unmatched": self.base_unmatched,
            "reasoning_only": self.reasoning_only,
            "tool_calls_changed": self.tool_calls_changed,
        }


@dataclass(frozen=True, slots=True)
class OutputIdentity:
    """The per-rung figures and why the runs could not be matched (empty when they were)."""

    rungs: list[RungOutputs]
    reasons: list[str] = field(default_factory=list)

    @property
    def compared(self) -> int:
        return sum(r.compared for r in self.rungs)

    @property
    def differing(self) -> int:
        return sum(r.differing for r in self.rungs)

    @property
    def reasoning_only(self) -> int:
        return sum(r.reasoning_only for r in self.rungs)

    @property
    def tool_calls_changed(self) -> int:
        return sum(r.tool_calls_changed for r in self.rungs)

    @property
    def verdict(self) -> str:
        if self.reasons:
            return UNMATCHED
        return CHANGED if self.differing else IDENTICAL

    @property
    def changed(self) -> bool:
        return self.verdict == CHANGED

    def summary(self) -> str:
        """The one-line verdict."""
        if self.reasons:
            return f"outputs cannot be matched, not judged: {'; '.join(self.reasons)}"
        if self.differing:
            parts = []
            if self.reasoning_only:
                parts.append(f"{self.reasoning_only} in their reasoning only, the answer the same")
            if self.tool_calls_changed:
                parts.append(f"{self.tool_calls_changed} in their tool calls")
            which = f" ({'; '.join(parts)})" if parts else ""
            return f"outputs changed on {self.differing} of {self.compared} matched requests{which}"
        return f"outputs identical ({self.compared} of {self.compared} matched requests)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "summary": self.summary(),
            "compared": self.compared,
            "differing": self.differing,
            "reasoning_only": self.reasoning_only,
            "tool_calls_changed": self.tool_calls_changed,
            "reasons": list(self.reasons),
            "rungs": [r.as_dict() for r in self.rungs],
        }


def _config(res: RunResult) -> SweepConfig | None:
    """The run's prompt-shaping settings, as its run file recorded them (None: not recorded)."""
    return res.run_info.recorded("temperature", "unique_prompts", "seed") if res.run_info else None


def _config_reasons(base: RunResult, cand: RunResult) -> list[str]:
    """Why the runs' configurations (from their run files) send prompts that cannot be matched."""
    out = []
    configs = {"base": _config(base), "candidate": _config(cand)}
    for name, config in configs.items():
        if config is not None and config.temperature > 0:
            shown = f"temperature {config.temperature:g}"
            out.append(f"the {name} samples ({shown}): its texts are not the prompt's function")
        if config is not None and config.unique_prompts:
            out.append(f"the {name} sends unique prompts (unique_prompts: true): no prompt is sent twice")
    seeds = [config.seed if config else 0 for config in configs.values()]
    if all(configs.values()) and seeds[0] != seeds[1]:
        out.append(f"the runs' seeds differ (base {seeds[0]}, candidate {seeds[1]}): they sent other prompts")
    return out


def _hash_reasons(runs: dict[str, list[Rung]]) -> list[str]:
    return [
        f"no request of the {name} carries prompt and text hashes (the greedy-determinism check "
        "was off: check_determinism: false, unique_prompts, or temperature > 0)"
        for name, rungs in runs.items()
        if not any(checkable(rec) for rung in rungs for rec in rung.records)
    ]


def output_identity(base: RunResult, cand: RunResult) -> OutputIdentity:
    """Compare the greedy texts of the rungs present in both runs (module docstring)."""
    runs = {"base": base.record_rungs(), "candidate": cand.record_rungs()}
    base_by, cand_by = ({(r.index, r.users): r for r in rungs} for rungs in runs.values())
    rungs = []
    for key in sorted(base_by.keys() & cand_by.keys()):
        pairs, cand_left, base_left = pair_places(base_by[key].records, cand_by[key].records)
        texts = compare_pairs(pairs)
        rungs.append(
            RungOutputs(
                key[0],
                key[1],
                texts.compared,
                texts.differing,
                texts.first_diff_median,
                texts.unit,
                cand_left,
                base_left,
                texts.reasoning_only,
                texts.tool_calls_changed,
            )
        )
    reasons = _config_reasons(base, cand) + _hash_reasons(runs)
    if not reasons and not any(r.compared for r in rungs):
        reasons.append(
            "no candidate request has a base request with the same prompt and max_tokens at the same "
            "rung (other prompts: another seed, prompt file or ladder?)"
        )
    return OutputIdentity(rungs, reasons)
