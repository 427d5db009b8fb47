"""The run file, `<prefix>_run.json`, read once into a typed object: the one reader.

The ladder writes it whole at every stage boundary (`llmload.loadgen.run.run_state`, through
`run_files.write_run_json`); everything that needs it reads it here (`read_run_file`) and gets a
`RunInfo`: the run's id, target and model, whether the ladder finished (or stopped early,
over-saturated: `stopped_early`), its stages (`RunStage`), its errors
(`llmload.core.files.run_errors.RunError`) and its configuration as written (typed by
`RunInfo.sweep_config`, which names the run file when it is refused). A file that is not a run
file (not JSON, not an object, no list of stages each with an int rung and users and a numeric or
null `finished`) is no RunInfo, and the reader says why in one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmload.core.config import ConfigError, SweepConfig, parse_config
from llmload.core.files.run_errors import RunError, errors_of
from llmload.core.files.run_files import RunFiles
from llmload.core.names import MEASURE_PHASE, WARMUP_RUNG


@dataclass(frozen=True, slots=True)
class RunStage:
    """One stage the ladder started: a rung (WARMUP_RUNG for the warm-up), its users, its phase
    (measured, or a probe's), when it started and finished (None: not finished), the requests it
    was expected to send (None: open-ended, or a run file from before the key)."""

    rung: int
    users: int
    phase: str = MEASURE_PHASE
    name: str = ""
    started: float | None = None
    finished: float | None = None
    expected_requests: int | None = None

    @property
    def measured(self) -> bool:
        """A measured rung: neither the warm-up nor a probe."""
        return self.rung != WARMUP_RUNG and self.phase == MEASURE_PHASE


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A run file's contents (module docstring); `path`: where it was read."""

    path: Path
    stages: tuple[RunStage, ...]
    config: Mapping[str, Any]  # as written (empty when the file has none): sweep_config() types it
    run_id: str | None = None
    host: str | None = None
    model: str | None = None
    records: str | None = None  # the records file the run wrote, when the file names it
    finished: bool | None = None  # None: a run file that does not say
    prompts: Mapping[str, Any] | None = None  # the calibrated prompts' shared prefix, when known
    errors: tuple[RunError, ...] = ()
    stopped_early: str | None = None  # the ladder stopped early, over-saturated: the line that says so
    # per worker, the master's measurements of its clock as written (llmload.loadgen.run.clock_sync)
    clock_offsets: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)

    @property
    def has_config(self) -> bool:
        return bool(self.config)

    def sweep_config(self, keys: Iterable[str] | None = None) -> SweepConfig:
        """The run's configuration, checked (ConfigError names the run file); `keys`: only these
        keys of it (a reader that needs a few does not mind the others of an older or newer run)."""
        raw = self.config if keys is None else {k: self.config[k] for k in keys if k in self.config}
        return parse_config(dict(raw), source=str(self.path))

    def recorded(self, *keys: str) -> SweepConfig | None:
        """The run's configuration for a reader that reports on `keys` of it: None when the run
        file recorded none of them; the whole configuration when it is accepted, else (an older or
        newer run's file) only `keys` of it, None when they are refused too; a key it did not
        record takes its default. Every reader of the configuration goes through here or
        `sweep_config`: none indexes the mapping."""
        if not any(k in self.config for k in keys):
            return None
        for subset in (None, keys):
            try:
                return self.sweep_config(subset)
            except ConfigError:
                continue
        return None

    @property
    def measured_stages(self) -> list[RunStage]:
        return [s for s in self.stages if s.measured]


def read_run_file(path: Path) -> tuple[RunInfo | None, str | None]:
    """(the run file at `path`, None); (None, None) when there is none; (None, one line naming it)
    when it cannot be read or is not a run file."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"{path}: cannot read the run file ({e.strerror or e}): ignored"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None, f"{path}: not JSON, not a run file: ignored (which rungs finished is unknown)"
    stages = data.get("stages") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(stages, list) or not all(map(_stage_ok, stages)):
        return None, f"{path}: no list of stages, not a run file: ignored (which rungs finished is unknown)"
    config, prompts, finished = data.get("config"), data.get("prompts"), data.get("finished")
    return RunInfo(
        path=path,
        stages=tuple(_stage(s) for s in stages),
        config=config if isinstance(config, dict) else {},
        run_id=_text(data.get("run_id")),
        host=_text(data.get("host")),
        model=_text(data.get("model")),
        records=_text(data.get("records")),
        finished=finished if isinstance(finished, bool) else None,
        prompts=prompts if isinstance(prompts, dict) else None,
        errors=tuple(errors_of(data)),
        stopped_early=_text(data.get("stopped_early")),
        clock_offsets=_clock_offsets(data.get("clock_offsets")),
    ), None


def read_run_info(prefix: str | Path | RunFiles) -> RunInfo | None:
    """The run file of the run at `prefix` (or of these files), or None when absent or not one."""
    files = prefix if isinstance(prefix, RunFiles) else RunFiles(Path(prefix))
    return read_run_file(files.run)[0]


def _stage_ok(stage: Any) -> bool:
    return (
        isinstance(stage, dict)
        and all(type(stage.get(k)) is int for k in ("rung", "users"))
        and _number(stage.get("finished"))
        and _number(stage.get("started"))
    )


def _number(value: Any) -> bool:
    return value is None or (isinstance(value, float | int) and not isinstance(value, bool))


def _stage(stage: Mapping[str, Any]) -> RunStage:
    phase, name, expected = stage.get("phase"), stage.get("name"), stage.get("expected_requests")
    started, finished = stage.get("started"), stage.get("finished")
    return RunStage(
        rung=stage["rung"],
        users=stage["users"],
        phase=phase if isinstance(phase, str) else MEASURE_PHASE,
        name=name if isinstance(name, str) else f"rung {stage['rung']}",
        started=None if started is None else float(started),
        finished=None if finished is None else float(finished),
        expected_requests=expected if type(expected) is int else None,
    )


def _clock_offsets(value: Any) -> dict[str, list[Mapping[str, Any]]]:
    """`clock_offsets` when it is one (per worker name, a list of measurements each with its
    time `t`), else none."""
    if not isinstance(value, dict):
        return {}
    return {
        str(worker): history
        for worker, history in value.items()
        if isinstance(history, list) and all(isinstance(h, dict) and _number(h.get("t")) for h in history)
    }


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
