"""The terminal progress line (llmload.runner.progress) on hand-built run files: incremental reading
of a growing records file (a half-written last line waits), the figures against the
post-processor's sweep rows on the same records, and silence when the stream is not a terminal."""

from __future__ import annotations

import io
import json
from pathlib import Path

from fixtures.runs import run_records

from llmload.analysis.run.rung_tally import tally_rungs
from llmload.core.files.records import RequestRecord
from llmload.output.toolkit.cells import fmt_num
from llmload.runner.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def write_run(prefix: Path, stages: list[tuple[int, int, str, int | None]], finished: bool = False) -> None:
    """`<prefix>_run.json` as the ladder writes it (the fields the progress line reads)."""
    data = {
        "config": {"rungs": [1, 4, 4]},
        "finished": finished,
        "stages": [
            {"rung": r, "users": u, "name": n, "expected_requests": e, "started": 0.0, "finished": None}
            for r, u, n, e in stages
        ],
    }
    Path(f"{prefix}_run.json").write_text(json.dumps(data))


def append(prefix: Path, records: list[RequestRecord], tail: str = "") -> None:
    with open(f"{prefix}_records.jsonl", "a", encoding="utf-8") as fh:
        fh.write("".join(r.to_json() + "\n" for r in records) + tail)


def expected_rates(records: list[RequestRecord], rung: int) -> str:
    """The line's figures as the post-processor computes them on the same records."""
    (tally,) = [t for t in tally_rungs(records) if t.index == rung]
    row = tally.row()
    return f"agg {fmt_num(row.agg_tok_s)} tok/s  per-request {fmt_num(row.per_req_tok_s)} tok/s"


WARMUP = (-1, 4, "warmup c4", 4)
RUNG0 = (0, 1, "rung00 c1", 1)
RUNG1 = (1, 4, "rung01 c4", 4)
RUNG2 = (2, 4, "rung02 c4", None)  # a time-based rung: no expected count


def test_follows_a_growing_run_with_the_post_processors_figures(tmp_path):
    prefix = tmp_path / "run"
    records = run_records()
    terminal = Terminal()
    progress = Progress(prefix, terminal, columns=120)
    assert progress.poll() is None  # no run file yet: nothing to say
    write_run(prefix, [WARMUP])
    append(prefix, records[:1])
    assert progress.poll() == "warm-up  1/4 requests"
    write_run(prefix, [WARMUP, RUNG0, RUNG1])
    # two rung-1 records and half of the third: the half line waits for its newline
    half = records[4].to_json()
    append(prefix, records[1:4], tail=half[:40])
    assert progress.poll() == f"rung01 c4 (2/3)  2/4 requests  {expected_rates(records[2:4], 1)}"
    with open(f"{prefix}_records.jsonl", "a", encoding="utf-8") as fh:
        fh.write(half[40:] + "\n")
    append(prefix, records[5:6])
    line = progress.poll()
    assert line == f"rung01 c4 (2/3)  4/4 requests  {expected_rates(records, 1)}"
    write_run(prefix, [WARMUP, RUNG0, RUNG1, RUNG2], finished=True)
    append(prefix, records[6:])
    final = f"rung02 c4 (3/3)  2 requests  {expected_rates(records, 2)}  done"
    assert progress.poll() == final
    progress.close()
    # each change rewrote the one line in place; close() ended it
    shown = terminal.getvalue()
    assert shown.startswith("\rwarm-up  1/4 requests\r") and shown.endswith(final + "\n")
    assert shown.count("\r") == 4 and shown.count("\n") == 1
    # the tallies are the post-processor's rows, every field
    assert [progress.tally.rungs[g.index].row() for g in tally_rungs(records)] == [
        g.row() for g in tally_rungs(records)
    ]


def test_silent_when_not_a_terminal(tmp_path):
    prefix = tmp_path / "run"
    write_run(prefix, [RUNG0])
    append(prefix, run_records()[1:2])
    piped = io.StringIO()
    with Progress(prefix, piped) as progress:
        line = progress.poll()
    assert line == f"rung00 c1 (1/3)  1/1 requests  {expected_rates(run_records(), 0)}"
    assert piped.getvalue() == ""


def test_a_rewritten_records_file_starts_over_and_bad_lines_are_skipped(tmp_path):
    prefix = tmp_path / "run"
    records = run_records()
    write_run(prefix, [RUNG0, RUNG1])
    append(prefix, records[1:6])
    progress = Progress(prefix, io.StringIO())
    assert progress.poll().startswith("rung01 c4 (2/3)  4/4 requests")
    # a new run truncates the file (the ladder does at the start of a run)
    Path(f"{prefix}_records.jsonl").write_text("not json\n" + '{"phase": "measure"}\n')
    append(prefix, records[2:3])
    assert progress.poll() == f"rung01 c4 (2/3)  1/4 requests  {expected_rates(records[2:3], 1)}"


def test_the_line_fits_the_terminal_and_a_foreign_run_file_shows_nothing(tmp_path):
    prefix = tmp_path / "run"
    write_run(prefix, [RUNG0])
    append(prefix, run_records()[1:2])
    terminal = Terminal()
    with Progress(prefix, terminal, columns=20) as progress:
        assert progress.poll().startswith("rung00 c1 (1/3)  1/1 requests  agg ")  # the whole line
    assert terminal.getvalue() == "\r" + "rung00 c1 (1/3)  1/1 requests"[:19] + "\n"
    Path(f"{prefix}_run.json").write_text(json.dumps({"stages": [{"rung": 0}]}))
    assert Progress(prefix, Terminal()).poll() is None


def test_no_records_yet_and_a_missing_records_file(tmp_path):
    prefix = tmp_path / "run"
    write_run(prefix, [RUNG0])
    assert Progress(prefix, io.StringIO()).poll() == "rung00 c1 (1/3)  0/1 requests"
