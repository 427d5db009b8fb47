"""Property-based fuzzing (hypothesis) of every input surface a user or a server controls.

The property, for each surface: an input is accepted, or rejected with the module's own error type
and a one-line message; never any other exception (a traceback for the user). Surfaces: the YAML
ladder file (random mappings of known and unknown keys, every YAML type, unicode, duplicate keys,
raw text, anchors and aliases up to "billion laughs" bombs, huge integers), the Locust
command-line options (`run_config`, as the CLI and the web UI's form give them), the sweep
command's `--sim` flags and the simulator's own flags, the records reader and the post-processor
behind it (random JSON lines, almost-records with wrong field types), Locust's CSV reader (random
headers and cells), the SSE parser (random `data:` lines, almost-chunks), and the command line of
every `llmload` subcommand (random flags with random values; the command's checks run in-process
with what it would start replaced: the property is acceptance, or BAD_INPUT and one line naming
what was refused).

1,000 examples per surface (`FUZZ`) under the `ci` hypothesis profile, far fewer under `dev` (the
local default; tests/conftest.py), derandomized so a CI run is repeatable. The planted-bug test
plants a bare KeyError in the config parser and checks that the ladder property finds it.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import string
import time
from argparse import Namespace
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures.fuzzing import examples
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from llmload.analysis.run.locust_csv import (
    FAILURES_COLUMNS,
    STATS_COLUMNS,
    LocustCsvError,
    cross_check,
    read_failures_csv,
    read_stats_csv,
)
from llmload.analysis.run.postprocess import load_run
from llmload.analysis.run.rung_tally import tally_rungs
from llmload.core import checks, command_line, config
from llmload.core.config import ENDPOINTS, ConfigError, load_config
from llmload.core.exit_codes import BAD_INPUT
from llmload.core.files.records import RecordFileError, RequestRecord
from llmload.core.schema import settings as config_settings
from llmload.loadgen.argparse_adapter import parser_actions
from llmload.loadgen.options import run_config
from llmload.loadgen.stream.decode import MalformedStream, StreamErrorEvent
from llmload.loadgen.stream.responses import accumulator_for
from llmload.loadgen.stream.sse import StreamAccumulator
from llmload.loadgen.stream.sse_template import TEMPLATE_SLOTS
from llmload.output.run_table import render_run
from llmload.output.table import FORMATS
from llmload.runner.sweep_input import sim_args
from llmload.sim.__main__ import SimFlagError, build_parser, config_from_args

FUZZ = settings(
    max_examples=examples(1000),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def one_line(error: Exception) -> None:
    message = str(error)
    assert message and "\n" not in message, repr(message)


# --- values of every type YAML and JSON can carry ----------------------------------------------
numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 0.5, 1e308, -0.0]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=12))

CONFIG_KEYS = sorted(f.name for f, _ in config_settings(config.SweepConfig))
SECTION_KEYS = ["connect", "first_token", "total", "max", "on_status", "backoff_s", "ttft_ms", "window_s"]
KEYS = st.sampled_from(CONFIG_KEYS + SECTION_KEYS)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(KEYS | st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=12,
)
mappings = st.dictionaries(KEYS | st.text(max_size=10), values, max_size=6)


huge_integers = st.sampled_from(
    ["1" + "0" * 29, "-1" + "0" * 29, str(2**64), "1" + "0" * 400, "9" * 5000]
) | (
    st.integers(min_value=10**12, max_value=10**40).map(str)
)  # as YAML text: beyond a float, beyond Python's 4,300-digit int conversion


@st.composite
def aliased_texts(draw: st.DrawFn) -> str:
    """YAML with anchors and aliases under known keys: a value reused, a merge, a value that holds
    itself, or nested aliases of a drawn width and depth (a small or a huge "billion laughs")."""
    key, other = draw(KEYS), draw(KEYS)
    shape = draw(st.sampled_from(["reuse", "merge", "recursive", "laughs"]))
    if shape == "reuse":
        return f"{key}: &v {json.dumps(draw(values))}\n{other}: *v\n"
    if shape == "merge":
        return f"{key}: &b {{{other}: {json.dumps(draw(scalars))}}}\n{other}: {{<<: *b}}\n"
    if shape == "recursive":
        return f"{key}: &r [1, *r]\n"
    width, depth = draw(st.integers(1, 9)), draw(st.integers(1, 12))
    text = f"&a0 [{', '.join([json.dumps(draw(scalars))] * width)}]"
    for i in range(1, depth + 1):
        text = f"&a{i} [{', '.join([text] + [f'*a{i - 1}'] * (width - 1))}]"  # the last, width times
    return f"{key}: {text}\n"


@st.composite
def ladder_texts(draw: st.DrawFn) -> str:
    """YAML text: a dumped random mapping, the same with a key repeated, raw text, anchors and
    aliases, or a huge integer under a known key."""
    kind = draw(st.sampled_from(["mapping", "duplicate", "raw", "yaml-ish", "aliases", "huge"]))
    if kind == "aliases":
        return draw(aliased_texts())
    if kind == "huge":
        number = draw(huge_integers)
        return f"{draw(KEYS)}: {number}\nrungs: [1, {number}]\n"
    if kind == "raw":
        return draw(st.text(max_size=80))
    if kind == "yaml-ish":
        alphabet = string.ascii_letters + string.digits + ":-[]{},.#&*!|>'\"\n \t?%@`~"
        return draw(st.text(alphabet=alphabet, max_size=80))
    text = yaml.safe_dump(draw(mappings), allow_unicode=True)
    if kind == "duplicate":
        key = draw(KEYS)
        text += f"{key}: 1\n{key}: 2\n"
    return text


def check_ladder(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    try:
        load_config(path)
    except ConfigError as e:
        one_line(e)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def test_ladder_file(workdir):
    @FUZZ
    @given(ladder_texts())
    def prop(text: str) -> None:
        check_ladder(workdir / "ladder.yaml", text)

    prop()


# --- the Locust options (command line, environment, web-UI form: all text) ---------------------
option_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "1", "0", "-1", "1,4", "nan", "inf", "1e999", "2.5", "true", "false", " 3 "]),
)
hosts = st.one_of(
    st.text(max_size=20),
    st.builds(
        lambda scheme, host, port: f"{scheme}{host}{port}",
        st.sampled_from(["http://", "https://", "", "ftp://", "http:/"]),
        st.sampled_from(["127.0.0.1", "localhost", "[::1]", "[::1", "", "ä.example"]),
        st.sampled_from(["", ":8000", ":0", ":99999", ":abc", ":", ":-1", "/v1"]),
    ),
)


def test_locust_options():
    @FUZZ
    @given(
        st.fixed_dictionaries(
            {
                "rungs": option_text,
                "requests_per_user": option_text,
                "rung_duration": option_text,
                "warmup_requests": option_text,
                "max_tokens": option_text,
                "model": option_text,
                "endpoint": option_text | st.sampled_from(["responses", "chat"]),
                "max_tokens_field": option_text | st.sampled_from(["max_completion_tokens", "auto"]),
                "stream": option_text,
                "host": hosts,
                "api_key": st.text(max_size=10),
                "gpu_metrics": option_text | hosts | st.sampled_from(["/gpu/metrics", "//x", "nvml", "NVML"]),
            }
        )
    )
    def prop(options: dict[str, str]) -> None:
        try:
            run_config(Namespace(ladder="", **options))
        except ConfigError as e:
            one_line(e)

    prop()


# --- the simulator's flags, and the sweep's --sim KEY=VALUE ------------------------------------
SIM_OPTIONS = sorted(
    o.removeprefix("--") for a in build_parser()._actions for o in a.option_strings if o.startswith("--")
)
sim_keys = st.sampled_from([o.replace("-", "_") for o in SIM_OPTIONS if o != "help"]) | st.text(
    alphabet=string.ascii_lowercase + "_", min_size=1, max_size=8
)
sim_values = st.one_of(
    option_text,
    st.sampled_from(["drop=0.5", "http_500=2", "x=1", "no_usage=1", "4.5", "10-40", "60%", "5-2", "tags"]),
)  # fmt: skip


def test_sim_flags():
    @FUZZ
    @given(st.lists(st.tuples(sim_keys, sim_values), max_size=5))
    def prop(flags: list[tuple[str, str]]) -> None:
        try:
            args = sim_args(flags)
        except ConfigError as e:
            one_line(e)
            return
        config_from_args(args, exit_on_error=False)  # what the sweep accepted, the simulator takes

    prop()


def test_simulator_command_line():
    @FUZZ
    @given(st.lists(st.sampled_from([f"--{o}" for o in SIM_OPTIONS if o != "help"]) | sim_values, max_size=6))
    def prop(argv: list[str]) -> None:
        try:
            config_from_args(argv, exit_on_error=False)
        except SimFlagError as e:
            one_line(e)

    prop()


# --- the records reader and everything that reads its records ----------------------------------
GOOD = RequestRecord(
    request_id="r1",
    rung=0,
    users=2,
    phase="measure",
    endpoint="completions",
    stream=True,
    max_tokens=8,
    t_start=1000.0,
    t_end=1001.0,
    t_first=1000.1,
    t_first_content=1000.1,
    output_tokens=8,
    chunks=8,
    finish_reason="length",
    chunk_times=[0.1 * i for i in range(8)],
).to_dict()


@st.composite
def record_lines(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["record", "mutated", "json", "text"]))
    if kind == "text":
        return draw(st.text(max_size=40)).replace("\n", " ")
    if kind == "json":
        return json.dumps(draw(values))
    data = dict(GOOD)
    data |= draw(
        st.fixed_dictionaries(
            {},
            optional={
                "rung": st.integers(-3, 3),
                "users": st.integers(-2, 5),
                "t_start": st.floats(900, 1100),
                "t_end": st.floats(900, 1100),
                "t_first": st.none() | st.floats(900, 1100),
                "output_tokens": st.integers(-5, 20),
                "chunks": st.integers(-5, 20),
                "outcome": st.sampled_from(["ok", "http_500", "drop", ""]),
                "phase": st.sampled_from(["measure", "warmup", "x"]),
                "tokens_estimated": st.booleans(),
                "stream": st.booleans(),
                "chunk_tokens": st.none() | st.lists(st.integers(-1, 5), max_size=9),
                "chunk_times": st.lists(st.floats(-1, 5), max_size=9),
                "prompt_tokens": st.none() | st.integers(0, 100),
                "t_scheduled": st.none() | st.floats(900, 1100),
            },
        )
    )
    if kind == "mutated":  # one field of any type, or one field missing
        field = draw(st.sampled_from(sorted(GOOD)))
        if draw(st.booleans()):
            data[field] = draw(values)
        else:
            data.pop(field)
    return json.dumps(data)


def test_records_reader_and_post_processor(workdir):
    prefix = workdir / "run"

    @FUZZ
    @given(st.lists(record_lines(), max_size=8))
    def prop(lines: list[str]) -> None:
        Path(f"{prefix}_records.jsonl").write_text("".join(line + "\n" for line in lines))
        try:
            result = load_run(prefix, with_metrics=True)
        except RecordFileError as e:
            one_line(e)
            return
        for fmt in FORMATS:
            render_run(result, fmt, wide=True)

    prop()


# --- Locust's CSVs --------------------------------------------------------------------------------
cells = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["POST", "rung01 c1", "rung02 c4", "3", "0", "-1", "nan", "inf", "2.5", "1e400", ""]),
)


COLUMN_CELLS = {
    "Type": st.sampled_from(["POST", "TTFT", ""]),
    "Method": st.sampled_from(["POST", "GET"]),
    "Name": st.sampled_from(["rung01 c1", "rung01 c2", "rung02 c4", "warmup c1", "Aggregated"]),
    "Error": st.sampled_from(["RequestFailure('http_500')", "drop", ""]),
    "Request Count": st.integers(-1, 5).map(str),
    "Failure Count": st.integers(-1, 5).map(str),
    "Occurrences": st.integers(-1, 5).map(str),
    "Average Content Size": st.sampled_from(["8", "8.0", "2.5", "nan", "inf", "-inf", "1e400", "x"]),
}


@st.composite
def csv_texts(draw: st.DrawFn, columns: tuple[str, ...]) -> str:
    """A Locust CSV: its columns (shuffled, one extra) with plausible or odd cells, or junk."""
    header = draw(st.permutations([*columns, "Extra"]).map(list) | st.lists(st.text(max_size=6), max_size=4))
    row = st.tuples(*(COLUMN_CELLS.get(c, cells) for c in header)).map(list)
    rows = draw(st.lists(row | st.lists(cells, max_size=len(header) + 1), max_size=5))
    text = "\n".join(",".join(map(json.dumps, r)) for r in [header, *rows])
    return draw(st.sampled_from([text, text[: len(text) // 2], ""]))


def test_locust_csv_reader(workdir):
    prefix = workdir / "csvrun"
    rungs = tally_rungs([RequestRecord.from_dict(GOOD)])

    @FUZZ
    @given(csv_texts(STATS_COLUMNS), csv_texts(FAILURES_COLUMNS))
    def prop(stats: str, failures: str) -> None:
        Path(f"{prefix}_stats.csv").write_text(stats)
        Path(f"{prefix}_failures.csv").write_text(failures)
        for read, path in ((read_stats_csv, "_stats.csv"), (read_failures_csv, "_failures.csv")):
            try:
                read(Path(f"{prefix}{path}"))
            except LocustCsvError as e:
                one_line(e)
        for warning in cross_check(prefix, rungs):
            one_line(Exception(warning))

    prop()


# --- the SSE parser ---------------------------------------------------------------------------------
deltas = st.fixed_dictionaries(
    {},
    optional={k: values | st.text(max_size=4) for k in ("content", "reasoning_content", "reasoning", "role")},
)  # a chat delta: answer, reasoning under either name, or both
usages = (
    st.fixed_dictionaries(
        {},
        optional={
            "completion_tokens": values,
            "prompt_tokens": values,
            "reasoning_tokens": values,
            "completion_tokens_details": values
            | st.fixed_dictionaries({}, optional={"reasoning_tokens": values}),
        },
    )
    | values
)
EVENT_TYPES = ["response.output_text.delta", "response.reasoning_text.delta", "response.completed",
               "response.incomplete", "response.failed", "error", "response.created",
               "response.output_item.done", "response.audio.delta"]  # fmt: skip
responses_events = st.fixed_dictionaries(
    {"type": st.sampled_from(EVENT_TYPES) | values},
    optional={
        "delta": values | st.text(max_size=4),
        "message": values,
        "response": values
        | st.fixed_dictionaries(
            {},
            optional={
                "status": values | st.sampled_from(["completed", "incomplete"]),
                "incomplete_details": values,
                "usage": values
                | st.fixed_dictionaries(
                    {},
                    optional={
                        k: values
                        for k in (
                            "input_tokens",
                            "output_tokens",
                            "output_tokens_details",
                            "input_tokens_details",
                        )
                    },
                ),
                "error": values,
            },
        ),
    },
)


@st.composite
def sse_lines(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["chunk", "json", "bytes", "done", "event"]))
    if kind == "event":  # the Responses API's events (and event types outside it)
        return b"data: " + json.dumps(draw(responses_events)).encode() + b"\n"
    if kind == "bytes":
        return draw(st.binary(max_size=30))
    if kind == "done":
        return b"data: [DONE]\n"
    if kind == "json":
        return b"data: " + json.dumps(draw(values)).encode() + b"\n"
    choice = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "text": values | st.sampled_from(["<think> a", "b</think> c", "</think>"]),
                "delta": values | deltas,
                "finish_reason": st.none() | st.sampled_from(["length", "stop"]) | values,
                "index": values,
            },
        )
    )
    chunk = {"choices": draw(st.sampled_from([[choice], [], choice, "x", None]))}
    if draw(st.booleans()):
        chunk["usage"] = draw(usages)
    if draw(st.booleans()):
        chunk["error"] = draw(values)
    return b"data: " + json.dumps(chunk).encode() + b"\n"


def test_sse_parser():
    @FUZZ
    @given(st.sampled_from(ENDPOINTS), st.lists(sse_lines(), max_size=8), st.integers(1, 64), st.booleans())
    def prop(endpoint: str, lines: list[bytes], max_tokens: int, keep_text: bool) -> None:
        acc = accumulator_for(endpoint, keep_text)
        try:
            for i, line in enumerate(lines):
                if acc.feed(line, 0.01 * i):
                    break
        except (MalformedStream, StreamErrorEvent) as e:
            one_line(e)
        tokens, _ = acc.output_tokens(max_tokens)
        assert isinstance(tokens, int)
        assert acc.prompt_tokens is None or isinstance(acc.prompt_tokens, int)
        acc.tokens_per_chunk()
        reasoning, _ = acc.reasoning_tokens()
        assert reasoning is None or (isinstance(reasoning, int) and reasoning >= 0)
        answer, thought = acc.answer_and_reasoning()
        assert isinstance(answer, str) and isinstance(thought, str)
        assert all(isinstance(name, str) and " " not in name for name in acc.odd)

    prop()


# --- the property catches a planted bug -----------------------------------------------------------
def test_a_planted_bare_key_error_in_the_config_parser_is_found(workdir, monkeypatch):
    def planted(source: str, key: str, value: Any, *_: Any) -> Any:
        raise KeyError(key)  # the kind of slip the property exists for: not a ConfigError

    monkeypatch.setattr(checks, "expect", planted)  # under every typed check of every key

    @FUZZ
    @given(ladder_texts())
    def prop(text: str) -> None:
        check_ladder(workdir / "planted.yaml", text)

    with pytest.raises(KeyError):
        prop()


def _reference_record(data: dict) -> RequestRecord | str:
    """What the field-by-field check makes of `data`: the record, or "bad"."""

    def ok(annotation: str, v: object) -> bool:
        kinds = [k.strip() for k in annotation.split("|")]
        if v is None:
            return "None" in kinds
        number = (type(v) is int or type(v) is float) and math.isfinite(v)  # type: ignore[arg-type]
        checks = {
            "int": type(v) is int,
            "float": number,
            "bool": type(v) is bool,
            "str": type(v) is str,
            "list[float]": type(v) is list and all(type(x) in (int, float) and math.isfinite(x) for x in v),
            "list[int]": type(v) is list and all(type(x) is int for x in v),
        }
        return any(checks[k] for k in kinds if k != "None")

    known = {f.name: str(f.type) for f in fields(RequestRecord)}
    if not all(ok(known[k], v) for k, v in data.items() if k in known):
        return "bad"
    try:
        return RequestRecord(**{k: v for k, v in data.items() if k in known})
    except TypeError:
        return "bad"


ODD_VALUES = st.sampled_from(
    [None, True, 0, 1, -3, 1.5, float("inf"), float("nan"), "x", [], [1], [0.5, True], [0.1, "a"]]
)


@FUZZ
@given(
    st.dictionaries(st.sampled_from(sorted(GOOD)) | st.just("extra"), ODD_VALUES, max_size=6), st.booleans()
)
def test_record_check_fast_path_agrees_with_field_by_field(changes, drop):
    """The reader's shape-cached check accepts exactly the records the field-by-field check does."""
    data = {**GOOD, **changes}
    if drop:
        data.pop("t_end", None)
    for _ in range(2):  # the second time through the cached plan
        want = _reference_record(data)
        try:
            got: RequestRecord | str = RequestRecord.from_dict(data)
        except TypeError:
            got = "bad"
        assert got == want


def _state(acc: StreamAccumulator) -> tuple:
    """Every field of the accumulator but the token-chunk templates (a cache of feed_lines')."""
    slots = [name for cls in type(acc).__mro__ for name in getattr(cls, "__slots__", ())]
    assert len(slots) > 20  # every layer's fields (the accumulator is a chain of slotted classes)
    return tuple(getattr(acc, name) for name in slots if name not in TEMPLATE_SLOTS)


def _outcome(parse: Callable[[StreamAccumulator], object], chat: bool, keep_text: bool = True) -> tuple:
    """What parsing leaves: the accumulator's every field and the error raised, if any."""
    acc = StreamAccumulator(chat=chat, keep_text=keep_text)
    try:
        parse(acc)
        error = None
    except (MalformedStream, StreamErrorEvent) as e:
        error = (type(e), str(e))
    return _state(acc), error


def test_a_read_split_at_once_parses_as_line_by_line():
    """The StreamReader's path (one read's lines split out of a bytearray, `feed_lines`) leaves the
    accumulator exactly as `feed` line by line does, and raises the same error."""

    @FUZZ
    @given(st.booleans(), st.lists(sse_lines() | st.just(b"\n"), max_size=8))
    def prop(chat: bool, lines: list[bytes]) -> None:
        block = bytearray(b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines))
        split = block[: block.rfind(b"\n")].split(b"\n") if block else []

        def by_line(acc: StreamAccumulator) -> None:  # what readline(b"\n") hands to feed
            for line in split:
                if acc.feed(bytes(line) + b"\n", 0.5):
                    return

        assert _outcome(by_line, chat) == _outcome(lambda acc: acc.feed_lines(split, 0.5), chat)

    prop()


KINDS = st.sampled_from(
    ["token"] * 4 + ["finish", "usage"] * 2 + ["mutated", "again"] * 3 + ["not_utf8", "blank", "raw"]
)


@st.composite
def templated_streams(draw: st.DrawFn) -> tuple[bool, list[bytes]]:
    """A stream whose token chunks share one shape (as real servers write them) with texts that
    are plain, escaped, empty, non-ASCII or invalid, and lines that differ from the shape only
    slightly: a finish_reason, usage, a byte changed, cut or added, the text key elsewhere too."""
    chat = draw(st.booleans())
    decoy = st.builds(lambda t: {"text": t, "content": t}, st.text(max_size=3))  # the text key, elsewhere
    head_keys = st.sampled_from(["id", "object", "created", "model"])
    head = draw(st.dictionaries(head_keys, values | decoy, max_size=3))
    extra = draw(st.dictionaries(st.sampled_from(["logprobs", "stop_reason", "index"]), values, max_size=2))
    spaced = draw(st.booleans())
    usage = draw(st.just({"completion_tokens": 2}) | values)  # the same on every usage line
    texts = st.text(max_size=6) | st.sampled_from(
        ["", '"', "\\", "\n", 'a"b', "ok", "\u00e9", "<think> x", " y</think>", "</think> z", "<think>"]
    )  # a reasoning model's tags in the text, and (chat) its reasoning fields
    fields = st.sampled_from(["content"] * 3 + ["reasoning_content", "reasoning", "both"])

    def line(text: Any, finish: Any = None, usage: Any = None) -> bytes:
        field = draw(fields)
        delta = {"reasoning_content": text, "reasoning": text} if field == "both" else {field: text}
        choice = {"index": 0, **({"delta": delta} if chat else {"text": text}), **extra}
        choice["finish_reason"] = finish
        data = {**head, "choices": [choice], **({"usage": usage} if usage is not None else {})}
        sep = (", ", ": ") if spaced else (",", ":")
        return b"data: " + json.dumps(data, separators=sep, ensure_ascii=draw(st.booleans())).encode()

    lines: list[bytes] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(KINDS)
        if kind == "token":
            lines.append(line(draw(texts)))
        elif kind == "finish":
            lines.append(line(draw(texts), finish=draw(st.sampled_from(["length", "stop", 3]))))
        elif kind == "usage":
            lines.append(line(draw(st.sampled_from(["ok", " x"])), usage=usage))  # lines that recur
        elif kind == "mutated" and lines:
            base = bytearray(draw(st.sampled_from(lines)))
            at = draw(st.integers(0, len(base)))
            action = draw(st.sampled_from(["set", "cut", "add"]))
            byte = draw(st.sampled_from([b'"', b"\\", b"\x00", b"}", b"x", b"\xff", b"\xe9"]))
            if action == "set" and at < len(base):
                base[at : at + 1] = byte
            elif action == "cut":
                del base[at : at + draw(st.integers(1, 4))]
            else:
                base[at:at] = byte
            lines.append(bytes(base))
        elif kind == "not_utf8":  # a token chunk whose text is not UTF-8 (or is, beyond ASCII)
            text = draw(st.sampled_from([b"\xff", b"a\xe9", b"\xc3\xa9", b"\xed\xa0\x80", b"\xe2\x82"]))
            lines.append(line("ok").replace(b'"ok"', b'"' + text + b'"'))
        elif kind == "again" and lines:
            lines.append(draw(st.sampled_from(lines)))
        elif kind == "raw":
            lines.append(b"data: [DONE]")
        else:
            lines.append(b"")
    return chat, lines


def test_token_chunk_fast_path_agrees_with_the_full_parse():
    """feed_lines' template fast path (a token chunk recognised without a JSON decode) leaves the
    accumulator exactly as the full parse of every line does (feed), and raises the same error,
    whatever the texts and however the lines differ from the template; reads of any size."""

    def line_of(text: str) -> bytes:  # a completions token chunk whose text is the JSON `text`
        return b'data: {"choices":[{"index":0,"text":' + text.encode() + b',"finish_reason":null}]}'

    mixed = [  # a reasoning chunk under the other name between two of the template's (CI, stop 45)
        b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"0"},"finish_reason":null}]}',
        b'data: {"choices":[{"index":0,"delta":{"reasoning":"0"},"finish_reason":"length"}]}',
        b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"0"},"finish_reason":null}]}',
    ]

    @FUZZ
    @given(templated_streams(), st.integers(1, 4), st.booleans())
    @example((True, mixed), 1, False)
    @example((False, [line_of('"\\r"'), line_of('"0"')]), 1, False)  # whitespace first (CI, stop 46)
    def prop(stream: tuple[bool, list[bytes]], per_read: int, keep_text: bool) -> None:
        chat, lines = stream

        def by_line(acc: StreamAccumulator) -> None:
            for i, line in enumerate(lines):
                if acc.feed(line + b"\n", float(i // per_read)):
                    return

        def by_read(acc: StreamAccumulator) -> None:
            for start in range(0, len(lines), per_read):
                read = [bytearray(line) for line in lines[start : start + per_read]]
                if acc.feed_lines(read, float(start // per_read)):
                    return

        assert _outcome(by_line, chat, keep_text) == _outcome(by_read, chat, keep_text)

    prop()


def test_the_template_fast_path_is_taken():
    """A stream of ordinary token chunks learns its template from the first one; every later chunk
    takes the fast path (the full parse is not called), with its text and time."""
    from unittest import mock

    acc = StreamAccumulator(keep_text=True)
    tokens = [" a", "b", " \u00e9t\u00e9", "x y"]
    lines = [
        b'data: {"id":"c","choices":[{"index":0,"text":'
        + json.dumps(t, ensure_ascii=False).encode()
        + b',"logprobs":null,"finish_reason":null}]}'
        for t in tokens
    ]
    acc.feed_lines([bytearray(lines[0]), bytearray()], 0.1)
    with mock.patch.object(StreamAccumulator, "_feed_data", side_effect=AssertionError("parsed in full")):
        for i, line in enumerate(lines[1:], start=2):
            acc.feed_lines([bytearray(line), bytearray()], 0.1 * i)
    assert acc.texts == tokens and acc.chunk_times == [0.1, 0.2, 0.30000000000000004, 0.4]
    assert acc.t_last == 0.4 and acc.t_first == acc.t_first_content == 0.1


# --- the command line of every subcommand ---------------------------------------------------------
class Started(Exception):
    """Raised by the stand-in for what a command starts (a run, a server, a report): the checks
    accepted the command line."""


def _start(*_: Any, **__: Any) -> Any:
    raise Started


def _safe(text: str) -> str:
    """A fuzzed value that, taken as a path, stays inside the test's folder."""
    return text.lstrip("/~").replace("..", "_")


LONG = "p" * 100_000  # a 100 KB value: a path the system refuses, a number of 100,000 digits
HUGE = ["1e308", "-1e308", "1" + "0" * 400, "inf", "nan"]  # no number flag may take these
INFINITY_MEANS = {("--speedup", "inf")}  # but inf where it means something: the component free
PATHS = st.sampled_from(
    ["out/a", "afile/x", "adir", "x.jsonl", "out/y_records.jsonl", "/proc/llmload-x/y", "", " ", LONG,
     "adir/", "x.jsonl.gz", "done_records.jsonl.gz", "256.0.0.1"]
)  # fmt: skip
cli_values = st.one_of(
    option_text.map(_safe),
    PATHS,
    hosts.map(_safe),
    st.sampled_from(["nan", "-5", "0", "1,,2", *HUGE, "1e23", "100000000000000000000000"]),
    st.sampled_from(["base_ms=1e308", "empty_last_text=true", "empty_last_text=1", "ssl_certfile=afile",
                     "close_after_stream=maybe", "port_file=", "max_num_seqs=" + LONG, "fault=drop=2"]),
)  # fmt: skip


@st.composite
def command_lines(draw: st.DrawFn, flags: list[str], head: list[str]) -> list[str]:
    """`head` (the command's positional arguments) and random flags of the command, each as
    `--flag value`, `--flag=value` or bare, sometimes an unknown flag or a stray value."""
    argv = list(head)
    for _ in range(draw(st.integers(0, 5))):
        flag = draw(st.sampled_from([*flags, "--no-such-flag"]))
        value = draw(cli_values)
        form = draw(st.sampled_from(["pair", "pair", "equals", "bare", "value"]))
        argv += {"pair": [flag, value], "equals": [f"{flag}={value}"], "bare": [flag], "value": [value]}[form]
    return argv


def _nonsense(argv: list[str], numeric: set[str]) -> bool:
    """Whether argv gives a number flag a value no number flag takes (HUGE, empty, 100 KB)."""
    pairs = [a.split("=", 1) for a in argv if "=" in a and a.startswith("--")]
    pairs += [[flag, value] for flag, value in zip(argv, argv[1:], strict=False) if not value.startswith("-")]
    return any(
        flag in numeric
        and (value in HUGE or not value.strip() or value == LONG)
        and (flag, value) not in INFINITY_MEANS
        for flag, value in pairs
    )


def check_command_line(
    main: Callable[[list[str]], int],
    argv: list[str],
    flags: list[str],
    codes: tuple[int, ...],
    numeric: set[str] = frozenset(),  # type: ignore[assignment]
) -> None:
    """The property: the command accepts (its code in `codes`, or it got as far as starting), or
    refuses with BAD_INPUT and one `error:` line (at most ~600 characters) naming what it refuses;
    nothing else escapes, nothing takes 10 s, and a number flag given nonsense never passes."""
    err = io.StringIO()
    started = time.monotonic()
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            code = main(list(argv))
    except Started:
        code = None
    except SystemExit as stop:  # argparse: 2 for a refusal, 0 for --help
        code = stop.code if isinstance(stop.code, int) else BAD_INPUT
    assert time.monotonic() - started < 10.0, argv  # no hang
    assert "Traceback" not in err.getvalue(), err.getvalue()
    if _nonsense(argv, numeric) and "--help" not in argv and "-h" not in argv:
        assert code == BAD_INPUT, (code, [a[:40] for a in argv])
    if code is None:
        return
    if code == BAD_INPUT:
        lines = [line for line in err.getvalue().split("\n") if ": error: " in line]  # a \r is the value's
        assert len(lines) == 1, err.getvalue()[:2000]
        assert len(lines[0]) < 800, lines[0][:2000]  # every echoed value cut
        message = lines[0].split(": error: ", 1)[1]
        given = [part for a in argv for part in a.split("=", 1) if part.strip()]
        named = given + [str(Path(g)) for g in given] + [f for f in flags if f.startswith("--")]  # a file
        named += [n[:40] for n in named] + [repr(n)[:40] for n in named]  # a long value, cut
        assert "argument" in message or any(n in message for n in named), message
    else:
        assert code in codes, (code, err.getvalue())


@pytest.fixture
def cli_dir(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fuzzed commands' working folder: a finished run, a file and a folder to trip on."""
    monkeypatch.chdir(workdir)
    (workdir / "afile").write_text("a file\n")
    (workdir / "adir").mkdir(exist_ok=True)
    Path(workdir / "done_records.jsonl").write_text(json.dumps(GOOD) + "\n")
    Path(workdir / "done_run.json").write_text(json.dumps({"config": {"rungs": [2]}, "stages": []}))
    return workdir


SLO_FLAGS = ["--slo-ttft-ms", "--slo-tpot-ms", "--slo-e2el-ms"]
SWEEP_FLAGS = ["--host", "--ladder", "--run-dir", "--sim", "--sim-file", "--endpoint", "--format",
               "--fail-on-divergence", "--rungs", "--max-tokens", "--requests-per-user", "--records",
               "--csv", "--html", "--api-key", "--slo-ttft-ms", "--users", "--overwrite", "--gpu-metrics",
               "--metrics-port", "--otlp",
               "--"]  # fmt: skip
SIM_FLAGS = [f"--{o}" for o in SIM_OPTIONS if o != "help"]
# name -> (positional arguments, flags, the exit codes of an accepted command line)
COMMAND_LINES: dict[str, tuple[list[str], list[str], tuple[int, ...]]] = {
    "sweep": ([], SWEEP_FLAGS, (0,)),
    "table": (["done"], ["--format", "--metrics", "--percentiles", *SLO_FLAGS, "--requests-per-user",
                         "--wide", "--fail-on-divergence"], (0, 5)),
    "compare": (["done", "done"], ["--threshold", "--confidence", "--resamples", "--seed", "--format",
                                   "--fail-on-regression", "--fail-on-output-change", "--wide"], (0, 1, 6)),
    "capacity": ([], ["--ladder", "--prefix", "--host", "--run-dir", "--sim", "--endpoint", "--format",
                      "--plot", "--rungs", "--records", "--overwrite"], (0,)),
    "report": (["done"], ["--out", "--decision"], (0,)),
    "budget": (["done"], ["--config", "--component", "--component-ms", "--accept-len", "--speedup",
                          "--saves-ms", "--wide", "--format"], (0,)),
    "twin": (["done"], ["--run-dir", "--format", "--fit-only", "--config", "--component", "--component-ms",
                        "--speedup", "--saves-ms", "--step-scale", "--accept-len", "--rungs", "--at",
                        "--worth", "--wide"], (0, 1, 7, 8)),
    "soak-report": (["done"], ["--config", "--format", "--no-files", "--no-png"], (0, 1)),
    "trace-stats": (["TRACE"], ["--speed", "--start-s", "--duration-s", "--bin-s", "--block-size",
                                "--cache-blocks", "--format"], (0,)),
    "llama-server": (["serve"], ["--port", "--parallel", "--threads"], (0,)),
    "locustfile": ([], ["completions", "chat", "responses", "--help"], (0,)),
    "sim": ([], SIM_FLAGS, (0,)),
}  # fmt: skip


def _main(name: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], int]:
    """The subcommand's `main`, with what it would start (a run, a server, a report's plots)
    replaced by `_start`."""
    from llmload.cli import COMMANDS, capacity, llama_server, report, soak_report, sweep
    from llmload.runner import twin_replays

    sim_main = importlib.import_module("llmload.sim.__main__")
    started = [(sweep, "run_sweep"), (capacity, "run_sweep"), (capacity, "capacity_plot"),
               (report, "write_report"), (llama_server, "_serve"),
               (soak_report, "write_outputs"), (twin_replays, "start_sweep"), (sim_main, "run")]  # fmt: skip
    for module, attribute in started:
        monkeypatch.setattr(module, attribute, _start)
    return importlib.import_module(COMMANDS[name][0]).main  # type: ignore[no-any-return]


REPO_TRACE = Path(__file__).resolve().parents[2] / "config" / "sample-trace.jsonl"


def number_flags(main: Callable[[list[str]], int]) -> set[str]:
    """The flags of `main`'s parser (its subcommands' too) whose value is a number: their type
    turns "1" into one."""

    class Parsed(Exception):
        pass

    found: set[str] = set()

    def grab(parser: Any, *_: Any, **__: Any) -> Any:
        for action in parser_actions(parser):
            for sub in getattr(action, "choices", None) or {}:
                if isinstance(action.choices, dict):
                    grab(action.choices[sub])
            try:
                value = action.type("1") if callable(action.type) and action.option_strings else None
            except Exception:
                value = None
            if isinstance(value, int | float) and not isinstance(value, bool):
                found.update(action.option_strings)
        raise Parsed

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(command_line.ArgumentParser, "parse_known_args", grab)
        with contextlib.suppress(Parsed, SystemExit), redirect_stderr(io.StringIO()):
            main(["x"])
    return found


# sweep's and capacity's, to Locust
LADDER_NUMBER_FLAGS = {"--rungs", "--max-tokens", "--requests-per-user", "--metrics-port"}


@pytest.mark.parametrize("name", list(COMMAND_LINES))
def test_command_line_flags(cli_dir, monkeypatch, name):
    """Random command lines of known flags with random values (long paths, huge numbers, empty
    strings, folders), for each subcommand of `llmload`, `sim` included (its checks in-process;
    nothing is started: no run, server or report)."""
    head, flags, codes = COMMAND_LINES[name]
    head = [str(REPO_TRACE) if h == "TRACE" else h for h in head]
    main = _main(name, monkeypatch)
    numeric = number_flags(main) | (LADDER_NUMBER_FLAGS if name in ("sweep", "capacity") else set())

    @FUZZ
    @given(command_lines(flags, head))
    def prop(argv: list[str]) -> None:
        check_command_line(main, argv, flags, codes, numeric)

    prop()


def test_every_command_has_the_error_boundary_and_bounded_number_flags(cli_dir, monkeypatch):
    """Every subcommand's `main` wears `llmload.core.command_line.command`, and every flag whose
    value is a number refuses every value of HUGE (`checks.number`: docs/development.md)."""
    from llmload.cli import COMMANDS

    for name, (module, _) in COMMANDS.items():
        assert getattr(importlib.import_module(module).main, "__llmload_boundary__", None), name
        main = _main(name, monkeypatch)
        head = COMMAND_LINES[name][0] if name in COMMAND_LINES else []
        for flag in sorted(number_flags(main)):
            for value in HUGE:
                if (flag, value) in INFINITY_MEANS:
                    continue
                try:
                    with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
                        code: Any = main([*head, f"{flag}={value}"])
                except SystemExit as stop:
                    code = stop.code
                except Started:
                    code = "started"
                assert code == BAD_INPUT, (name, flag, value, code)
