"""A records file is one run, whole and once: real runs against the simulator, then their files
joined, repeated, damaged or mismatched as a user or a disk might, and `llmload table` run on
them. Every case either gives the figures of the run itself with a warning naming what was wrong,
or is refused (exit 2) naming it; none gives other figures silently.

- two runs' records in one file: refused, naming both run ids and the file;
- a record line repeated: counted once, the line named;
- a chunk-index entry whose interior times were changed (offset, length and last time intact):
  the record is read from its JSON line, the index named;
- a run file of another run, or not a run file at all: named and not used;
- the greedy-determinism figures (of the check's probes) are in `--format json` when nothing
  diverged.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llmload.cli import sweep as sweep_command
from llmload.cli import table
from llmload.core.exit_codes import BAD_INPUT, OK
from llmload.core.files import chunk_index
from llmload.core.files.run_files import RunFiles

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

SIM = {"accept_len": 1, "max_draft": 0, "base_ms": 2, "per_seq_ms": 0.5, "batch_variance": 0}
# with the greedy-determinism check: a probe of one request a user after each rung
LADDER = "rungs: [1, 2]\nrequests_per_user: 3\nmax_tokens: 24\nprompt_tokens: 16\ncheck_determinism: true\n"


def sweep(run_dir: Path) -> RunFiles:
    ladder = run_dir.parent / f"{run_dir.name}.yaml"
    ladder.write_text(LADDER)
    flags = [f"--sim={k}={v}" for k, v in SIM.items()]
    argv = ["--run-dir", str(run_dir), "--ladder", str(ladder), *flags, "--scrape-interval", "0"]
    assert sweep_command.main(argv) == OK
    return RunFiles(run_dir / "run")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[RunFiles, RunFiles]:
    base = tmp_path_factory.mktemp("runs")
    return sweep(base / "a"), sweep(base / "b")


def copy_run(files: RunFiles, to: Path, *, index: bool = True, run_file: bool = True) -> RunFiles:
    """The run's records (and its index and run file) under a new prefix; the index copied last,
    so it is not older than the records."""
    to.mkdir(parents=True, exist_ok=True)
    copy = RunFiles(to / "run")
    shutil.copyfile(files.records, copy.records)
    if run_file:
        shutil.copyfile(files.run, copy.run)
    if index:
        shutil.copyfile(chunk_index.index_path(files.records), chunk_index.index_path(copy.records))
    return copy


def table_json(files: RunFiles, capsys) -> tuple[int, list[dict], list[str]]:
    """`llmload table --format json`: (exit code, rows, warning lines)."""
    code = table.main([str(files.prefix), "--format", "json"])
    out, err = capsys.readouterr()
    rows = json.loads(out) if code == OK else []
    return code, rows, [line for line in err.splitlines() if line.startswith("warning:")]


def run_id(files: RunFiles) -> str:
    return json.loads(files.run.read_text())["run_id"]


def test_every_record_and_the_run_file_carry_the_runs_id(runs):
    a, b = runs
    ids = {json.loads(line)["run_id"] for line in a.records.read_text().splitlines()}
    assert ids == {run_id(a)}
    assert run_id(a) != run_id(b)


def test_two_runs_in_one_file_are_refused_naming_both(runs, tmp_path, capsys):
    a, b = runs
    joined = copy_run(a, tmp_path / "joined", index=False)
    with joined.records.open("ab") as fh:
        fh.write(b.records.read_bytes())
    assert table.main([str(joined.prefix)]) == BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(joined.records) in err and run_id(a) in err and run_id(b) in err
    assert "split" in err


def test_a_repeated_record_is_counted_once_and_named(runs, tmp_path, capsys):
    a, _ = runs
    _, truth, _ = table_json(a, capsys)
    repeated = copy_run(a, tmp_path / "repeated")
    lines = repeated.records.read_bytes().splitlines(keepends=True)
    measured = next(i for i, line in enumerate(lines) if json.loads(line)["phase"] == "measure")
    repeated.records.write_bytes(b"".join(lines) + lines[measured])
    code, rows, warnings = table_json(repeated, capsys)
    assert code == OK
    assert [r["tokens"] for r in rows] == [r["tokens"] for r in truth]
    assert [r["requests"] for r in rows] == [r["requests"] for r in truth]
    assert len(warnings) == 1
    assert "1 lines repeat an earlier record's request_id" in warnings[0]
    assert f"lines {len(lines) + 1}" in warnings[0]


def test_an_index_entry_with_changed_interior_times_is_detected(runs, tmp_path, capsys):
    a, _ = runs
    _, truth, _ = table_json(a, capsys)
    damaged = copy_run(a, tmp_path / "damaged")
    index = bytearray(chunk_index.index_path(damaged.records).read_bytes())
    header = chunk_index._HEADER
    at, entries = len(chunk_index.MAGIC), 0
    while at < len(index):
        offset, length, count = header.unpack_from(index, at)[:3]
        at += header.size
        if count == chunk_index.NO_TIMES:
            continue
        for k in range(1, count - 1):  # every interior time 40 ms later; the first and last kept
            start = at + 4 * k
            value = int.from_bytes(index[start : start + 4], "little", signed=True) + 40_000
            index[start : start + 4] = value.to_bytes(4, "little", signed=True)
        at += 4 * count
        entries += 1
    chunk_index.index_path(damaged.records).write_bytes(bytes(index))
    code, rows, warnings = table_json(damaged, capsys)
    assert code == OK
    itl = [r["metrics"]["latencies_ms"]["itl"] for r in truth]
    assert [r["metrics"]["latencies_ms"]["itl"] for r in rows] == itl
    assert len(warnings) == 1
    assert str(chunk_index.index_path(damaged.records)) in warnings[0]
    assert f"{entries} entries fail their checksum" in warnings[0]


def test_a_run_file_of_another_run_is_named_and_not_used(runs, tmp_path, capsys):
    a, b = runs
    foreign = copy_run(a, tmp_path / "foreign")
    info = json.loads(b.run.read_text())
    for stage in info["stages"]:  # another run's file would mark this run's rungs partial
        stage["finished"] = None
    foreign.run.write_text(json.dumps(info))
    code, rows, warnings = table_json(foreign, capsys)
    assert code == OK and not any(r["partial"] for r in rows)
    assert len(warnings) == 1
    assert str(foreign.run) in warnings[0] and run_id(a) in warnings[0] and run_id(b) in warnings[0]


@pytest.mark.parametrize("text", ["{", "[1, 2]", '{"stages": "none"}'])
def test_a_run_file_that_is_not_one_is_named(runs, tmp_path, capsys, text):
    a, _ = runs
    garbled = copy_run(a, tmp_path / "garbled")
    garbled.run.write_text(text)
    code, _, warnings = table_json(garbled, capsys)
    assert code == OK
    assert len(warnings) == 1 and str(garbled.run) in warnings[0] and "not a run file" in warnings[0]


def test_the_determinism_figures_are_in_the_json_when_nothing_diverged(runs, capsys):
    a, _ = runs
    code, rows, _ = table_json(a, capsys)
    assert code == OK
    checks = [r["determinism"] for r in rows]
    assert [c["checked"] for c in checks] == [1, 2]  # the probes: one request a user
    assert [c["compared"] for c in checks] == [0, 1]  # probe prompt 0's reference is rung 1's
    assert [c["differing"] for c in checks] == [0, 0]
    assert [c["share"] for c in checks] == [0.0, 0.0]
    assert [c["first_differing_median"] for c in checks] == [None, None]
    assert checks[1]["references"] == ["rung01 c1"]
