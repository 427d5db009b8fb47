"""The measured run the twin is fitted to: read with its run file, fitted, and its ladder.

`load_measured(source)`: the run a user named (prefix, records file or folder) with its figures and
its run file, which names the ladder the twin replays (a capacity search is no ladder: refused);
`fit_run`: `llmload.analysis.twin.fit.fit_twin` on its records, with the acceptance its server's
counters gave and its scrapes; `ladder_of`: the run's own ladder (its run file's configuration),
with other rungs when asked (--rungs), checked. Each raises ConfigError or RecordFileError (one
line) for what cannot be replayed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmload.analysis.run.postprocess import RunResult, load_run
from llmload.analysis.run.records_pass import StartChild
from llmload.analysis.run.server_metrics import load_server_metrics, metrics_path, read_samples
from llmload.analysis.twin.fit import TwinFit, fit_twin
from llmload.core.config import ConfigError, parse_config
from llmload.core.files.records import RecordFileError
from llmload.core.files.run_files import RunFiles
from llmload.core.files.run_info import RunInfo

RUN_FILE = "the run file"  # the source a replayed ladder is checked as


def load_measured(source: str, start_child: StartChild | None = None) -> tuple[RunResult, RunInfo]:
    """The run `source` names, and its run file (RecordFileError without one); `start_child`:
    how `load_run` may start its second process."""
    files = RunFiles.find(source)
    result = load_run(files, with_metrics=True, start_child=start_child)
    info = result.run_info
    if not info or not info.has_config:
        raise RecordFileError(f"{files.run}: no run file: the twin replays the ladder it names")
    if info.sweep_config().mode == "capacity":
        raise ConfigError(f"{files.run}: a capacity search is not a ladder to replay; give a sweep")
    return result, info


def fit_run(result: RunResult) -> TwinFit:
    """The twin fitted to the run's records, its server's acceptance and its scrapes."""
    server = load_server_metrics(result.prefix, result.iter_records())
    path = metrics_path(result.prefix)
    scrapes = [s.values for s in read_samples(path)[1]] if path.exists() else []
    return fit_twin(
        result.iter_records(),
        accept_from_counters=None if server is None else server.run_accept_len,
        scrapes=scrapes,
    )


def ladder_of(info: RunInfo, rungs: Sequence[int | float] | None = None) -> dict[str, Any]:
    """The run's own ladder (its run file's config), with `rungs` instead of its own when given;
    checked (ConfigError: a bad --rungs is named as the flag)."""
    config = dict(info.config)
    if rungs is not None:
        config["rungs"] = list(rungs)
    try:
        parse_config(config, source=RUN_FILE)
    except ConfigError as e:
        if rungs is None:
            raise
        given = ",".join(map(str, rungs))
        raise ConfigError(f"--rungs {given}: {str(e).removeprefix(RUN_FILE + ': ')}") from None
    return config
