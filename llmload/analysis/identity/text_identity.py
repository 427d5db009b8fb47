"""Whether two requests of one prompt got the same greedy text, and where they part.

The one implementation behind both output checks: the greedy-determinism check inside one run
(llmload.analysis.identity.determinism: each request against its prompt's reference at the lowest
concurrency) and the output-identity check across two runs (llmload.analysis.output_identity: each
candidate request against the base request that sent the same prompt at the same place). Each
builds its (record, reference) pairs; `compare_pairs` counts the differing texts and finds where
each one first differs.

Records carry `prompt_hash`, `text_hash` (64-bit BLAKE2b of the generated answer text),
`reasoning_hash` (the same of a reasoning model's reasoning text), `tool_hash` (the same of the
reply's tool calls, their names and arguments: llmload.loadgen.stream.tool_calls) and `chunk_hashes`
(16 bits of CRC-32 per content chunk, four hex digits each; see llmload.loadgen.request.client). Two
replies differ when any of the three hashes differs; a pair whose answers and tool calls agree
differs in its reasoning only. The first differing token of two texts is the index (0-based) of the
first token of the first content chunk whose hash differs from the other's chunk at the same
position (or where one text ends). Tokens before that chunk are counted from `chunk_tokens` when the
server reported them, else as one per chunk when the request has as many chunks as tokens (vLLM,
llama.cpp without speculative decoding); otherwise the index counts chunks and the unit says
"chunk".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from llmload.core.files.records import RequestRecord
from llmload.core.stats import percentile

CHUNK_HASH_DIGITS = 4
Pair = tuple[RequestRecord, RequestRecord]  # (a record, the reference it is compared with)
# a request's place among a run's requests of one prompt: (prompt hash, max_tokens, k-th sent),
# or a session's turn: (session id, turn, SESSION_PLACE)
Place = tuple[str, int, int]
SESSION_PLACE = -1  # never a k-th: a session's place cannot be taken for a prompt's


def checkable(rec: RequestRecord) -> bool:
    """A completed request with a prompt hash and a text hash."""
    return rec.ok and rec.text_hash is not None and rec.prompt_hash is not None


def _chunks(rec: RequestRecord) -> list[str]:
    h = rec.chunk_hashes or ""
    return [h[i : i + CHUNK_HASH_DIGITS] for i in range(0, len(h), CHUNK_HASH_DIGITS)]


def first_difference(rec: RequestRecord, ref: RequestRecord) -> tuple[int, str]:
    """(index, unit) of the first token of `rec` that differs from `ref` (module docstring)."""
    mine, theirs = _chunks(rec), _chunks(ref)
    chunk = next(
        (i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b),
        min(len(mine), len(theirs)),
    )
    tokens = rec.chunk_tokens
    if tokens is not None and len(tokens) == rec.chunks:
        return sum(tokens[:chunk]), "token"
    return chunk, "token" if rec.output_tokens == rec.chunks else "chunk"


@dataclass(frozen=True, slots=True)
class TextComparison:
    """Compared pairs of one group and the first difference of each pair whose texts differ."""

    pairs: tuple[Pair, ...]
    firsts: tuple[tuple[int, str], ...]  # (index, unit) per differing pair

    @property
    def compared(self) -> int:
        return len(self.pairs)

    @property
    def differing(self) -> int:
        return len(self.firsts)

    @property
    def first_diff_median(self) -> float | None:
        """The median first differing token (or chunk) index; None when no text differs."""
        return percentile([i for i, _ in self.firsts], 50.0) if self.firsts else None

    @property
    def reasoning_only(self) -> int:
        """Differing pairs whose answers and tool calls agree: only the reasoning text changed."""
        return sum(
            rec.text_hash == ref.text_hash and rec.tool_hash == ref.tool_hash
            for rec, ref in self.pairs
            if differs(rec, ref)
        )

    @property
    def tool_calls_changed(self) -> int:
        """Pairs whose tool calls differ (a call's name or arguments, or a call more or less)."""
        return sum(rec.tool_hash != ref.tool_hash for rec, ref in self.pairs)

    @property
    def unit(self) -> str:
        """ "chunk" when any index counts chunks (the median then does too), else "token"."""
        return "chunk" if any(u == "chunk" for _, u in self.firsts) else "token"


def compare_pairs(pairs: Iterable[Pair]) -> TextComparison:
    """How many pairs' texts differ, and where each differing one first differs."""
    held = tuple(pairs)
    firsts = tuple(first_difference(rec, ref) for rec, ref in held if differs(rec, ref))
    return TextComparison(held, firsts)


def differs(rec: RequestRecord, ref: RequestRecord) -> bool:
    """Whether two requests' greedy replies differ: their answers, reasoning or tool calls."""
    return (
        rec.text_hash != ref.text_hash
        or rec.reasoning_hash != ref.reasoning_hash
        or rec.tool_hash != ref.tool_hash
    )


def places(records: Iterable[RequestRecord]) -> dict[Place, RequestRecord]:
    """The checkable records by their place: the k-th request (in send order) of a prompt and
    max_tokens. The same seeded workload sends the same prompts in the same order at a rung, so a
    place names one request in each of two runs. A session's turn is placed by (session, turn):
    its ids are seeded (llmload.loadgen.workload.sessions), and a turn whose history holds a
    reply that changed still pairs with its partner."""
    out: dict[Place, RequestRecord] = {}
    seen: dict[tuple[str, int], int] = {}
    for rec in sorted((r for r in records if checkable(r)), key=lambda r: (r.t_start, r.request_id)):
        if rec.session is not None and rec.turn is not None:
            out[(rec.session, rec.turn, SESSION_PLACE)] = rec
            continue
        key = (rec.prompt_hash or "", rec.max_tokens)
        k = seen[key] = seen.get(key, -1) + 1
        out[(*key, k)] = rec
    return out


def pair_places(base: Sequence[RequestRecord], cand: Sequence[RequestRecord]) -> tuple[list[Pair], int, int]:
    """(candidate, base) pairs of the requests at the same place, with the candidate's and the
    base's checkable requests left without a partner."""
    at_base, at_cand = places(base), places(cand)
    pairs = [(rec, at_base[place]) for place, rec in at_cand.items() if place in at_base]
    return pairs, len(at_cand) - len(pairs), len(at_base) - len(pairs)
