"""The greedy-determinism check: does the same prompt get the same text at every rung?

Greedy decoding (temperature 0) is a function of the prompt, yet many servers return different
text for one prompt depending on what else is in the batch (the batch shape changes the order of
floating-point reductions). With `check_determinism` every rung is followed by the check's probe:
one request per user at the rung's concurrency (phase "determinism", in no rung's figures), on
prompts of the check's own: probe prompt i is the same at every rung, and the warm-up sent each
once, so a prefix cache holds them alike at every probe while the measured requests' prompts are
never sent twice (llmload.loadgen.workload.prompts). Each record keeps `prompt_hash` (of what it
sent), `text_hash` (64-bit BLAKE2b of the generated text) and `chunk_hashes` (16 bits of CRC-32
per content chunk, four hex digits each; see llmload.loadgen.request.client).

Definitions, per rung, over its probe's records (completed requests with a text hash):
- reference of a prompt: its text at the lowest-concurrency rung that sent it (the earliest such
  rung on a tie, its earliest request). Warm-up requests are never a reference.
- checked: requests of the rung with a prompt hash and a text hash.
- compared: requests of the rung whose prompt has a reference, other than the reference itself.
- differing: compared requests whose text hash differs from the reference's; `share` is
  differing / compared.
- first differing token: where the text first differs from the reference's, in tokens (or
  chunks: `unit`), as llmload.analysis.identity.text_identity finds it; the same comparison of texts
  serves the check across two runs (`llmload compare`, llmload.analysis.output_identity).
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from llmload.analysis.identity.text_identity import checkable, compare_pairs, first_difference
from llmload.core.files.records import RequestRecord
from llmload.core.names import rung_name

__all__ = [
    "RungDivergence",
    "digest",
    "diverged",
    "divergence",
    "divergence_notes",
    "first_difference",
    "text_digests",
]


class Rung(Protocol):
    """A rung's requests, as the check reads them (`llmload.analysis.run.sweep_rows.Rung`)."""

    @property
    def index(self) -> int: ...
    @property
    def users(self) -> int: ...
    @property
    def records(self) -> list[RequestRecord]: ...


def digest(text: str) -> str:
    """64-bit BLAKE2b of a text, hex (a prompt's or a completion's identity)."""
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def text_digests(chunks: Sequence[str], answer: str | None = None) -> tuple[str, str]:
    """(text_hash, chunk_hashes) of a completion given the text of each token chunk; the text
    hash is of `answer` when given (a reasoning reply: its answer alone, `reasoning_hash` holds
    the rest), else of all the chunks' text."""
    crcs = [zlib.crc32(c.encode()) & 0xFFFF for c in chunks]
    text = "".join(chunks) if answer is None else answer
    return digest(text), struct.pack(f">{len(crcs)}H", *crcs).hex()


@dataclass(frozen=True, slots=True)
class RungDivergence:
    """The determinism figures of one rung (see the module docstring)."""

    rung: int
    conc: int
    references: tuple[str, ...]  # the rungs its compared requests' references came from
    compared: int
    differing: int
    first_diff_median: float | None  # median first differing token (or chunk) index
    unit: str  # "token" or "chunk"
    checked: int = 0  # requests with a prompt and a text hash
    reasoning_only: int = 0  # differing requests whose answer matched: only the reasoning changed

    @property
    def share(self) -> float:
        return self.differing / self.compared if self.compared else 0.0

    def as_dict(self) -> dict[str, object]:
        """The figures of the JSON table (`--format json`), whether or not a text differed."""
        return {
            "checked": self.checked,
            "compared": self.compared,
            "differing": self.differing,
            "share": self.share,
            "first_differing_median": self.first_diff_median,
            "unit": self.unit,
            "references": list(self.references),
            "reasoning_only": self.reasoning_only,
        }


def divergence(rungs: Sequence[Rung]) -> list[RungDivergence]:
    """Per rung, how many requests' texts differ from their prompt's reference."""
    references: dict[str | None, tuple[RequestRecord, Rung]] = {}  # by prompt hash
    for rung in sorted(rungs, key=lambda r: (r.users, r.index)):
        for rec in sorted(rung.records, key=lambda r: r.t_start):
            if checkable(rec) and rec.prompt_hash not in references:
                references[rec.prompt_hash] = (rec, rung)
    out = []
    for rung in rungs:
        checked = [rec for rec in rung.records if checkable(rec)]
        found = [(rec, references[rec.prompt_hash]) for rec in checked if rec.prompt_hash in references]
        found = [(rec, ref) for rec, ref in found if ref[0] is not rec]
        texts = compare_pairs((rec, ref) for rec, (ref, _) in found)
        origins = {origin.index: origin for _, (_, origin) in found}
        out.append(
            RungDivergence(
                rung=rung.index,
                conc=rung.users,
                references=tuple(rung_name(i, r.users) for i, r in sorted(origins.items())),
                compared=texts.compared,
                differing=texts.differing,
                first_diff_median=texts.first_diff_median,
                unit=texts.unit,
                checked=len(checked),
                reasoning_only=texts.reasoning_only,
            )
        )
    return out


def diverged(divs: Sequence[RungDivergence]) -> bool:
    return any(d.differing for d in divs)


def divergence_notes(divs: Sequence[RungDivergence]) -> list[str]:
    """Lines for under the sweep table: one per diverging rung (none when every text matched)."""
    notes = []
    for d in divs:
        if not d.differing:
            continue
        median = "-" if d.first_diff_median is None else f"{d.first_diff_median:g}"
        thinking = f", {d.reasoning_only} of them in the reasoning only" if d.reasoning_only else ""
        notes.append(
            f"{rung_name(d.rung, d.conc)}: greedy text differs from the same prompt's text at "
            f"{' / '.join(d.references)} on {d.differing} of {d.compared} requests "
            f"({100 * d.share:.0f} %{thinking}); median first differing {d.unit} {median}"
        )
    return notes
