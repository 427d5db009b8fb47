"""A run's errors through its run file: the Locust side's recorder writes them (in order, each once,
with the exit code it set), the run-file reader of analysis reads them back, and `llmload sweep`
prints them from there; an unknown kind is refused when made and read as `unknown`."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from fixtures.paths import REPO
from fixtures.runs import make_record

from llmload.cli.sweep import report
from llmload.core import exit_codes
from llmload.core.config import load_config
from llmload.core.files.records import RecordWriter, write_records
from llmload.core.files.run_errors import KINDS, UNKNOWN, RunError, errors_of
from llmload.core.files.run_files import RunFiles
from llmload.core.files.run_info import read_run_info
from llmload.loadgen.run.error_log import RunErrors
from llmload.loadgen.run.record_sinks import RungReconciler
from llmload.loadgen.run.run_state import RunState
from llmload.loadgen.run.stage_protocol import StageProtocol
from llmload.runner.sweep_run import SweepRun

PREFLIGHT = "http://127.0.0.1:9/v1/models: cannot reach the server: [Errno 111] Connection refused"


def read_back(prefix: Path) -> list[tuple[str, str, int | None]]:
    """What a reader finds in the run file: through the one run-file reader, as the sweep reads."""
    info = read_run_info(prefix)
    assert info is not None
    return [(e.kind, e.message, e.exit_code) for e in info.errors]


def test_before_the_run_exists_errors_make_a_run_file_of_their_own(tmp_path):
    env = SimpleNamespace(process_exit_code=None)
    prefix = tmp_path / "out" / "run"  # the folder does not exist yet (no --csv: reports/)
    errors = RunErrors(env, RunFiles(prefix).run)
    errors.record("preflight", PREFLIGHT, exit_codes.BAD_INPUT)
    assert env.process_exit_code == exit_codes.BAD_INPUT
    assert read_back(prefix) == [("preflight", PREFLIGHT, 2)]
    assert read_run_info(prefix).stages == ()  # a run file the table reads: no rung started


def test_errors_keep_their_order_each_once_and_log_once(tmp_path, caplog):
    env = SimpleNamespace(process_exit_code=None)
    errors = RunErrors(env, RunFiles(tmp_path / "run").run)
    bad = "the server answered HTTP 400 (bad request): too long"
    tokens = "token reconciliation failed: rung01 c1: 12 tokens, the server said 16"
    with caplog.at_level("ERROR", logger="llmload"):
        errors.record("http_400", bad)
        errors.record("reconciliation", tokens, exit_codes.RECONCILIATION)
        errors.record("http_400", bad)  # again: neither kept nor logged twice
        errors.record("interrupted", "the run stopped", exit_codes.INTERRUPTED)
    assert read_back(tmp_path / "run") == [("http_400", bad, None), ("reconciliation", tokens, 3),
                                           ("interrupted", "the run stopped", 4)]  # fmt: skip
    assert [r.getMessage() for r in caplog.records] == [
        f"llmload: {m}" for m in (bad, tokens, "the run stopped")
    ]
    assert env.process_exit_code == exit_codes.INTERRUPTED  # the last code set; a report sets none


def test_without_a_run_file_an_error_is_logged_and_sets_the_code_only(tmp_path, caplog):
    env = SimpleNamespace(process_exit_code=None)
    with caplog.at_level("ERROR", logger="llmload"):
        RunErrors(env).record("bad_config", "ladder.yaml: unknown key 'rungz'", exit_codes.BAD_INPUT)
    assert env.process_exit_code == exit_codes.BAD_INPUT
    assert caplog.records[0].getMessage() == "llmload: ladder.yaml: unknown key 'rungz'"
    assert list(tmp_path.iterdir()) == []


def test_once_the_run_exists_its_own_run_file_carries_them_finished_stays_finished(tmp_path):
    config = load_config(write(tmp_path / "ladder.yaml", "rungs: [1]\n"))
    files = RunFiles(tmp_path / "run")
    errors = RunErrors(SimpleNamespace(process_exit_code=None), files.run)
    errors.record("http_400", "the server answered HTTP 400 (bad request): early")  # before the run
    writer = RecordWriter(files.records, fsync=False, truncate=True)
    protocol = StageProtocol([], duration=None, stall_limit=60.0)
    state = RunState(config, "http://h", "m", writer, files, [], protocol, RungReconciler(config), errors)
    errors.attach(state.write_run_file)
    state.write_run_file(finished=True)
    errors.record("soak", "soak verdict BREACHED (exit code 1)", 1)  # at quitting, after the end
    info = read_run_info(files.prefix)
    assert info.run_id == state.run_id and info.finished is True and info.model == "m"
    assert [e.message for e in info.errors] == [
        "the server answered HTTP 400 (bad request): early",
        "soak verdict BREACHED (exit code 1)",
    ]
    writer.close()


def test_an_unknown_kind_is_refused_when_made_and_read_as_unknown():
    with pytest.raises(ValueError, match="'typo' is not one of bad_config, preflight"):
        RunError("typo", "x")
    with pytest.raises(ValueError):
        RunErrors(SimpleNamespace(process_exit_code=None)).record("typo", "x")
    info = {"errors": [
        {"kind": "from_a_later_llmload", "message": "why it ended", "exit_code": 4},
        {"kind": ["not", "hashable"], "message": "still said", "exit_code": True},
        {"kind": "preflight", "message": 42}, "a string", None,  # nothing to print: skipped
    ]}  # fmt: skip
    assert errors_of(info) == [RunError(UNKNOWN, "why it ended", 4), RunError(UNKNOWN, "still said", None)]
    assert errors_of({"stages": []}) == errors_of(None) == []
    assert UNKNOWN in KINDS  # documented with the others (docs/configuration.md)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def sweep_run(tmp_path: Path, returncode: int, errors: list[dict] | None, *, age_s: float = 0.0) -> SweepRun:
    """A finished sweep's SweepRun whose Locust wrote (or did not write) a run file of its own."""
    log = write(tmp_path / "locust.log", "ERROR/llmload: llmload: what the log says is not parsed\n")
    run = SweepRun(tmp_path / "run", returncode, None, log, started_at=1_000_000.0)
    if errors is not None:
        run.files.run.write_text(json.dumps({"stages": [], "errors": errors}))
        os.utime(run.files.run, (1_000_000.0 + age_s, 1_000_000.0 + age_s))
    return run


def test_the_sweep_says_the_run_files_reason_for_bad_input(tmp_path, capsys):
    entries = [
        RunError("http_400", "reported first").to_dict(),
        RunError("preflight", PREFLIGHT, 2).to_dict(),
    ]
    assert report(sweep_run(tmp_path, exit_codes.BAD_INPUT, entries), "table") == exit_codes.BAD_INPUT
    assert capsys.readouterr().err.splitlines() == [f"llmload sweep: error: {PREFLIGHT}"]


OLD = [RunError("preflight", "old", 2).to_dict()]


@pytest.mark.parametrize(
    ("errors", "age_s"), [(None, 0.0), (OLD, -5.0)], ids=["no-run-file", "another-runs-file"]
)
def test_without_its_own_run_file_the_sweep_names_the_exit_code_and_the_log(tmp_path, capsys, errors, age_s):
    run = sweep_run(tmp_path, exit_codes.BAD_INPUT, errors, age_s=age_s)
    assert report(run, "table") == exit_codes.BAD_INPUT
    assert capsys.readouterr().err.splitlines() == [
        f"llmload sweep: error: locust exited with code 2; see {run.log}"
    ]


def test_the_sweep_prints_every_error_under_the_table_in_order(tmp_path, capsys):
    tokens = "token reconciliation failed: rung01 c1: 8 tokens, the server said 9"
    entries = [RunError("http_400", "the server answered HTTP 400 (bad request): x").to_dict(),
               RunError("reconciliation", tokens, 3).to_dict()]  # fmt: skip
    run = sweep_run(tmp_path, exit_codes.RECONCILIATION, entries)
    write_records(run.records, [make_record(1000.0, 1001.0, 8, 0.1, max_tokens=8)])
    assert report(run, "table") == exit_codes.RECONCILIATION
    out, err = capsys.readouterr()
    assert out.splitlines()[0].split()[:2] == ["conc", "agg_tok/s"]
    assert [line for line in err.splitlines() if line.startswith("llmload sweep: ")] == [
        "llmload sweep: the server answered HTTP 400 (bad request): x",
        f"llmload sweep: {tokens}",
    ]


def test_the_docs_list_every_kind():
    page = (REPO / "docs" / "configuration.md").read_text()
    table = page.split("The kinds (`llmload/core/files/run_errors.py`")[1].split("\n\n")[1]
    listed = re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE)
    assert listed == list(KINDS)
