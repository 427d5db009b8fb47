"""The ladder's custom Locust messages: their names and the stage announcement they carry.

Owns the wire between the master (or the local process) and the processes that run users:
- `llmload_stage` (master -> users' processes): a `Stage` as plain data (`stage_message`), once to
  get ready and once more with its common `start_at`; its configuration travels as `config_to_dict`
  data, which the receiving process turns back into the same `SweepConfig` (`announced_stage`),
  parsed and validated once per distinct configuration, not once per stage or user.
- `llmload_user_ready` (user -> master): `{seq, user, worker}` once the user is ready for stage `seq`.
- `llmload_user_done` (user -> master): `{seq, requests, first_send}` once it sent its quota.
- `llmload_record` (user -> master): one `RequestRecord`, as its dict from a worker (msgpack); in a
  local run the record itself (Locust's local runner calls the listener with the object as sent).
- `llmload_rung_end` (master -> users' processes): `{seq}`: a rung run to a stated precision has
  reached it (or its cap of requests): its users send no more and finish what is in flight
  (`llmload.loadgen.run.precision_stop`).
- `llmload_health` (users' process -> master): the generator's health samples, once a second
  (`llmload.loadgen.monitor.health_sampler` sends them).
Who sends and who handles each is `llmload.loadgen.run.ladder`'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import orjson

from llmload.core.config import SweepConfig, parse_config, section_data
from llmload.core.names import DETERMINISM_PHASE, MEASURE_PHASE, WARMUP_PHASE, WARMUP_RUNG, rung_name
from llmload.core.workload.lengths import Lengths

MSG_STAGE = "llmload_stage"
MSG_RECORD = "llmload_record"
MSG_USER_DONE = "llmload_user_done"
MSG_USER_READY = "llmload_user_ready"
MSG_HEALTH = "llmload_health"
MSG_RUNG_END = "llmload_rung_end"


@dataclass(frozen=True, slots=True)
class Stage:
    """One step of the ladder as announced to the users."""

    seq: int  # 0, 1, 2, ... in announcement order
    rung: int  # rung index, or WARMUP_RUNG
    users: int
    requests_per_user: int
    model: str
    config: SweepConfig  # the run's, or a capacity probe's derived from it
    start_at: float | None = None  # epoch seconds all users start at; None: get ready
    deadline: float | None = None  # epoch seconds for time-based rungs, else None
    rate: float | None = None  # rate mode: requests/s (users are the client slots); None: concurrency
    slots: dict[str, list[int]] | None = None  # rate mode, with start_at: each process's [lo, hi) slots
    prompt_words: int | None = None  # synthetic prompts: words per prompt (calibrated on the server)
    prompt_vocab: list[str] | None = None  # synthetic prompts, traces, sessions: the one-token words
    prompt_overhead: int | None = None  # trace: tokens every prompt costs (BOS, chat template, anchor)
    run_id: str | None = None  # the run's id, which its records carry
    probe: bool = False  # the greedy-determinism check's probe after rung `rung` (not measured)

    @property
    def phase(self) -> str:
        """The phase its records carry (llmload.core.names)."""
        if self.rung == WARMUP_RUNG:
            return WARMUP_PHASE
        return DETERMINISM_PHASE if self.probe else MEASURE_PHASE

    @property
    def name(self) -> str:
        return rung_name(self.rung, self.users, self.phase)


def stage_message(stage: Stage) -> dict[str, Any]:
    """A stage as the `llmload_stage` message's plain data."""
    data = {f.name: getattr(stage, f.name) for f in fields(Stage)}
    data["config"] = config_to_dict(stage.config)
    return data


_ANNOUNCED: dict[bytes, SweepConfig] = {}  # a configuration's canonical JSON -> the configuration
_MAX_ANNOUNCED = 64  # distinct configurations kept (a run has one, and one per capacity probe)


def announced_stage(data: dict[str, Any]) -> Stage:
    """The stage a `llmload_stage` message carries. Its configuration is parsed and validated once
    per process for each distinct configuration (every stage of a run announces the same one)."""
    key = orjson.dumps(data["config"], option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    config = _ANNOUNCED.get(key)
    if config is None:
        config = parse_config(data["config"], source="<announced by the master>")
        if len(_ANNOUNCED) >= _MAX_ANNOUNCED:
            _ANNOUNCED.clear()
        _ANNOUNCED[key] = config
    return Stage(**{**data, "config": config})


def config_to_dict(config: SweepConfig) -> dict[str, Any]:
    """A SweepConfig as plain data (for messages and the run file); round-trips via parse_config."""
    data = section_data(config, Lengths.as_mapping)
    data.pop("source")
    if config.sessions is not None:
        data["sessions"] = section_data(config.sessions, Lengths.as_mapping)
    return data
