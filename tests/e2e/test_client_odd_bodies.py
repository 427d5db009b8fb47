"""A non-streamed answer of the wrong shape ends the request as a failure kind, never as an
exception in the user's greenlet; a non-streamed reply's tool calls are counted and hashed as a
streamed one's: the body served by a tiny loopback HTTP server, sent through the real client
(`send_request`, stream false)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from fixtures.canned_http import canned_server
from geventhttpclient import HTTPClient

from llmload.core.config import SweepConfig
from llmload.core.files.records import OUTCOME_OK as OK
from llmload.core.files.records import RequestRecord
from llmload.loadgen.request.client import RequestContext, send_request
from llmload.loadgen.transport.exchange import Transport
from llmload.loadgen.workload.payload import PATHS, build_payload

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

BODIES = {
    "choices-a-string": ({"choices": "x"}, "bad_response"),
    "choice-a-number": ({"choices": [3]}, "bad_response"),
    "usage-a-list": ({"choices": [{"text": "a", "finish_reason": "length"}], "usage": [1]}, "malformed"),
    "tokens-a-string": (
        {"choices": [{"text": "a", "finish_reason": "length"}], "usage": {"completion_tokens": "8"}},
        "malformed",
    ),
    "finish-an-object": ({"choices": [{"text": "a", "finish_reason": {"x": 1}}]}, "bad_response"),
    "tool-calls-a-string": (
        {"choices": [{"message": {"tool_calls": "x"}, "finish_reason": "tool_calls"}]},
        "malformed",
    ),
    "fine": ({"choices": [{"text": "a", "finish_reason": "length"}], "usage": {"completion_tokens": 8}}, OK),
}


@pytest.fixture(scope="module")
def odd_server() -> Iterator[str]:
    with canned_server(lambda case: json.dumps(BODIES[case][0]).encode(), "application/json") as url:
        yield url


def send(url: str, config: SweepConfig, case: str, prompt_hash: str | None = None) -> RequestRecord:
    """One non-streamed request of `config`'s endpoint, answered with the body `case` names."""
    ctx = RequestContext(
        uuid.uuid4().hex,
        0,
        1,
        "measure",
        config.endpoint,
        False,
        config.max_tokens,
        "test",
        prompt_hash=prompt_hash,
    )
    records: list[RequestRecord] = []
    http = HTTPClient.from_url(url, connection_timeout=5, network_timeout=5, concurrency=1)
    send_request(
        Transport(http),
        PATHS[config.endpoint],
        build_payload(config, "m", config.prompt, config.max_tokens),
        {"Content-Type": "application/json", "X-Case": case},
        ctx,
        total_timeout=10,
        report=records.append,
    )
    (rec,) = records
    return rec


@pytest.mark.parametrize("case", sorted(BODIES))
def test_odd_non_streamed_body_is_a_failure_kind(odd_server, case):
    rec = send(odd_server, SweepConfig(max_tokens=8, stream=False), case)
    assert rec.outcome == BODIES[case][1], rec.error
    assert RequestRecord.from_dict(json.loads(rec.to_json())) == rec  # the reader takes it back


def tool_reply(argument: str) -> dict:
    calls = [
        {
            "id": "c0",
            "type": "function",
            "function": {"name": "search", "arguments": json.dumps({"q": argument})},
        },
        {"id": "c1", "type": "function", "function": {"name": "fetch", "arguments": '{"url": '}},  # cut
    ]
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    return {
        "choices": [{"message": message, "finish_reason": "tool_calls"}],
        "usage": {"completion_tokens": 9},
    }


def test_a_non_streamed_replys_tool_calls_are_counted_and_hashed():
    replies = {"a": tool_reply("a"), "a-again": tool_reply("a"), "b": tool_reply("b")}
    config = SweepConfig(endpoint="chat", max_tokens=16, stream=False)
    with canned_server(lambda case: json.dumps(replies[case]).encode(), "application/json") as url:
        records = [send(url, config, case, prompt_hash="p") for case in replies]
    a, again, b = records
    assert all(r.ok and r.tool_calls == 2 and r.tool_calls_invalid == 1 for r in records), records
    assert a.t_first_tool_call == a.t_end and a.tool_hash == again.tool_hash != b.tool_hash
    assert a.text_hash == b.text_hash  # no answer text: the calls alone tell them apart
