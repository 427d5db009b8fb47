"""The fast paths of post-processing give what the plain paths give.

- `times_are_numbers` (the chunk times checked on the line's text instead of item by item):
  `parse_record` accepts and builds exactly the records that json + the field-by-field check do,
  on record lines of every separator style and key order, and on adversarial lines (the key in a
  string, escaped, nested or repeated; booleans, nulls, strings and lists among the times; NaN,
  infinite and huge numbers).
- A file read in two byte ranges and merged (`SweepTally.merge`, as the two processes of
  `llmload.analysis.run.records_pass` do) gives the same rows, metrics and skipped line numbers as one
  pass, cut at every line.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from fixtures.fuzzing import examples
from fixtures.runs import make_record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmload.analysis.run import records_pass
from llmload.analysis.run.records_pass import _count_lines, merge_parts, tally_file, tally_part
from llmload.core.files.jsonl import iter_lines, line_start, loads
from llmload.core.files.records import RequestRecord, parse_record, times_are_numbers
from llmload.servers.python_child import PythonChild

FUZZ = settings(
    max_examples=examples(600),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

BASE = make_record(1000.0, 1001.0, 8, 0.1, max_tokens=8, chunk_times=[0.1 * i for i in range(8)]).to_dict()

ANNOTATIONS = {f.name: str(f.type) for f in fields(RequestRecord)}


def reference(line: bytes) -> RequestRecord | None:
    """What the reader gave before the fast path: the same decoder, then every item checked."""
    try:
        data = loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    known = {}
    for name, value in data.items():
        if name not in ANNOTATIONS:
            continue
        if name == "chunk_times":
            ok = type(value) is list and all(type(x) in (int, float) and math.isfinite(x) for x in value)
            if not ok:
                return None
        known[name] = value
    try:
        return RequestRecord.from_dict(known)
    except TypeError:
        return None


def same(line: bytes) -> None:
    parsed = parse_record(line)
    want = reference(line)
    assert (None if parsed is None else parsed[1]) == want, line


def dumps(data: dict[str, Any], style: str) -> bytes:
    if style == "compact":
        return json.dumps(data, separators=(",", ":")).encode()
    if style == "spaced":  # what the ladder's RecordWriter writes
        return json.dumps(data).encode()
    return json.dumps(data, indent=1).replace("\n", " ").encode()  # spaces and odd places


TIMES = st.lists(
    st.one_of(
        st.floats(-1, 1e6),
        st.integers(-(2**70), 2**70),
        st.sampled_from([0, 1e-06, 5e-05, 1e300, -0.0, True, False, None, "0.1", "]", [1], {}, [], "a\\b"]),
        st.floats(allow_nan=True, allow_infinity=True),
    ),
    max_size=6,
)


@FUZZ
@given(TIMES, st.sampled_from(["compact", "spaced", "indent"]), st.randoms(use_true_random=False))
def test_chunk_times_text_check_agrees_with_the_item_check(times, style, rnd):
    data = dict(BASE, chunk_times=times)
    items = list(data.items())
    if rnd.random() < 0.5:
        rnd.shuffle(items)
    same(dumps(dict(items), style) + b"\n")


ADVERSARIAL = [
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":[0.1,true]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":[0.1,null]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":[[0.1],2]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":["]",2]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":[{},2]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":[1e999]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":[NaN]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":[-Infinity]}',
    # the key inside a string, escaped, nested, repeated, or spaced before its colon
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"error":"\\"chunk_times\\":[1]","chunk_times":[true]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"x":{"chunk_times":[1]},"chunk\\u005ftimes":[true]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"x":{"chunk_times":[1]},"chunk_times" :[false]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":[1],"chunk_times":[null]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"x":{"chunk_times":[1]}}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"worker":"chunk_times","chunk_times":[0.5, 1]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":\t[0.5,\n1]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":[01]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":[1,]}',
    b'{"request_id":"r","rung":0,"users":1,"phase":"measure","endpoint":"c","stream":true,"max_tokens":1,'
    b'"t_start":1.0,"t_end":2.0,"chunk_times":[18446744073709551616, -1e-7, 2E3]}',
    b'{"chunk_times":[0.1]}',
    b'[{"chunk_times":[0.1]}]',
]


@pytest.mark.parametrize("line", ADVERSARIAL)
def test_adversarial_lines(line):
    same(line)


def test_the_text_check_says_yes_only_to_plain_lists():
    assert times_are_numbers(b'{"chunk_times":[0.1,2,3e-05]}')
    assert times_are_numbers(b'{"a": 1, "chunk_times": [0.1, 2]}')
    assert times_are_numbers(b'{"chunk_times":[]}')
    for line in ADVERSARIAL[:5] + ADVERSARIAL[8:12]:
        assert not times_are_numbers(line), line


# --- two byte ranges merged = one pass --------------------------------------------------------
@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    ok = draw(st.booleans()) or draw(st.booleans())
    n = draw(st.integers(0, 6))
    t_start = draw(st.floats(1000, 1010))
    times = sorted(draw(st.lists(st.floats(0.001, 2.0), min_size=n, max_size=n)))
    data = dict(
        BASE,
        request_id=draw(st.text("abc", max_size=3)),
        run_id=draw(st.none() | st.sampled_from(["r1", "r2"])),
        rung=draw(st.sampled_from([-1, 0, 1, 2])),
        phase="measure",
        t_start=t_start,
        t_end=t_start + 2.5,
        t_first=t_start + times[0] if times else None,
        output_tokens=draw(st.integers(0, 10)),
        chunks=n,
        outcome="ok" if ok else draw(st.sampled_from(["timeout", "http_500"])),
        chunk_times=[round(t, 6) for t in times],
        chunk_tokens=draw(st.none() | st.just([1] * n)),
        prompt_tokens=draw(st.none() | st.integers(1, 50)),
        t_scheduled=draw(st.none() | st.floats(990, 1000)),
        rate=draw(st.none() | st.sampled_from([1.0, 2.0])),
        conn_reused=draw(st.none() | st.booleans()),
        connect_ms=draw(st.none() | st.floats(0, 5)),
        prompt_tokens_asked=draw(st.none() | st.sampled_from([0, 32])),
        read_delay_ms=draw(st.none() | st.floats(0, 3)),
        trace_line=draw(st.none() | st.integers(1, 9)),
        turn=draw(st.none() | st.integers(1, 3)),
        text_hash=draw(st.none() | st.just("ab")),
    )
    if data["rung"] == -1:
        data["phase"] = "warmup"
    return data


def rung_figures(tally):
    return {i: (t.row(), t.metrics(), t.users) for i, t in tally.rungs.items()}


@settings(FUZZ, max_examples=examples(150))  # every cut of each file: ~7 s
@given(st.lists(records() | st.sampled_from(["", "not json", '{"rung": 0}']), min_size=1, max_size=10))
def test_two_ranges_merged_give_one_pass(tmp_path_factory, lines):
    path = Path(tmp_path_factory.mktemp("pass")) / "r_records.jsonl"
    text = "".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines)
    path.write_text(text)
    whole = tally_part(path, {"ttft_ms": 500.0}, True)
    size = path.stat().st_size
    for cut in sorted({line_start(path, offset) for offset in range(size + 1)}):
        first = tally_part(path, {"ttft_ms": 500.0}, True, end=cut)
        second = tally_part(path, {"ttft_ms": 500.0}, True, cut)
        merged = merge_parts(path, {"ttft_ms": 500.0}, True, first, second, cut)
        assert merged.tally.warmup_requests == whole.tally.warmup_requests
        assert rung_figures(merged.tally) == rung_figures(whole.tally)
        assert (merged.skipped, merged.repeated, merged.runs) == (whole.skipped, whole.repeated, whole.runs)


def test_line_ranges(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes(b"ab\ncd\n\nef\ng")
    assert [line_start(path, o) for o in range(13)] == [0, 3, 3, 3, 6, 6, 6, 7, 10, 10, 10, 11, 11]
    assert list(iter_lines(path, 3, 7)) == [(1, b"cd\n")]
    assert list(iter_lines(path, 6)) == [(2, b"ef\n"), (3, b"g")]
    assert [_count_lines(path, o) for o in (0, 3, 6, 7, 10)] == [0, 1, 2, 3, 4]


def test_repeated_request_ids_are_counted_once_also_across_two_processes(tmp_path):
    """A file whose records repeat (a line written twice, within one half and across the middle
    where the file is cut for two processes): each request id counted once, wherever it falls,
    and the repeating lines named as one pass names them."""
    lines = [
        dict(BASE, request_id=f"r{i}", rung=0, phase="measure", outcome="ok", chunk_times=[0.1, 0.2])
        for i in range(40)
    ]
    lines += [lines[3], lines[39], lines[0]]  # after the middle: two of the first half, one of the second
    lines.insert(5, lines[4])  # within the first half
    path = tmp_path / "r_records.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    one = tally_file(path, None, itl=True, processes=1)
    two = tally_file(path, None, itl=True, processes=2, start_child=PythonChild)
    assert one.repeated == two.repeated == [6, 42, 43, 44]
    assert rung_figures(one.tally) == rung_figures(two.tally)
    assert one.tally.rungs[0].requests == 40
    assert one.runs == two.runs == {None: 1}


def test_the_runs_a_file_holds_are_found(tmp_path):
    lines = [dict(BASE, request_id=f"r{i}", run_id="b" if i >= 30 else "a") for i in range(40)]
    path = tmp_path / "r_records.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert tally_file(path, None, itl=False, processes=1).runs == {"a": 1, "b": 31}
    assert tally_file(path, None, itl=False, processes=2, start_child=PythonChild).runs == {"a": 1, "b": 31}


def test_a_child_process_is_started_only_by_the_starter_the_caller_gives(tmp_path, monkeypatch):
    """analysis starts no process itself: without `start_child` a file past the size threshold is
    read in one process, and two processes asked for without one is a programming error."""
    lines = [dict(BASE, request_id=f"r{i}") for i in range(40)]
    path = tmp_path / "r_records.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setattr(records_pass, "TWO_PROCESS_BYTES", 1)  # every file is large
    monkeypatch.setattr(records_pass, "_cpus", lambda: 2)
    monkeypatch.delitem(sys.modules, "gevent", raising=False)  # as in a command's process
    started: list[str] = []

    def start(function: str, argv: list[str]) -> PythonChild:
        started.append(function)
        return PythonChild(function, argv)

    one = tally_file(path, None, itl=True)
    assert started == []
    two = tally_file(path, None, itl=True, start_child=start)
    assert started == ["llmload.analysis.run.records_pass:child"]
    assert rung_figures(one.tally) == rung_figures(two.tally) and one.tally.rungs[0].requests == 40
    with pytest.raises(ValueError, match="two processes need `start_child`"):
        tally_file(path, None, itl=False, processes=2)
