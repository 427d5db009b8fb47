"""Tools and structured output as configuration: the keys checked when the ladder is read (one
line naming the key and the file, nothing started), the request body they write on chat and the
Responses API, the client's check of an answer against its schema, and the figures per rung (the
valid share beside tok/s, the replies stopped before max_tokens) from records."""

from __future__ import annotations

import json
import re

import pytest

from llmload.analysis.run.rung_tally import RungTally
from llmload.core.config import ConfigError, load_config, parse_config
from llmload.core.files.records import new_record
from llmload.core.workload.reply_shapes import BUILTIN_TOOLS
from llmload.loadgen.request.reply_check import reply_checker
from llmload.loadgen.workload.payload import build_payload
from llmload.output.table import render

WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def ladder(tmp_path, text: str, files: dict[str, str] | None = None):
    for name, content in (files or {}).items():
        (tmp_path / name).write_text(content)
    path = tmp_path / "ladder.yaml"
    path.write_text("rungs: [1]\nendpoint: chat\n" + text)
    return path


@pytest.mark.parametrize(
    ("text", "files", "message"),
    [
        (
            "tools: t.json\n",
            {"t.json": '{"a": 1}'},
            r"'tools': expected a non-empty list of function tools, got \{'a': 1\}",
        ),
        ("tools: t.json\n", {"t.json": "[1]"}, r"'tools': tool 1 is not a function tool .*got 1"),
        (
            "tools: t.yaml\n",
            {"t.yaml": "- function: {description: x}\n"},
            r"'tools': tool 1 is not a function tool .*",
        ),
        ("tools: nope.json\n", None, r"'tools': cannot read 'nope.json': No such file or directory"),
        ("tools: t.json\n", {"t.json": "[{"}, r"'tools': 't.json' is not JSON or YAML: .*"),
        (
            "tools: t.json\n",
            {"t.json": json.dumps([{"function": {"name": "f", "parameters": {"type": 5}}}])},
            r"'tools': the parameters of tool 'f' is not JSON Schema: 5 is not valid under any of .*",
        ),
        (
            "response_format: json_schema\nresponse_schema: s.json\n",
            {"s.json": '{"type": "thing"}'},
            r"'response_schema': the schema is not JSON Schema: .*",
        ),
        (
            "response_format: json_schema\nresponse_schema: s.json\n",
            {"s.json": "[1, 2]"},
            r"'response_schema': the schema must be a JSON Schema object, got \[1, 2\]",
        ),
        (
            "response_format: json_schema\n",
            None,
            r"'response_format: json_schema' and 'response_schema' go together",
        ),
        (
            "response_format: json_schema\nresponse_schema: s.json\n",
            {"s.json": '{"$ref": "https://example.com/s.json"}'},
            r"'response_schema': the schema has \$ref 'https://example.com/s.json', which is not a JSON .*",
        ),
        (
            "response_format: json_schema\nresponse_schema: s.json\n",
            {"s.json": '{"properties": {"a": {"$ref": "#/$defs/b"}}}'},
            r"'response_schema': the schema has \$ref '#/\$defs/b', which is not a JSON pointer .*",
        ),
        ("response_format: yaml\n", None, r"'response_format' must be one of .*"),
        (
            "tools: weather\ntool_choice: get_time\n",
            None,
            r"'tool_choice': expected auto, none, required or .* \(get_weather, get_forecast\), .*",
        ),
        ("tool_choice: required\n", None, r"'tool_choice' needs 'tools'"),
        ("parallel_tool_calls: true\n", None, r"'parallel_tool_calls' needs 'tools'"),
        ("endpoint: completions\n", None, r"'tools' needs 'endpoint: chat' \(or 'responses'\)"),
    ],
)
def test_a_bad_tools_or_schema_is_one_line_naming_the_key(tmp_path, text, files, message):
    path = ladder(tmp_path, text, files)
    if text.startswith("endpoint: completions"):
        path.write_text("rungs: [1]\nendpoint: completions\ntools: weather\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert re.fullmatch(re.escape(f"{path}: ") + message, str(caught.value)), str(caught.value)


def test_tools_from_a_file_inline_or_built_in_and_their_body(tmp_path):
    path = ladder(tmp_path, "tools: t.yaml\ntool_choice: get_weather\nparallel_tool_calls: false\n",
                  {"t.yaml": json.dumps(WEATHER)})  # fmt: skip
    config = load_config(path)
    assert config.structured and list(config.tools or ()) == WEATHER
    body = build_payload(config, "m", "hi", 64)
    assert "ignore_eos" not in body and body["max_tokens"] == 64  # a cap: the reply stops on its own
    assert body["tools"] == WEATHER and body["parallel_tool_calls"] is False
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    responses = build_payload(config.with_overrides(endpoint="responses"), "m", "hi", 64)
    assert responses["tools"] == [{"type": "function", **WEATHER[0]["function"]}]
    assert responses["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert parse_config({"endpoint": "chat", "tools": "coding"}, "c").tools == BUILTIN_TOOLS["coding"]
    travelled = parse_config({"endpoint": "chat", "tools": list(config.tools or ())}, "worker")
    assert travelled.tools == config.tools  # the loaded value round-trips (the stage message)
    plain = build_payload(parse_config({"endpoint": "chat"}, "c"), "m", "hi", 64)
    assert plain["ignore_eos"] is True and "tools" not in plain


def test_response_format_body_and_the_check_of_an_answer(tmp_path):
    path = ladder(
        tmp_path, "response_format: json_schema\nresponse_schema: s.yaml\n", {"s.yaml": json.dumps(SCHEMA)}
    )
    config = load_config(path)
    body = build_payload(config, "m", "hi", 64)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "llmload_reply", "schema": SCHEMA},
    }
    assert "ignore_eos" not in body
    responses = build_payload(config.with_overrides(endpoint="responses"), "m", "hi", 64)
    assert responses["text"] == {"format": {"type": "json_schema", "name": "llmload_reply", "schema": SCHEMA}}
    check = reply_checker(config)
    assert check is not None and reply_checker(config) is check  # compiled once per configuration
    assert check('{"n": 3}') is True and check('{"n": "x"}') is False and check('{"n": 3') is False
    obj = reply_checker(parse_config({"endpoint": "chat", "response_format": "json_object"}, "c"))
    assert obj is not None and obj("{}") is True and obj("[]") is False and obj("") is False
    both = reply_checker(
        parse_config({"endpoint": "chat", "tools": "weather", "response_format": "json_object"}, "c")
    )
    assert both is not None and both("") is None  # a tool call has no answer to judge
    assert reply_checker(parse_config({"endpoint": "chat", "tools": "weather"}, "c")) is None


def rec(i: int, valid: bool | None, output: int, finish: str = "stop", structured: bool = True):
    return new_record(
        request_id=f"r{i}", rung=0, users=2, phase="measure", endpoint="chat", stream=True, max_tokens=32,
        t_start=100.0 + i, t_end=101.0 + i, t_first=100.1 + i, output_tokens=output, finish_reason=finish,
        structured=structured, reply_valid=valid, chunk_times=[0.1, 0.5],
    )  # fmt: skip


def test_the_valid_share_and_the_stopped_replies_per_rung():
    tally = RungTally(0, 2)
    for i, (valid, output, finish) in enumerate(
        [
            (True, 10, "stop"),
            (False, 9, "stop"),
            (True, 32, "length"),
            (None, 12, "tool_calls"),
            (True, 20, "stop"),
        ]
    ):
        tally.add(rec(i, valid, output, finish))
    summary = tally.structured_summary()
    assert summary == {
        "requests": 5,
        "stopped": 4,
        "stopped_share": 0.8,
        "checked": 4,
        "valid": 3,
        "valid_share": 0.75,
    }
    other = RungTally(0, 2)
    other.add(rec(9, False, 5))
    tally.merge(other)
    assert tally.structured_summary()["valid"] == 3 and tally.structured_summary()["checked"] == 5
    row = tally.row()
    text = render([row])
    assert "valid_%" in text and "60.0" in text
    assert json.loads(render([row], fmt="json"))[0]["structured"]["valid_share"] == 0.6
    assert "valid_%" in render([row], fmt="csv").splitlines()[0]
    assert "stopped before max_tokens: rung01 c2 5 of 6" in text
    plain = RungTally(0, 2)
    plain.add(rec(0, None, 32, "length", structured=False))
    assert plain.structured_summary() is None and "valid_%" not in render([plain.row()])
