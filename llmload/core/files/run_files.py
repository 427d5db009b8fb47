"""Every file of a run, named in one place.

A run is a prefix (Locust's `--csv`, e.g. `reports/sweep-…/run`); its files are the prefix plus a
suffix, except a records file named otherwise (Locust's `--records other.jsonl`), which the
run's files carry. `RunFiles.find(path)` accepts what a user types: the prefix, the records file,
or a folder holding exactly one run.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmload.core.command_line import path_text
from llmload.core.files.records import RecordFileError

RECORDS = "_records.jsonl"  # one RequestRecord per request (llmload.core.files.records)
RUN = "_run.json"  # the ladder's own account: stages, start times, finished or not, the config
HEALTH = "_health.jsonl"  # the generator's health samples (llmload.loadgen.monitor.health_sampler)
ENVIRONMENT = "_env.json"  # what produced the run (llmload.core.run_environment)
SERVER_METRICS = "_server_metrics.jsonl"  # scrapes of the server's /metrics
# the generation requests sent before the ladder (per-chunk usage probe, calibration), as records
CALIBRATION = "_calibration.jsonl"
GPU_METRICS = "_gpu_metrics.jsonl"  # scrapes of a DCGM exporter, or NVML's readings (--gpu-metrics)
STATS_CSV = "_stats.csv"  # Locust's own CSVs
FAILURES_CSV = "_failures.csv"
COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".zip")  # suffixes of files a run name never has
# every file a run writes at its prefix (Locust's CSVs included): what a new run into it replaces
RUN_SUFFIXES = (RECORDS, RECORDS + ".chunks", RUN, HEALTH, ENVIRONMENT, SERVER_METRICS, GPU_METRICS,
                STATS_CSV, FAILURES_CSV, "_exceptions.csv", "_stats_history.csv")  # fmt: skip
# `llmload sweep`'s own files in its --run-dir, beside the run's (a folder's names, not suffixes)
SIM_TRUTH = "sim_truth.jsonl"  # the simulator's ground truth of every request it answered
SIM_LOG = "sim.log"  # the simulator's log
LOCUST_LOG = "locust.log"  # Locust's log
# `llmload twin`'s own files in its --run-dir, beside the replays' folders
DECISION = "decision.json"  # the decision at the production rungs (llmload.analysis.twin.decision)
DECISION_HTML = "decision.html"


class _Suffix:
    """A file of the run: the prefix plus this suffix (read as an attribute of RunFiles)."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix

    def __get__(self, files: RunFiles, owner: type | None = None) -> Path:
        return Path(f"{files.prefix}{self.suffix}")


@dataclass(frozen=True, slots=True)
class RunFiles:
    """The files of the run at `prefix`."""

    prefix: Path
    records_file: Path | None = None  # the records, when not at <prefix>_records.jsonl

    @classmethod
    def of_records(cls, records: str | Path) -> RunFiles:
        """The run whose records file is `records` (`<prefix>_records.jsonl`, or any `.jsonl`:
        then the prefix is its name without `.jsonl`, and the records stay where they are); a
        name of neither kind is the prefix itself."""
        text = str(records)
        if text.endswith(RECORDS) or not text.endswith(".jsonl"):  # a prefix: the records beside it
            return cls(Path(text.removesuffix(RECORDS)))
        return cls(Path(text.removesuffix(".jsonl")), Path(records))

    @property
    def records(self) -> Path:
        return self.records_file or Path(f"{self.prefix}{RECORDS}")

    @classmethod
    def find(cls, path: str | Path) -> RunFiles:
        """The run a user named: its prefix, its records file, or a folder holding one run. A
        compressed file is refused by name (llmload reads its records as plain lines)."""
        p = Path(path)
        if p.suffix in COMPRESSED:
            raise RecordFileError(
                f"{path_text(p)}: a compressed file ({p.suffix}); the records are read as plain JSON lines: "
                f"decompress it first"
            )
        if p.is_dir():
            found = sorted(p.glob(f"*{RECORDS}"))
            if len(found) != 1:
                what = "no" if not found else f"{len(found)}"
                raise RecordFileError(f"{p}: {what} *{RECORDS} files; give the run's prefix")
            return cls.of_records(found[0])
        return cls.of_records(p)

    run = _Suffix(RUN)
    health = _Suffix(HEALTH)
    environment = _Suffix(ENVIRONMENT)
    server_metrics = _Suffix(SERVER_METRICS)
    calibration = _Suffix(CALIBRATION)
    gpu_metrics = _Suffix(GPU_METRICS)
    stats_csv = _Suffix(STATS_CSV)
    failures_csv = _Suffix(FAILURES_CSV)

    def output(self, name: str) -> Path:
        """A file a report writes beside the run: `<prefix>_<name>` (e.g. "soak.json")."""
        return Path(f"{self.prefix}_{name}")


def names_a_table(source: str | Path) -> bool:
    """Whether a command's input names a sweep table typed in by hand (CSV, markdown, plain) rather
    than a run: a file that is no records file. Any `.jsonl` is a records file, as
    `RunFiles.of_records` reads it (`<prefix>_records.jsonl` or a records file named otherwise)."""
    path = Path(source)
    return path.is_file() and path.suffix != ".jsonl"


def write_run_json(path: Path, data: dict[str, Any]) -> None:
    """A run file, replaced whole (a reader never sees half of one). An OSError names `path`
    (the file the run could not write), and the half-written temporary file is removed."""
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e
