"""The ladder's custom Locust messages: their names and the stage announcement they carry.

Owns the wire between the master (or the local process) and the processes that run users:
- `llmload_stage` (master -> users' processes): a `Stage` as plain data, once to get ready and once
  more with its common `start_at`; its configuration travels as `config_to_dict` data, which
  `parse_config` turns back into the same `SweepConfig`.
- `llmload_user_ready` (user -> master): `{seq, user, worker}` once the user is ready for stage `seq`.
- `llmload_user_done` (user -> master): `{seq, requests, first_send}` once it sent its quota.
- `llmload_record` (user -> master): one `RequestRecord` as its dict.
(`llmload_health`, the generator's health samples, is `llmload.loadgen.health_sampler`'s.)
Who sends and who handles each is `llmload.loadgen.ladder`'s docstring.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from llmload.core.config import SweepConfig, parse_config
from llmload.core.lengths import Lengths
from llmload.core.names import WARMUP_RUNG, rung_name

MSG_STAGE = "llmload_stage"
MSG_RECORD = "llmload_record"
MSG_USER_DONE = "llmload_user_done"
MSG_USER_READY = "llmload_user_ready"


@dataclass(frozen=True, slots=True)
class Stage:
    """One step of the ladder as announced to the users."""

    seq: int  # 0, 1, 2, ... in announcement order
    rung: int  # rung index, or WARMUP_RUNG
    users: int
    requests_per_user: int
    model: str
    config: dict[str, Any]
    start_at: float | None = None  # epoch seconds all users start at; None: get ready
    deadline: float | None = None  # epoch seconds for time-based rungs, else None
    rate: float | None = None  # rate mode: requests/s (users are the client slots); None: concurrency
    slots: dict[str, list[int]] | None = None  # rate mode, with start_at: each process's [lo, hi) slots
    prompt_words: int | None = None  # synthetic prompts: words per prompt (calibrated on the server)
    prompt_vocab: list[str] | None = None  # synthetic prompts, traces, sessions: the one-token words
    prompt_overhead: int | None = None  # trace: tokens every prompt costs (BOS, chat template, anchor)

    @property
    def phase(self) -> str:
        return "warmup" if self.rung == WARMUP_RUNG else "measure"

    @property
    def name(self) -> str:
        return rung_name(self.rung, self.users)

    def sweep_config(self) -> SweepConfig:
        return parse_config(self.config, source="<announced by the master>")


def config_to_dict(config: SweepConfig) -> dict[str, Any]:
    """A SweepConfig as plain data (for messages and the run file); round-trips via parse_config."""
    data = dataclasses.asdict(config)
    data.pop("source")
    for key in ("prompt_tokens", "max_tokens"):
        if isinstance(lengths := getattr(config, key), Lengths):
            data[key] = lengths.as_mapping()
    return data
