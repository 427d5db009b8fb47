"""The pieces that make a broken run loud: the error boundary of every command, the status pipe,
the run folder's claim, the records file's lock, and the truth log that stops its server."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from llmload.core.command_line import ArgumentParser, command, cut, one_line
from llmload.core.config import ConfigError
from llmload.core.exit_codes import BAD_INPUT, WRITE_FAILED
from llmload.core.files.output_paths import claim_run_folder, fresh_folder
from llmload.core.files.records import FileInUse, RecordWriter, being_written
from llmload.core.files.run_files import RunFiles
from llmload.core.status_pipe import STATUS_FD_ENV, StatusPipe, tell
from llmload.sim.truth import TruthLog


def test_one_line_cuts_every_quoted_value_and_breaks_no_line():
    text = one_line(f"invalid choice: '{'a' * 5000}' (choose from 'x')\nsecond")
    assert "\n" not in text and len(text) < 300 and text.endswith("(choose from 'x')\\nsecond")
    assert cut("x" * 1000).startswith("x" * 60) and "..." in cut("x" * 1000) and len(cut("x" * 1000)) == 100


def test_argparse_refusals_are_one_line_with_the_value_cut(capsys):
    p = ArgumentParser(prog="llmload x")
    p.add_argument("--format", choices=["table", "csv"])
    with pytest.raises(SystemExit) as stop:
        p.parse_args(["--format", "z" * 100_000, "extra" * 1000])
    err = capsys.readouterr().err
    assert stop.value.code == BAD_INPUT and err.count("\n") == 1 and len(err) < 400, err[:500]


def test_the_boundary_names_the_flag_of_a_path_and_the_disk_gets_its_own_code(capsys):
    @command("llmload x")
    def main(argv: list[str] | None = None) -> int:
        if "--full" in (argv or []):
            raise OSError(errno.ENOSPC, "No space left on device", "out/run/report.html")
        raise OSError(errno.ENAMETOOLONG, "File name too long", "p" * 5000 + "/x")

    assert main(["--out", "p" * 5000]) == BAD_INPUT
    err = capsys.readouterr().err
    assert (
        err.startswith("llmload x: error: --out ppp") and "[Errno 36 ENAMETOOLONG]" in err and len(err) < 400
    )
    assert main(["--out", "out/run", "--full"]) == WRITE_FAILED
    assert (
        "--out out/run: out/run/report.html: [Errno 28 ENOSPC] No space left on device"
        in capsys.readouterr().err
    )


def test_the_boundary_leaves_a_closed_pipe_and_other_errors_alone():
    @command("llmload x")
    def main(argv: list[str] | None = None) -> int:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        main([])


def test_a_child_tells_the_pipe_why_it_stopped(monkeypatch):
    with StatusPipe() as status:
        monkeypatch.setenv(STATUS_FD_ENV, status.child_env()[STATUS_FD_ENV])
        tell("locust", "write_failed", "cannot write x: [Errno 28 ENOSPC]", WRITE_FAILED)
        tell("llmload sim", "refused", "y" * 10_000, BAD_INPUT)
        told = status.read()
    assert [(t.source, t.exit_code) for t in told] == [("locust", WRITE_FAILED), ("llmload sim", BAD_INPUT)]
    assert told[0].message == "cannot write x: [Errno 28 ENOSPC]" and len(told[1].message) == 2000
    monkeypatch.delenv(STATUS_FD_ENV)
    tell("locust", "io", "no pipe: nothing happens")  # without the variable


def test_a_run_folder_is_claimed_once_and_an_earlier_run_is_refused_unless_overwritten(tmp_path):
    folder = tmp_path / "run"
    files = RunFiles(folder / "run")
    with (
        claim_run_folder("--run-dir", folder, files),
        pytest.raises(ConfigError, match="in use by another run"),
    ):
        claim_run_folder("--run-dir", folder, files)
    (folder / "run_records.jsonl").write_text("{}\n")
    (folder / "sim_truth.jsonl").write_text("{}\n")
    (folder / "notes.txt").write_text("mine\n")
    with pytest.raises(ConfigError, match=r"holds an earlier run \(.*run_records.jsonl\).*--overwrite"):
        claim_run_folder("--run-dir", folder, files)
    claim_run_folder("--run-dir", folder, files, overwrite=True).close()
    assert sorted(p.name for p in folder.iterdir()) == [".llmload.lock", "notes.txt"]


def test_a_fresh_folder_is_never_one_that_existed(tmp_path):
    base = tmp_path / "sweep-1"
    assert [fresh_folder(base).name for _ in range(3)] == ["sweep-1", "sweep-1-2", "sweep-1-3"]


def test_a_records_file_is_written_by_one_run_at_a_time(tmp_path):
    path = tmp_path / "run_records.jsonl"
    path.write_text("an earlier run's line\n")
    writer = RecordWriter(path, truncate=True, exclusive=True)
    assert path.read_text() == "" and being_written(path)
    with pytest.raises(FileInUse, match="being written by another run"):
        RecordWriter(path, truncate=True, exclusive=True)
    assert path.read_text() == ""  # the refused writer truncated nothing
    writer.close()
    assert not being_written(path)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_records_write_that_fails_names_the_file(tmp_path):
    path = tmp_path / "run_records.jsonl"
    path.symlink_to("/dev/full")
    writer = RecordWriter(path, fsync=False)
    with pytest.raises(OSError) as failed:
        writer.write({"request_id": "r1"})
    assert failed.value.errno == errno.ENOSPC and failed.value.filename == str(path)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_truth_log_that_cannot_be_written_stops_its_server_once(tmp_path: Path):
    path = tmp_path / "truth.jsonl"
    path.symlink_to("/dev/full")
    failures: list[OSError] = []
    truth = TruthLog(path, on_failure=failures.append)
    truth.connection({"id": 1})
    truth.connection({"id": 2})  # dropped: the log ended with the first failure
    truth.close()
    assert len(failures) == 1 and failures[0].errno == errno.ENOSPC and truth.failure is failures[0]


def test_a_truth_log_starts_anew(tmp_path: Path):
    path = tmp_path / "truth.jsonl"
    path.write_text('{"type": "step"}\n' * 22)
    TruthLog(path).close()
    assert path.read_text() == ""


def test_sim_switches_take_true_or_false_through_sweep_sim():
    from llmload.runner.sweep_input import sim_args

    assert sim_args([("empty_last_text", "true"), ("close_after_stream", "1")]) == [
        "--empty-last-text",
        "--close-after-stream",
    ]
    assert sim_args([("empty_last_text", "False")]) == []
    with pytest.raises(ConfigError, match="empty_last_text is a switch: give empty_last_text=true"):
        sim_args([("empty_last_text", "maybe")])
    with pytest.raises(ConfigError, match=r"'base_ms' must be a number in \[0, 10000\], got 1e\+308"):
        sim_args([("base_ms", "1e308")])
