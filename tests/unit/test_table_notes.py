"""What the sweep table prints under it (issue 40, "notes are notes"): a note only when it says
something to act on, an informational one only beyond its threshold, and never inside the data
of a format made to paste or parse (markdown, csv, json): there the commands print the notes on
stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.runs import make_record

from llmload.analysis.run.rung_tally import sweep_rows, tally_rungs
from llmload.cli import table as table_cli
from llmload.core.files.records import write_records
from llmload.output.table import CONNECT_NOTE_PCT, render, table_notes


def _rung(connect_ms: float, ttft_s: float = 0.1, handshake_ms: float | None = None) -> list:
    """Four requests of 100 ms TTFT; two opened a connection that took `connect_ms` (its kernel
    handshake `handshake_ms`, when given)."""
    return [
        make_record(100.0 + i, 101.0 + i, 256, ttft_s, users=4, conn_reused=i >= 2,
                    connect_ms=connect_ms if i < 2 else None, handshake_ms=handshake_ms if i < 2 else None)
        for i in range(4)
    ]  # fmt: skip


def _connection_notes(rows: list) -> list[str]:
    """The notes but the window's (the rung's users run one after another: it never held 4)."""
    return [note for note in table_notes(rows) if "never held" not in note]


def test_connections_are_noted_only_when_they_move_ttft_beyond_the_threshold() -> None:
    small = 0.5 * CONNECT_NOTE_PCT / 100.0 * 100.0  # half the threshold of a 100 ms TTFT
    (quiet,) = sweep_rows(tally_rungs(_rung(small)))
    assert quiet.new_connections == 2 and quiet.connect_ttft_ms is not None
    assert quiet.connect_ttft_ms == small / 2  # the p50 of 4 values: the mean of the middle two
    assert _connection_notes([quiet]) == []
    (loud,) = sweep_rows(tally_rungs(_rung(40.0)))
    assert loud.connect_ttft_ms == 20.0
    (note,) = _connection_notes([loud])
    assert "rung01 c4 by 20.0 ms (2 of 4 requests opened one)" in note and "--metrics" in note


def test_connections_are_judged_by_their_handshake_not_the_turns_of_users_starting_at_once() -> None:
    """A connect whose wall time is 40 ms while the kernel timed its handshake at 0.05 ms waited for
    the other users' turns, not for the connection: no note. A handshake of 40 ms (a far server)
    raises TTFT by as much, and is noted."""
    (turns,) = sweep_rows(tally_rungs(_rung(40.0, handshake_ms=0.05)))
    assert turns.connect_ttft_ms == pytest.approx(0.025)
    assert _connection_notes([turns]) == []
    (far,) = sweep_rows(tally_rungs(_rung(40.5, handshake_ms=40.0)))
    assert far.connect_ttft_ms == pytest.approx(20.0)
    (note,) = _connection_notes([far])
    assert "rung01 c4 by 20.0 ms" in note


def test_markdown_csv_and_json_hold_data_only() -> None:
    rows = sweep_rows(tally_rungs([*_rung(40.0), make_record(105.0, 106.0, 3, 0.1, users=4, outcome="drop")]))
    notes = table_notes(rows)
    assert len(notes) == 3  # the window's (never held 4), the connections' and the failure's
    assert all(note in render(rows) for note in notes)  # the table format prints them under it
    for fmt in ("markdown", "csv", "json"):
        out = render(rows, fmt)
        assert not any(note in out for note in notes), fmt
    assert "|" in render(rows, "markdown").splitlines()[-1]  # the last line is the table's


def test_the_table_command_prints_a_formats_notes_on_stderr(tmp_path: Path, capsys) -> None:
    prefix = tmp_path / "run"
    write_records(
        f"{prefix}_records.jsonl", [*_rung(40.0), make_record(105.0, 106.0, 3, 0.1, users=4, outcome="drop")]
    )
    for fmt in ("markdown", "csv", "json"):
        assert table_cli.main([str(prefix), "--format", fmt]) == 0
        out, err = capsys.readouterr()
        assert "requests failed" in err and "requests failed" not in out, fmt
        if fmt == "json":
            json.loads(out)  # stdout is the data alone
    assert table_cli.main([str(prefix)]) == 0
    out, err = capsys.readouterr()
    assert "requests failed" in out and "requests failed" not in err
