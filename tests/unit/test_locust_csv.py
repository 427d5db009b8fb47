"""Reading Locust 2.47 `_stats.csv` / `_failures.csv` and cross-checking them with the records."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fixtures.runs import FIXTURES, run_records

from llmload.analysis.run.locust_csv import (
    LocustCsvError,
    check_failures,
    check_stats,
    cross_check,
    failure_kind,
    read_failures_csv,
    read_stats_csv,
)
from llmload.analysis.run.rung_tally import tally_rungs

STATS = FIXTURES / "run_stats.csv"
FAILURES = FIXTURES / "run_failures.csv"


def test_reads_only_rung_request_entries():
    table = read_stats_csv(STATS)
    # TTFT pseudo-entries (older runs), the warm-up entry and the Aggregated row are left out
    assert [(e.rung, e.users, e.request_count, e.failure_count) for e in table.rows] == [
        (0, 1, 1, 0),
        (1, 4, 4, 1),
        (2, 4, 2, 0),
    ]
    assert table.rows[1].content_total == 805  # 4 * 201.25 = 768 ok + 37 partial tokens
    assert table.skipped_lines == []


def test_agreeing_files_give_no_warning():
    rungs = tally_rungs(run_records())
    assert check_stats(rungs, read_stats_csv(STATS)) == []
    assert check_failures(rungs, read_failures_csv(FAILURES)) == []


def test_missing_column_names_file_and_column(tmp_path: Path):
    path = tmp_path / "x_stats.csv"
    lines = STATS.read_text().splitlines()
    path.write_text("\n".join([lines[0].replace(",Average Content Size", ""), *lines[1:]]))
    with pytest.raises(LocustCsvError, match=r"x_stats\.csv: missing column 'Average Content Size'"):
        read_stats_csv(path)


def test_empty_file(tmp_path: Path):
    path = tmp_path / "x_stats.csv"
    path.write_text("")
    with pytest.raises(LocustCsvError, match=r"x_stats\.csv: empty file"):
        read_stats_csv(path)


def test_truncated_last_row_is_skipped_and_reported(tmp_path: Path):
    path = tmp_path / "x_stats.csv"
    text = STATS.read_text()
    cut = text.index("POST,rung03 c4") + len("POST,rung03 c4,2,0,20")  # a crash mid-row, line 6
    path.write_text(text[:cut])
    table = read_stats_csv(path)
    assert [e.rung for e in table.rows] == [0, 1]
    assert table.skipped_lines == [6]
    warnings = check_stats(tally_rungs(run_records()), table)
    assert warnings == [
        f"{path}: skipped incomplete rows (truncated file?) at lines 6",
        f"rung03 c4: 2 records but no entry in {path}",
    ]


def test_lost_records_are_reported():
    records = [r for r in run_records() if r.output_tokens != 37]  # the failure's record was lost
    warnings = check_stats(tally_rungs(records), read_stats_csv(STATS))
    assert warnings == [
        "rung02 c4: requests: records 3, Locust 4 -> lost records or lost events",
        "rung02 c4: failures: records 0, Locust 1 -> lost records or lost events",
        "rung02 c4: output tokens (Request Count * Average Content Size): records 768, Locust 805"
        " -> lost records or lost events",
    ]
    assert check_failures(tally_rungs(records), read_failures_csv(FAILURES)) == [
        f"rung02 c4: failures by kind: records {{}}, Locust {{'(unmatched)': 1}} ({FAILURES})"
    ]


def test_lost_events_are_reported():
    records = run_records()
    records[1] = dataclasses.replace(
        records[1], output_tokens=250
    )  # the record says 250, Locust was told 256
    warnings = check_stats(tally_rungs(records), read_stats_csv(STATS))
    assert warnings == [
        "rung01 c1: output tokens (Request Count * Average Content Size): records 250, Locust 256"
        " -> lost records or lost events"
    ]


def test_failure_kind_matching():
    assert failure_kind("RequestFailed('http_500')", {"http_500", "timeout"}) == "http_500"
    assert failure_kind("RequestFailed('dropped')", {"drop", "dropped"}) == "dropped"
    assert failure_kind("ConnectionError()", {"timeout"}) == "(unmatched)"


def test_cross_check_turns_unusable_files_into_warnings(tmp_path: Path):
    prefix = tmp_path / "x"
    Path(f"{prefix}_stats.csv").write_text("Type,Name\r\n")
    warnings = cross_check(prefix, tally_rungs(run_records()))  # no _failures.csv: not checked
    missing = "'Request Count', 'Failure Count', 'Average Content Size'"
    assert warnings == [f"cross-check skipped: {prefix}_stats.csv: missing column {missing}"]
