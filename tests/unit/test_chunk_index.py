"""The chunk-times index (`llmload.core.files.chunk_index`) changes how fast a records file is read,
never what is read from it.

- A file with its index gives the rows, metrics and skipped lines the file alone gives, on fuzzed
  records (failures, warm-ups, chunk_tokens, empty lists, times an int32 cannot hold, ints and
  booleans among the times) mixed with unreadable lines, in one pass and cut in two at every line.
- The index is used for the lines it was written with, and only those: an index older than the
  records file, of another format (the first one, without checksums, too), with a forged time, a
  half-written last entry, or lines it has no entry for, leaves those lines to the full decode.
- An entry whose times fail their checksum, or disagree with its line, is named (`damaged`).
- `RecordWriter` writes the entries as it writes the lines, also when it appends to a file.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import orjson
from fixtures.fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_records_pass import BASE, FUZZ, records, rung_figures

from llmload.analysis.run.records_pass import merge_parts, tally_part
from llmload.core.files.chunk_index import MAGIC, ChunkIndex, entry, index_path
from llmload.core.files.jsonl import line_start
from llmload.core.files.records import RecordWriter, iter_indexed_record_lines

SLO = {"ttft_ms": 500.0}
ODD_TIMES = st.sampled_from(
    [[], [0, 1, 2], [0.5, 2147.483647], [0.5, 2147.483648], [-0.25, 0.75], [0.1, True], [1e300], [3000.0]]
)


@st.composite
def indexed_records(draw: st.DrawFn) -> dict[str, Any]:
    data = draw(records())
    if draw(st.integers(0, 3)) == 0:
        data["chunk_times"] = draw(ODD_TIMES)
        data["chunk_tokens"] = None
    return data


def write_indexed(path: Path, lines: list[dict[str, Any] | str]) -> None:
    """The records file and its index as `RecordWriter` leaves them, with the unreadable lines (the
    strings) in the records file without entries."""
    text, index = [], [MAGIC]
    offset = 0
    for item in lines:
        line = orjson.dumps(item) + b"\n" if isinstance(item, dict) else item.encode() + b"\n"
        if isinstance(item, dict):
            index.append(entry(offset, len(line), item.get("chunk_times")))
        text.append(line)
        offset += len(line)
    path.write_bytes(b"".join(text))
    index_path(path).write_bytes(b"".join(index))


def plain(path: Path, itl: bool = True):
    """The pass without the index."""
    moved = path.with_name("moved")
    index_path(path).rename(moved)
    try:
        return tally_part(path, SLO, itl)
    finally:
        moved.rename(index_path(path))


def indexable(item: dict[str, Any] | str) -> bool:
    """Whether the index holds this line's times: a record without chunk_tokens whose times are
    numbers (not booleans) of at most 2**31 - 1 microseconds."""
    if isinstance(item, str) or item["chunk_tokens"] is not None:
        return False
    times = item["chunk_times"]
    return set(map(type, times)) <= {int, float} and all(abs(round(t * 1e6)) < 2**31 for t in times)


def indexed_lines(path: Path) -> list[bool]:
    """Per non-blank line: whether its times came from the index."""
    return [micros is not None for _, _, micros in iter_indexed_record_lines(path)]


LINES = st.lists(
    indexed_records() | st.sampled_from(["", "not json", '{"rung": 0}']), min_size=1, max_size=10
)


@FUZZ
@given(LINES)
def test_an_indexed_file_gives_what_its_lines_give(tmp_path_factory, lines):
    path = Path(tmp_path_factory.mktemp("index")) / "r_records.jsonl"
    write_indexed(path, lines)
    fast, slow = tally_part(path, SLO, True), plain(path, True)
    assert rung_figures(fast.tally) == rung_figures(slow.tally)
    assert fast.tally.warmup_requests == slow.tally.warmup_requests
    assert fast.skipped == slow.skipped
    rows, slow_rows = tally_part(path, SLO, False).tally.rungs, plain(path, False).tally.rungs
    assert {i: t.row() for i, t in rows.items()} == {i: t.row() for i, t in slow_rows.items()}
    usable = [indexable(x) for x in lines if not isinstance(x, str) or x.strip()]
    assert indexed_lines(path) == usable  # and the index did the work where it could


@settings(FUZZ, max_examples=examples(100))
@given(LINES)
def test_an_indexed_file_cut_in_two_gives_one_pass(tmp_path_factory, lines):
    path = Path(tmp_path_factory.mktemp("cut")) / "r_records.jsonl"
    write_indexed(path, lines)
    whole = plain(path)
    for cut in sorted({line_start(path, offset) for offset in range(path.stat().st_size + 1)}):
        first, second = tally_part(path, SLO, True, end=cut), tally_part(path, SLO, True, cut)
        merged = merge_parts(path, SLO, True, first, second, cut)
        assert rung_figures(merged.tally) == rung_figures(whole.tally)
        assert (merged.skipped, merged.repeated, merged.runs) == (whole.skipped, whole.repeated, whole.runs)


def run_file(tmp_path: Path, n: int = 6) -> tuple[Path, list[dict[str, Any]]]:
    lines = []
    for i in range(n):
        times = [round(0.05 + 0.011 * k * (i + 1), 6) for k in range(5)]
        lines.append(dict(BASE, rung=0, phase="measure", outcome="ok", chunk_times=times, chunk_tokens=None))
    path = tmp_path / "r_records.jsonl"
    write_indexed(path, lines)
    return path, lines


def test_an_index_older_than_its_records_file_is_not_read(tmp_path):
    path, _ = run_file(tmp_path)
    assert all(indexed_lines(path))
    stat = path.stat()
    os.utime(index_path(path), ns=(stat.st_atime_ns, stat.st_mtime_ns - 1_000_000))
    assert ChunkIndex.open(path) is None
    assert not any(indexed_lines(path))


def test_an_index_of_another_format_is_not_read(tmp_path):
    path, _ = run_file(tmp_path)
    index_path(path).write_bytes(b"llmload-chunks9\n" + index_path(path).read_bytes()[len(MAGIC) :])
    assert ChunkIndex.open(path) is None


def test_a_forged_time_leaves_its_line_to_the_full_decode(tmp_path):
    path, _ = run_file(tmp_path)
    data = bytearray(index_path(path).read_bytes())
    data[-4:] = (int.from_bytes(data[-4:], "little", signed=True) + 1).to_bytes(4, "little", signed=True)
    index_path(path).write_bytes(bytes(data))
    assert indexed_lines(path) == [True] * 5 + [False]
    assert rung_figures(tally_part(path, SLO, True).tally) == rung_figures(plain(path).tally)


def test_an_index_of_the_first_format_is_not_read(tmp_path):
    """Entries without a checksum (`llmload-chunks1`: offset, length, count, times): the lines are
    read in full, and nothing is called damaged."""
    path, lines = run_file(tmp_path)
    old, offset = [b"llmload-chunks1\n"], 0
    for line, item in zip(path.read_bytes().splitlines(keepends=True), lines, strict=True):
        times = [round(t * 1e6) for t in item["chunk_times"]]
        old.append(struct.pack(f"<qII{len(times)}i", offset, len(line), len(times), *times))
        offset += len(line)
    index_path(path).write_bytes(b"".join(old))
    assert ChunkIndex.open(path) is None
    found = tally_part(path, SLO, True)
    assert rung_figures(found.tally) == rung_figures(plain(path).tally)
    assert found.damaged == []


def test_a_changed_interior_time_fails_the_checksum_and_is_named(tmp_path):
    """A time inside an entry changed, its offset, length and last time intact (what the line can
    be checked against): the checksum catches it, the line is decoded in full and named."""
    path, _ = run_file(tmp_path)
    data = bytearray(index_path(path).read_bytes())
    second = len(MAGIC) + len(entry(0, 1, [0.0] * 5))  # the entries have 5 times each
    at = second + 20 + 4 * 2  # its third time
    data[at : at + 4] = (int.from_bytes(data[at : at + 4], "little", signed=True) + 9000).to_bytes(
        4, "little", signed=True
    )
    index_path(path).write_bytes(bytes(data))
    damaged: list[int] = []
    assert [m is not None for _, _, m in iter_indexed_record_lines(path, damaged=damaged)] == [
        True,
        False,
        True,
        True,
        True,
        True,
    ]
    assert damaged == [2]
    found = tally_part(path, SLO, True)
    assert found.damaged == [2]
    assert rung_figures(found.tally) == rung_figures(plain(path).tally)


def test_a_time_the_line_disagrees_with_is_named(tmp_path):
    """An entry rewritten whole with its checksum (a forged index) whose last time is not its
    line's: the line is decoded in full and named."""
    path, lines = run_file(tmp_path, 3)
    text = path.read_bytes().splitlines(keepends=True)
    index, offset = [MAGIC], 0
    for i, (line, item) in enumerate(zip(text, lines, strict=True)):
        times = [t + (0.001 if i == 1 else 0) for t in item["chunk_times"]]
        index.append(entry(offset, len(line), times))
        offset += len(line)
    index_path(path).write_bytes(b"".join(index))
    found = tally_part(path, SLO, True)
    assert found.damaged == [2]
    assert rung_figures(found.tally) == rung_figures(plain(path).tally)


def test_a_half_written_last_entry_and_lines_without_entries(tmp_path):
    path, lines = run_file(tmp_path)
    index_path(path).write_bytes(index_path(path).read_bytes()[:-3])  # a killed writer
    assert indexed_lines(path) == [True] * 5 + [False]
    path, lines = run_file(tmp_path, 3)
    lines.insert(1, "a line another tool wrote")
    text = [orjson.dumps(x) + b"\n" if isinstance(x, dict) else x.encode() + b"\n" for x in lines]
    index = [MAGIC]
    offset = 0
    for item, line in zip(lines, text, strict=True):
        if isinstance(item, dict) and item is not lines[2]:  # the second record has no entry
            index.append(entry(offset, len(line), item["chunk_times"]))
        offset += len(line)
    path.write_bytes(b"".join(text))
    index_path(path).write_bytes(b"".join(index))
    assert indexed_lines(path) == [True, False, False, True]
    assert rung_figures(tally_part(path, SLO, True).tally) == rung_figures(plain(path).tally)


def test_the_writer_indexes_each_line_also_when_it_appends(tmp_path):
    path = tmp_path / "w_records.jsonl"
    _, lines = run_file(tmp_path, 3)
    first = RecordWriter(path, fsync=False, truncate=True, chunk_index=True)
    first.write(lines[0])
    first.write(dict(lines[1], chunk_times=[0.1, "0.2"]))  # not numbers: an entry without times
    first.close()
    again = RecordWriter(path, fsync=False, chunk_index=True)
    again.write(lines[2])
    again.close()
    assert index_path(path).read_bytes().startswith(MAGIC)
    assert indexed_lines(path) == [True, False, True]
    assert [micros for _, _, micros in iter_indexed_record_lines(path)][2] == b"".join(
        round(t * 1e6).to_bytes(4, "little", signed=True) for t in lines[2]["chunk_times"]
    )
    path.unlink()  # the records removed, their index left behind: a new file starts a new index
    again = RecordWriter(path, fsync=False, chunk_index=True)
    again.write(lines[1])
    again.close()
    assert index_path(path).read_bytes() == MAGIC + entry(0, path.stat().st_size, lines[1]["chunk_times"])
    records_only = RecordWriter(tmp_path / "h_records.jsonl", fsync=False)
    records_only.write(lines[0])
    records_only.close()
    assert not index_path(tmp_path / "h_records.jsonl").exists()


@FUZZ
@given(LINES, st.data())
def test_a_damaged_index_never_breaks_the_pass(tmp_path_factory, lines, data):
    """Bytes of the index changed, cut or added anywhere (a damaged disk, another tool): the pass
    still reads every line and raises nothing, and gives the figures of the lines alone, ITL
    included (a damaged time inside an entry fails the entry's checksum)."""
    path = Path(tmp_path_factory.mktemp("damaged")) / "r_records.jsonl"
    write_indexed(path, lines)
    index = bytearray(index_path(path).read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(index)))
        action = data.draw(st.sampled_from(["flip", "cut", "insert", "huge count"]))
        if action == "flip" and at < len(index):
            index[at] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del index[at:]
        elif action == "insert":
            index[at:at] = data.draw(st.binary(min_size=1, max_size=24))
        elif action == "huge count" and at + 4 <= len(index):
            index[at : at + 4] = b"\xfe\xff\xff\x7f"
    index_path(path).write_bytes(bytes(index))
    damaged, alone = tally_part(path, SLO, True), plain(path)
    assert damaged.skipped == alone.skipped
    assert rung_figures(damaged.tally) == rung_figures(alone.tally)
