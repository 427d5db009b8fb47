"""Time intervals on one clock (epoch seconds): their union, and the time of some not covered by
others. A session's model time is the union of its requests' intervals; its tool time is the
union of its tool waits outside that model time (`llmload.analysis.sessions.figures`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Span = tuple[float, float]  # start, end (s); an end before its start is an empty span


def union(spans: Iterable[Span]) -> list[Span]:
    """The union of `spans` as disjoint spans in time order (touching spans joined; empty ones
    dropped)."""
    merged: list[Span] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def length(disjoint: Sequence[Span]) -> float:
    """The time disjoint spans cover (s)."""
    return sum(end - start for start, end in disjoint)


def outside(spans: Iterable[Span], covered: Sequence[Span]) -> float:
    """The time `spans` cover outside the disjoint, time-ordered spans `covered` (s): the union
    of `spans` less its overlap with `covered`."""
    mine = union(spans)
    overlap = 0.0
    i = 0
    for start, end in mine:
        while i < len(covered) and covered[i][1] <= start:
            i += 1
        j = i
        while j < len(covered) and covered[j][0] < end:
            overlap += min(end, covered[j][1]) - max(start, covered[j][0])
            j += 1
    return length(mine) - overlap
