"""Trace replay (`mode: trace`): the requests of a trace file, their schedule and their prompts.

One stage replays the window of `trace_file` (`llmload.core.trace_file`) with `max_concurrency`
users as client slots, through the rate mode's machinery: a free user takes the next line from
the process's `ArrivalQueue`, sleeps until it is due and sends it; with several processes or
workers each sends its slots' share of the one schedule. Lateness, t_start - t_scheduled, is in
every record (`queue_wait` in the metrics).

Each line becomes a request with `max_tokens = output_length` (and the run's `ignore_eos`, on by
default) and a prompt: its `input_text` verbatim, else synthetic text built block by block. Block
i of a line is the text of the pair (hash_ids[i], block length): the words of a 512-token block
are drawn by a generator seeded with (seed, block id), so the same id always gives the same text
and a partial last block is a prefix of the full block's text. A block has round(512 /
tokens_per_word) words, where tokens_per_word is the server's calibrated tokens per synthetic
word (`llmload.loadgen.workload.calibrate`; exactly 1 on the simulator, so its blocks are
exactly 512 tokens). Lines without `hash_ids` get blocks of their own. The prompts of the window
are built once per process that sends them (`prepare`, before the stage's go), never on the timed
path; the master only reads the schedule.
"""

from __future__ import annotations

import json
import random
from collections.abc import Hashable

from llmload.core.config import ConfigError, SweepConfig
from llmload.core.trace_file import BLOCK_TOKENS, TraceLine, read_trace, replay_window
from llmload.loadgen.workload import synthetic_text


class TraceWorkload:
    """The replay window of a run's trace in one process: schedule and ready-made prompts."""

    def __init__(self, config: SweepConfig, tokens_per_word: float = 1.0) -> None:
        assert config.trace_file is not None
        window = replay_window(
            read_trace(config.trace_file),
            start_s=config.start_s,
            duration_s=config.duration_s,
            speed=config.speed,
        )
        if not window:
            raise ConfigError(
                f"{config.trace_file}: no line in the window 'start_s' {config.start_s:g} + "
                f"'duration_s' {config.duration_s} (seconds after the first line)"
            )
        self.offsets = [off for off, _ in window]
        self.lines = [t for _, t in window]
        self._seed = config.seed
        self._words_per_token = 1.0 / tokens_per_word
        self._blocks: dict[tuple[Hashable, int], str] = {}
        self._prompts: list[str] | None = None

    def prepare(self) -> list[str]:
        """Every prompt of the window, built on the first call (before the stage's go)."""
        if self._prompts is None:
            self._prompts = [t.input_text or self._synthetic(t) for t in self.lines]
        return self._prompts

    @property
    def rate(self) -> float:
        """Mean requests/s of the window (all lines at once count as one second)."""
        span = self.offsets[-1] - self.offsets[0] if self.offsets else 0.0
        return (len(self.offsets) - 1) / span if span > 0 else float(len(self.offsets))

    def _block(self, block_id: Hashable, tokens: int) -> str:
        key = (block_id, tokens)
        text = self._blocks.get(key)
        if text is None:
            rng = random.Random(f"llmload-trace-block:{self._seed}:{block_id}")
            words = max(1, round(tokens * self._words_per_token))
            text = self._blocks[key] = synthetic_text(rng, words)
        return text

    def _synthetic(self, t: TraceLine) -> str:
        ids: list[Hashable] = list(t.hash_ids) if t.hash_ids is not None else []
        blocks = -(-t.input_length // BLOCK_TOKENS)
        ids += [f"line{t.line}.{i}" for i in range(len(ids), blocks)]
        last = t.input_length - BLOCK_TOKENS * (blocks - 1)
        return " ".join(
            self._block(block_id, BLOCK_TOKENS if i < blocks - 1 else last) for i, block_id in enumerate(ids)
        )

    def request(self, index: int) -> tuple[str, int, int]:
        """(prompt, max_tokens, trace line number) of the window's line `index`."""
        t = self.lines[index]
        return self.prepare()[index], t.output_length, t.line


_CACHE: dict[str, TraceWorkload] = {}


def trace_workload(config: SweepConfig, tokens_per_word: float | None) -> TraceWorkload:
    """This process's trace workload for a run's configuration (built on first use, then reused)."""
    key = json.dumps(
        [config.trace_file, config.start_s, config.duration_s, config.speed, config.seed, tokens_per_word]
    )
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = TraceWorkload(config, tokens_per_word or 1.0)
    return _CACHE[key]
