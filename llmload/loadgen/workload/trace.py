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

A conversation trace (`llmload.core.workload.conversations`: AIPerf's multi-turn Mooncake trace,
the Weka agentic trace) is scheduled by its conversations: a free user takes the next
conversation when its first turn is due and plays it (`llmload.loadgen.workload.trace_play`). A
whole-context turn's prompt is built as a line's, with the trace's block size; a multi-turn
turn's text is its user message, `input_length` words each after a space, one token each, its
blocks drawn as a line's (keyed apart from them), so turns whose `hash_ids` agree send the same
words.
"""

from __future__ import annotations

import json
import random
from collections.abc import Hashable, Sequence

from llmload.core.config import ConfigError, SweepConfig
from llmload.core.workload.conversations import (
    HISTORY_WHOLE,
    Conversation,
    ConversationTurn,
)
from llmload.core.workload.trace_file import BLOCK_TOKENS, TraceLine, read_trace, replay_window
from llmload.core.workload.trace_formats import read_conversations
from llmload.loadgen.workload.prompts import ANCHOR, synthetic_text


class TraceWorkload:
    """The replay window of a run's trace in one process: schedule and ready-made prompts."""

    def __init__(self, config: SweepConfig, vocab: Sequence[str], overhead: int) -> None:
        """`vocab` and `overhead` are the server's `Calibration` (see the module docstring)."""
        assert config.trace_file is not None
        source = config.trace_file
        conversations = read_conversations(source)
        window: Sequence[tuple[float, TraceLine | Conversation]] = replay_window(
            read_trace(source) if conversations is None else conversations,
            start_s=config.start_s,
            duration_s=config.duration_s,
            speed=config.speed,
        )
        if not window:
            raise ConfigError(
                f"{source}: no line in the window 'start_s' {config.start_s:g} + "
                f"'duration_s' {config.duration_s} (seconds after the first line)"
            )
        self.offsets = [off for off, _ in window]
        self.lines: list[TraceLine] = [t for _, t in window if isinstance(t, TraceLine)]
        self.conversations: list[Conversation] = [c for _, c in window if isinstance(c, Conversation)]
        self.speed = config.speed
        for t in self.lines:
            self._check_overhead(source, t.line, t.input_text, t.input_length, BLOCK_TOKENS, overhead)
        for c in self.conversations:
            if c.history != HISTORY_WHOLE and config.endpoint == "completions":
                raise ConfigError(
                    f"{source}: a multi-turn trace sends each turn as chat messages: "
                    "it needs 'endpoint: chat' or 'responses'"
                )
            for conv, turn, _ in _numbered(c):
                if conv.history == HISTORY_WHOLE:
                    self._check_overhead(
                        source, turn.line, None, turn.input_length, conv.block_tokens, overhead
                    )
        self._seed = config.seed
        self._vocab = tuple(vocab)
        self._overhead = overhead
        self._blocks: dict[tuple[Hashable, ...], str] = {}
        self._prompts: list[str] | None = None
        self._turn_texts: dict[tuple[str, int], str] | None = None

    @staticmethod
    def _check_overhead(
        source: str, line: int, text: str | None, length: int, block: int, overhead: int
    ) -> None:
        if text is None and min(length, block) < overhead:
            raise ConfigError(
                f"{source}:{line}: 'input_length' {length} is below the "
                f"{overhead} tokens every prompt costs on this server (BOS, chat template)"
            )

    def prepare(self) -> list[str]:
        """Every prompt of the window, built on the first call (before the stage's go); a
        conversation trace's turn texts (`turn_text`) with them."""
        if self._prompts is None:
            self._prompts = [
                t.input_text or self._synthetic(t.line, t.hash_ids, t.input_length) for t in self.lines
            ]
            self._turn_texts = {
                (conv.id, k): self._turn_text(conv, turn)
                for c in self.conversations
                for conv, turn, k in _numbered(c)
            }
        return self._prompts

    @property
    def requests(self) -> int:
        """The requests of the window: its lines, or its conversations' turns and sub-agents' turns."""
        return len(self.lines) + sum(c.requests() for c in self.conversations)

    @property
    def rate(self) -> float:
        """Mean requests/s of the window (all lines at once count as one second)."""
        span = self.offsets[-1] - self.offsets[0] if self.offsets else 0.0
        return (len(self.offsets) - 1) / span if span > 0 else float(len(self.offsets))

    def _block(self, key: tuple[Hashable, ...], words: int) -> str:
        """`words` one-token words of the block `key` (a block id and where it stands)."""
        key = (*key, words)
        text = self._blocks.get(key)
        if text is None:
            rng = random.Random(f"llmload-trace-block:{self._seed}:{':'.join(map(str, key[:-1]))}")
            text = self._blocks[key] = synthetic_text(rng, words, self._vocab)
        return text

    def _block_ids(self, hash_ids: Sequence[int] | None, length: int, block: int, own: str) -> list[Hashable]:
        ids: list[Hashable] = []
        ids += (hash_ids or ())[: -(-length // block)]
        return ids + [f"{own}.{i}" for i in range(len(ids), -(-length // block))]

    def _synthetic(
        self, own: Hashable, hash_ids: Sequence[int] | None, length: int, block: int = BLOCK_TOKENS
    ) -> str:
        """A whole prompt of `length` tokens on the server: the anchor, then its blocks."""
        texts = [ANCHOR]
        for i, block_id in enumerate(self._block_ids(hash_ids, length, block, f"line{own}")):
            tokens = min(block, length - block * i)
            words = tokens - self._overhead if i == 0 else tokens
            if words:
                texts.append(self._block((block_id, int(i == 0)), words))
        return " ".join(texts)

    def _turn_text(self, conv: Conversation, turn: ConversationTurn) -> str:
        """A turn's text: its whole prompt (`HISTORY_WHOLE`), or its user message (`HISTORY_DELTAS`:
        `input_length` words, each after a space, so each costs one token)."""
        if turn.messages is not None:  # authored: the last message's text (its prompt_hash is of all)
            content = turn.messages[-1].get("content")
            return content if isinstance(content, str) else json.dumps(content)
        if turn.input_text is not None:
            return turn.input_text
        if conv.history == HISTORY_WHOLE:
            return self._synthetic(
                f"{conv.id}.{turn.line}", turn.hash_ids, turn.input_length, conv.block_tokens
            )
        block = conv.block_tokens
        ids = self._block_ids(turn.hash_ids, turn.input_length, block, f"{conv.id}.{turn.line}")
        words = [
            self._block(("delta", block_id), min(block, turn.input_length - block * i))
            for i, block_id in enumerate(ids)
        ]
        return " " + " ".join(words)

    def turn_text(self, conv: Conversation, number: int) -> str:
        """The text of turn `number` (1-based) of a conversation of the window (`prepare`d)."""
        self.prepare()
        assert self._turn_texts is not None
        return self._turn_texts[(conv.id, number)]

    def request(self, index: int) -> tuple[str, int, int]:
        """(prompt, max_tokens, trace line number) of the window's line `index`."""
        t = self.lines[index]
        return self.prepare()[index], t.output_length, t.line


def _numbered(c: Conversation) -> list[tuple[Conversation, ConversationTurn, int]]:
    """Every turn of a conversation and of its sub-agents, with its conversation and 1-based number."""
    out = []
    for k, turn in enumerate(c.turns, start=1):
        out.append((c, turn, k))
        for sub in turn.subagents:
            out.extend(_numbered(sub))
    return out


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
            config.endpoint,
            list(vocab),
            overhead,
        ]
    )
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = TraceWorkload(config, vocab, overhead)
    return _CACHE[key]
