"""The continuous-batching engine: one asyncio task that runs timed decode steps.

Each step admits waiting sequences (FIFO, up to `max_num_seqs` running), lasts
`(base_ms + per_seq_ms * running + prefill_ms_per_token * admitted uncached prompt tokens
+ constrained_ms * running constrained sequences + waiting_ms * waiting sequences) * degrade`
milliseconds (a constrained sequence decodes under a grammar: a response_format, or tool_choice
required or named; the waiting ones are scanned by the scheduler every step: with waiting_ms > 0,
users past max_num_seqs slow every step and throughput falls, over-saturation), and at its end
gives every running sequence `k = 1 + Binomial(max_draft, p)` tokens (speculative decoding: one
verified token plus the accepted draft tokens), capped at what the sequence still has to
generate. Steps are scheduled at absolute deadlines on the loop
clock (next start = previous end), so timer lateness does not accumulate into drift. With
`batch_variance` > 0, each token of a step whose batch holds more than one sequence may be
flipped (llmload.sim.tokens.flips); the positions go on the sequence and into its truth line.

The engine never writes to a client: it posts events to each sequence's queue (`ADMITTED`, a
token count, or `STOPPED` when the engine shuts down) and the HTTP handler turns them into
bytes on the wire. When idle it waits on an event; there is no busy loop.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from llmload.core.checks import flag_type, number
from llmload.core.schema import setting
from llmload.sim.power import EnergyMeter
from llmload.sim.prefix_cache import PrefixCache
from llmload.sim.tokens import flips
from llmload.sim.truth import TruthLog

ADMITTED = 0  # event: the sequence joined the running batch (its first step started)
STOPPED = -1  # event: the engine shut down before the sequence finished
# Start the next step "now" instead of at the previous deadline when the loop is this late
# (an overloaded process), rather than firing a burst of catch-up steps.
MAX_LAG_S = 0.05


ENGINE = "engine"  # the --help section of the step-model flags


@dataclass(frozen=True, slots=True)
class StepModel:
    """Step duration model and speculative-decoding acceptance parameters (one flag each)."""

    base_ms: float = setting(
        27.2,
        help="fixed cost of one decode step, ms",
        parse=flag_type(number(0, 10_000), "base_ms"),
        group=ENGINE,
    )
    per_seq_ms: float = setting(
        6.0,
        help="step cost per running sequence, ms",
        parse=flag_type(number(0, 10_000), "per_seq_ms"),
        group=ENGINE,
    )
    prefill_ms_per_token: float = setting(
        0.0,
        help="added to the step that admits a prompt, per prompt token, ms",
        parse=flag_type(number(0, 1_000), "prefill_ms_per_token"),
        group=ENGINE,
    )
    accept_len: float = setting(
        4.5,
        help="mean tokens per sequence per step (speculative)",
        parse=flag_type(number(1, 65), "accept_len"),
        group=ENGINE,
    )
    max_draft: int = setting(
        7,
        help="draft tokens proposed per step",
        parse=flag_type(number(0, 64, integer=True), "max_draft"),
        group=ENGINE,
    )
    constrained_ms: float = setting(
        0.0,
        help="step cost per running sequence decoding under a constraint (response_format, "
        "tool_choice required or named: the grammar's mask each step), ms",
        parse=flag_type(number(0, 10_000), "constrained_ms"),
        group=ENGINE,
    )
    waiting_ms: float = setting(
        0.0,
        help="step cost per request waiting for a place in the batch (a scheduler that scans its "
        "queue every step): past max_num_seqs each added user slows every step, and throughput "
        "falls (over-saturation), ms",
        parse=flag_type(number(0, 10_000), "waiting_ms"),
        group=ENGINE,
    )
    degrade_pct_per_min: float = setting(
        0.0,
        help="step time grows linearly by this percent per minute since start (soak drift)",
        parse=flag_type(number(0, 10_000), "degrade_pct_per_min"),
        group=ENGINE,
    )

    def __post_init__(self) -> None:
        for name in (
            "base_ms",
            "per_seq_ms",
            "prefill_ms_per_token",
            "constrained_ms",
            "waiting_ms",
            "degrade_pct_per_min",
        ):
            value = getattr(self, name)
            if not 0.0 <= value < math.inf:  # also false for NaN
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        if self.max_draft < 0:
            raise ValueError("max_draft must be >= 0")
        if not 1.0 <= self.accept_len <= 1 + self.max_draft:
            raise ValueError(f"accept_len must be in [1, 1 + max_draft] = [1, {1 + self.max_draft}]")

    @property
    def accept_prob(self) -> float:
        """Per-draft-token acceptance probability giving a mean of `accept_len` tokens per step."""
        return 0.0 if self.max_draft == 0 else (self.accept_len - 1.0) / self.max_draft

    def duration_s(
        self,
        batch: int,
        prefill_tokens: int,
        minutes_since_start: float,
        constrained: int = 0,
        waiting: int = 0,
    ) -> float:
        ms = self.base_ms + self.per_seq_ms * batch + self.prefill_ms_per_token * prefill_tokens
        ms += self.constrained_ms * constrained + self.waiting_ms * waiting
        return ms * (1.0 + self.degrade_pct_per_min / 100.0 * minutes_since_start) / 1000.0


def draw_tokens(rand: Callable[[], float], p: float, max_draft: int) -> int:
    """One step's tokens for a sequence: the verified one plus each of `max_draft` draft tokens
    accepted with probability p (`max_draft` draws of `rand`, none when p is 0)."""
    return 1 + sum(1 for _ in range(max_draft) if rand() < p) if p > 0 else 1


def steps_to_generate(accept_seed: int, tokens: int, accept_len: float, max_draft: int) -> int:
    """The steps the engine takes to generate `tokens` for a sequence whose acceptance generator
    is seeded `accept_seed` (the truth log's), at the setting `accept_len`: the draws of
    `Engine._advance`, replayed."""
    p = StepModel(accept_len=accept_len, max_draft=max_draft).accept_prob
    rand = random.Random(accept_seed).random
    done = steps = 0
    while done < tokens:
        done += draw_tokens(rand, p, max_draft)
        steps += 1
    return steps


@dataclass(eq=False, slots=True)
class Sequence:
    """One request inside the engine; `events` is read by its HTTP handler."""

    prompt_tokens: int
    target_tokens: int  # tokens it will generate in total
    finish_reason: str  # "stop" or "length", reported when target_tokens are generated
    prompt_hash: int  # selects the generated words (see llmload.sim.tokens.completion_text)
    rng: random.Random
    events: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    generated: int = 0
    admitted_at: float | None = None  # epoch seconds
    aborted: bool = False
    flipped: list[int] = field(default_factory=list)  # token positions changed by batch variance
    block_keys: list[bytes] = field(default_factory=list)  # prefix-cache keys of its full prompt blocks
    cached_tokens: int = 0  # prompt tokens the prefix cache served at admission (not prefilled)
    constrained: bool = False  # decodes under a grammar (StepModel.constrained_ms)

    def abort(self) -> None:
        """Called by the handler when the client is gone: the engine drops it at the next step."""
        self.aborted = True


@dataclass(slots=True)
class Counters:
    """Cumulative engine counters behind `/metrics`."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    preemptions: int = 0  # the simulator never preempts; kept so the metric exists
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int = 0  # of which were cached


class Engine:
    """Continuous batching over `Sequence`s; start with `run()` as a task."""

    def __init__(
        self,
        model: StepModel,
        *,
        max_num_seqs: int = 256,
        max_model_len: int = 32768,
        truth: TruthLog | None = None,
        batch_variance: float = 0.0,
        prefix_cache: PrefixCache | None = None,
        energy: EnergyMeter | None = None,
    ) -> None:
        if max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if not 0.0 <= batch_variance <= 1.0:
            raise ValueError("batch_variance must be in [0, 1]")
        self.batch_variance = batch_variance
        self.model = model
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.truth = truth
        self.prefix_cache = prefix_cache
        self.energy = energy  # the simulated GPUs' power, integrated over the steps (/gpu/metrics)
        self.counters = Counters()
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time()
        self._epoch_offset = time.time() - self._t0

    def submit(self, seq: Sequence) -> None:
        """Queue a sequence; it is admitted at the start of a step (FIFO)."""
        self.waiting.append(seq)
        self._wake.set()

    def held_tokens(self) -> int:
        """Tokens the running sequences hold (prompt and generated)."""
        return sum(s.prompt_tokens + s.generated for s in self.running)

    def kv_cache_usage(self) -> float:
        """Tokens held by running sequences over a worst-case capacity (max_num_seqs * max_model_len)."""
        return self.held_tokens() / (self.max_num_seqs * self.max_model_len)

    async def run(self) -> None:
        """The engine loop; on cancellation every unfinished sequence gets `STOPPED`."""
        try:
            await self._loop_forever()
        finally:
            for seq in (*self.running, *self.waiting):
                seq.events.put_nowait(STOPPED)
            self.running.clear()
            self.waiting.clear()

    async def _loop_forever(self) -> None:
        next_start: float | None = None
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                next_start = None
            now = self._loop.time()
            start = now if next_start is None or now - next_start > MAX_LAG_S else next_start
            prefill = self._admit()
            self.running = [s for s in self.running if not self._dropped_if_aborted(s)]
            if not self.running:
                continue
            batch = len(self.running)
            constrained = sum(s.constrained for s in self.running)
            waiting = len(self.waiting)
            minutes = (start - self._t0) / 60.0
            end = start + self.model.duration_s(batch, prefill, minutes, constrained, waiting)
            if self.energy is not None:
                self.energy.step_started(start + self._epoch_offset, batch)
            await asyncio.sleep(end - self._loop.time())
            tokens = self._advance()
            if self.energy is not None:
                self.energy.step_ended(end + self._epoch_offset)
            if self.truth is not None:
                self.truth.step(
                    t_start=start + self._epoch_offset,
                    t_end=end + self._epoch_offset,
                    batch=batch,
                    tokens=tokens,
                    prefill_tokens=prefill,
                    gpu_w=None if self.energy is None else self.energy.model.step_w(batch),
                    constrained=constrained,
                    waiting=waiting,
                )
            next_start = end

    def _admit(self) -> int:
        """Move waiting sequences into the batch; returns their uncached prompt tokens (prefill
        cost): the prefix cache, when on, serves the rest (llmload.sim.prefix_cache)."""
        prefill = 0
        c = self.counters
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting.popleft()
            if self._dropped_if_aborted(seq):
                continue
            seq.admitted_at = time.time()
            self.running.append(seq)
            if self.prefix_cache is not None:
                seq.cached_tokens = self.prefix_cache.admit(seq.block_keys, seq.prompt_tokens)
                c.prefix_cache_queries += seq.prompt_tokens
                c.prefix_cache_hits += seq.cached_tokens
            c.prompt_tokens += seq.prompt_tokens
            prefill += seq.prompt_tokens - seq.cached_tokens
            seq.events.put_nowait(ADMITTED)
        return prefill

    def _advance(self) -> int:
        """End of step: every running sequence gains k tokens; finished ones leave the batch."""
        p = self.model.accept_prob
        drafts = self.model.max_draft
        c = self.counters
        total = 0
        still_running = []
        batch = len(self.running)
        for seq in self.running:
            if self._dropped_if_aborted(seq):
                continue
            k = min(draw_tokens(seq.rng.random, p, drafts), seq.target_tokens - seq.generated)
            seq.flipped += flips(seq.prompt_hash, seq.generated, k, batch, self.batch_variance)
            seq.generated += k
            total += k
            c.spec_drafts += 1
            c.spec_draft_tokens += drafts
            c.spec_accepted_tokens += k - 1
            seq.events.put_nowait(k)
            if seq.generated >= seq.target_tokens:
                self._count_finished(seq.finish_reason)
            else:
                still_running.append(seq)
        self.running = still_running
        c.generation_tokens += total
        return total

    def _dropped_if_aborted(self, seq: Sequence) -> bool:
        if seq.aborted:
            self._count_finished("abort")
        return seq.aborted

    def _count_finished(self, reason: str) -> None:
        finished = self.counters.finished
        finished[reason] = finished.get(reason, 0) + 1
