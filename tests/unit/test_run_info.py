"""The run file's one reader (llmload.core.files.run_info): what the ladder writes comes back typed,
what is not a run file is named in one line, and every file name of a run is written once in the
package (llmload.core.files.run_files)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from fixtures.paths import REPO

from llmload.core.config import ConfigError, load_config
from llmload.core.files import run_files
from llmload.core.files.records import RecordWriter
from llmload.core.files.run_errors import RunError
from llmload.core.files.run_files import RunFiles
from llmload.core.files.run_info import RunInfo, RunStage, read_run_file, read_run_info
from llmload.core.names import DETERMINISM_PHASE, MEASURE_PHASE, WARMUP_RUNG
from llmload.loadgen.run.error_log import RunErrors
from llmload.loadgen.run.record_sinks import RungReconciler
from llmload.loadgen.run.run_state import RunState
from llmload.loadgen.run.stage_protocol import StageProtocol


def test_every_key_the_ladder_writes_is_read(tmp_path):
    config = load_config(_write(tmp_path / "ladder.yaml", "rungs: [1, 2]\nmode: concurrency\n"))
    files = RunFiles(tmp_path / "run")
    errors = RunErrors(SimpleNamespace(process_exit_code=None), files.run)
    writer = RecordWriter(files.records, fsync=False, truncate=True)
    protocol = StageProtocol([], duration=None, stall_limit=60.0)
    state = RunState(config, "http://h", "m", writer, files, [], protocol, RungReconciler(config), errors)
    errors.attach(state.write_run_file)
    errors.record("http_400", "the server answered HTTP 400 (bad request): x")
    state.write_run_file(finished=True)
    writer.close()
    written = json.loads(files.run.read_text())
    fields = {f.name for f in dataclasses.fields(RunInfo)}
    assert set(written) <= fields, set(written) - fields
    info = read_run_info(files.prefix)
    assert info is not None and info.path == files.run
    assert (info.run_id, info.host, info.model, info.finished) == (state.run_id, "http://h", "m", True)
    assert info.records == str(files.records)
    assert info.errors == (RunError("http_400", "the server answered HTTP 400 (bad request): x"),)
    assert info.sweep_config().rungs == config.rungs and info.stages == ()


def test_stages_come_back_typed_and_an_older_file_gets_the_defaults(tmp_path):
    written = [
        {"rung": WARMUP_RUNG, "users": 4, "phase": MEASURE_PHASE, "name": "warmup c4", "started": 1,
         "finished": 2.5, "expected_requests": 4, "records": 4, "start": None},
        {"rung": 0, "users": 2, "phase": DETERMINISM_PHASE, "name": "probe", "started": 3.0,
         "finished": None},
        {"rung": 1, "users": 8, "started": 4.0, "finished": None},  # before phases and names
    ]  # fmt: skip
    info, warning = read_run_file(_run(tmp_path, {"stages": written, "config": {"rungs": [2, 8]}}))
    assert warning is None and info is not None
    assert info.stages == (
        RunStage(WARMUP_RUNG, 4, MEASURE_PHASE, "warmup c4", 1.0, 2.5, 4),
        RunStage(0, 2, DETERMINISM_PHASE, "probe", 3.0, None, None),
        RunStage(1, 8, MEASURE_PHASE, "rung 1", 4.0, None, None),
    )
    assert info.measured_stages == [info.stages[2]]  # neither the warm-up nor a probe
    assert info.finished is None and info.run_id is None and info.prompts is None and info.errors == ()


NOT_RUN_FILES = [  # a list, but of no stages with an int rung and users and numeric times
    "[1, 2]",
    '{"stages": {"rung": 0}}',
    '{"stages": [{"rung": "0", "users": 1}]}',
    '{"stages": [{"rung": 0, "users": 1, "finished": "soon"}]}',
    '{"stages": [{"rung": 0, "users": 1, "started": true}]}',
]


@pytest.mark.parametrize("text", ["{not json", *NOT_RUN_FILES])
def test_what_is_not_a_run_file_is_named_in_one_line(tmp_path, text):
    path = tmp_path / "run_run.json"
    path.write_text(text)
    info, warning = read_run_file(path)
    says = "not JSON" if text.startswith("{not") else "no list of stages"
    assert info is None and warning is not None and "\n" not in warning
    assert warning.startswith(f"{path}: {says}, not a run file")
    assert read_run_file(tmp_path / "absent_run.json") == (None, None)  # no file: nothing to say


def test_a_refused_config_names_the_run_file_and_keys_pick_what_a_reader_needs(tmp_path):
    path = _run(tmp_path, {"stages": [], "config": {"rungs": [1], "mode": "concurrency", "future_key": 1}})
    info = read_run_file(path)[0]
    assert info is not None and info.has_config
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        info.sweep_config()
    assert info.sweep_config(("rungs", "mode")).rungs == (1,)
    assert not read_run_file(_run(tmp_path, {"stages": [], "config": "x"}))[0].has_config  # type: ignore[union-attr]


def test_each_file_name_of_a_run_is_written_once_in_the_package():
    names = [v for k, v in vars(run_files).items() if k.isupper() and isinstance(v, str) and "." in v]
    assert {"sim_truth.jsonl", "decision.json", "_run.json", "_records.jsonl"} <= set(names)
    sources = [p.read_text() for p in (REPO / "llmload").rglob("*.py")]
    for name in names:
        found = sum(text.count(f'"{name}"') for text in sources)
        assert found == 1, f'"{name}" is written {found} times in llmload/'


def _run(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "run_run.json"
    path.write_text(json.dumps(data))
    return path


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_reader_gets_the_settings_it_reports_on_typed_whatever_the_run_files_age(tmp_path):
    """`recorded`: the whole configuration when it is accepted; an older or newer file's (a key this
    version does not know) gives the keys asked for; none of them recorded, or refused: None."""
    whole = {"rungs": [1, 4], "mode": "concurrency", "slo": {"ttft_ms": 250}, "gpu_metrics": "/gpu/metrics"}
    info = _info(tmp_path, whole)
    got = info.recorded("slo")
    assert got is not None and got.slo.ttft_ms == 250 and got.rungs == (1, 4)
    newer = _info(tmp_path, {**whole, "a_key_of_a_later_version": 1})
    assert newer.recorded("slo") is not None and newer.recorded("slo").slo.ttft_ms == 250
    assert newer.recorded("slo").rungs != (1, 4)  # only what was asked: the rest takes its default
    assert info.recorded("temperature") is None  # not recorded
    assert _info(tmp_path, {"rungs": "many"}).recorded("rungs") is None  # refused
    assert _info(tmp_path, {}).recorded("rungs") is None


def _info(tmp_path: Path, config: dict) -> RunInfo:
    info = read_run_file(_run(tmp_path, {"stages": [], "config": config}))[0]
    assert info is not None
    return info
