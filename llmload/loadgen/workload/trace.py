"""Trace replay (`mode: trace`): the requests of a trace file, their schedule and their prompts.

One stage replays the window of `trace_file` (`llmload.core.workload.trace_file`) with `max_concurrency`
users as client slots, through the rate mode's machinery: a free user takes the next line from
the process's `ArrivalQueue`, sleeps until it is due and sends it; with several processes or
workers each sends its slots' share of the one schedule. Lateness, t_start - t_scheduled, is in
every record (`queue_wait` in the metrics).

Each line becomes a request with `max_tokens = output_length` (and the run's `ignore_eos`, on by
default) and a prompt: its `input_text` verbatim, else synthetic text that costs exactly
`input_length` tokens on the server. It is built from the run's calibration
(`llmload.loadgen.workload.prompts.calibrate_prompts`): the anchor word, then words that each cost one token
after it (`Calibration.vocab`), so the prompt costs `overhead` (BOS, chat template, the anchor)
plus one token per word. Token block i (tokens 512*i .. 512*i + 511, BOS included) is the text of
hash_ids[i]: block 0 is the overhead then 512 - overhead words, every later block 512 words, the
last block shortened to what input_length leaves. The words of a block are drawn by a generator
seeded with (seed, block id, whether it is block 0), so the same id at the same place always
gives the same tokens and a partial block is a prefix of the full one: lines whose hash_ids agree
up to block i share their first 512*(i+1) tokens exactly, the prefix `llmload trace-stats`
assumes. Lines without `hash_ids` get blocks of their own. The prompts of the window are built
once per process that sends them (`prepare`, before the stage's go), never on the timed path;
the master only reads the schedule.
"""

from __future__ import annotations

import json
import random
from collections.abc import Hashable, Sequence

from llmload.core.config import ConfigError, SweepConfig
from llmload.core.workload.trace_file import BLOCK_TOKENS, TraceLine, read_trace, replay_window
from llmload.loadgen.workload.prompts import ANCHOR, synthetic_text


class TraceWorkload:
    """The replay window of a run's trace in one process: schedule and ready-made prompts."""

    def __init__(self, config: SweepConfig, vocab: Sequence[str], overhead: int) -> None:
        """`vocab` and `overhead` are the server's `Calibration` (see the module docstring)."""
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
        for t in self.lines:
            if t.input_text is None and min(t.input_length, BLOCK_TOKENS) < overhead:
                raise ConfigError(
                    f"{config.trace_file}:{t.line}: 'input_length' {t.input_length} is below the "
                    f"{overhead} tokens every prompt costs on this server (BOS, chat template)"
                )
        self._seed = config.seed
        self._vocab = tuple(vocab)
        self._overhead = overhead
        self._blocks: dict[tuple[Hashable, bool, int], str] = {}
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

    def _block(self, block_id: Hashable, first: bool, words: int) -> str:
        """`words` one-token words of the block `block_id` (block 0 of its line when `first`)."""
        key = (block_id, first, words)
        text = self._blocks.get(key)
        if text is None:
            rng = random.Random(f"llmload-trace-block:{self._seed}:{block_id}:{int(first)}")
            text = self._blocks[key] = synthetic_text(rng, words, self._vocab)
        return text

    def _synthetic(self, t: TraceLine) -> str:
        ids: list[Hashable] = list(t.hash_ids) if t.hash_ids is not None else []
        blocks = -(-t.input_length // BLOCK_TOKENS)
        ids += [f"line{t.line}.{i}" for i in range(len(ids), blocks)]
        texts = [ANCHOR]
        for i, block_id in enumerate(ids):
            tokens = min(BLOCK_TOKENS, t.input_length - BLOCK_TOKENS * i)
            words = tokens - self._overhead if i == 0 else tokens
            if words:
                texts.append(self._block(block_id, i == 0, words))
        return " ".join(texts)

    def request(self, index: int) -> tuple[str, int, int]:
        """(prompt, max_tokens, trace line number) of the window's line `index`."""
        t = self.lines[index]
        return self.prepare()[index], t.output_length, t.line


_CACHE: dict[str, TraceWorkload] = {}


def trace_workload(config: SweepConfig, vocab: Sequence[str], overhead: int) -> TraceWorkload:
    """This process's trace workload for a run's configuration and calibration (built on first
    use, then reused)."""
    key = json.dumps(
        [
            config.trace_file,
            config.start_s,
            config.duration_s,
            config.speed,
            config.seed,
            list(vocab),
            overhead,
        ]
    )
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = TraceWorkload(config, vocab, overhead)
    return _CACHE[key]
