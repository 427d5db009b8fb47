"""The stream reader's I/O collect interval (llmload.loadgen.transport.stream_reader): the hub waits before
its next poll only after a busy turn, so a light load is never held."""

from __future__ import annotations

import pytest

from llmload.loadgen.transport import stream_reader
from llmload.loadgen.transport.stream_reader import COLLECT_MIN_READS, COLLECT_S, StreamReader


@pytest.mark.parametrize(
    ("reads", "waits"), [(0, []), (COLLECT_MIN_READS - 1, []), (COLLECT_MIN_READS, [COLLECT_S])]
)
def test_only_a_busy_turn_waits(monkeypatch, reads, waits):
    slept: list[float] = []
    monkeypatch.setattr(stream_reader, "_blocking_sleep", slept.append)
    reader = StreamReader()
    reader._reads = reads
    reader._gather()
    assert slept == waits and reader._reads == 0  # the next turn counts afresh
