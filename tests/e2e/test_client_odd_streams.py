"""A stream that ends as the protocol asks but is not an answer is a failure of its own kind, with
the tokens it brought: `data: [DONE]` before any choice or tokens without a finish_reason are
`no_finish`, a usage over max_tokens (or absurd, 10^12) is `bad_usage` and its tokens are the
chunks received, never the server's count. The streams are served by a tiny loopback HTTP server
(not the simulator, so the client is checked against bytes written by hand) and read by the real
client, with both stream readers (the hub's StreamReader, and line by line as for TLS)."""

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
from llmload.loadgen.request.client import BAD_USAGE, NO_FINISH, RequestContext, send_request
from llmload.loadgen.transport.exchange import Transport
from llmload.loadgen.transport.receive_stamps import stamp_receive_times
from llmload.loadgen.workload.payload import COMPLETIONS_PATH, build_payload

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

MAX_TOKENS = 4


def token(text: str, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def usage(completion: int, prompt: int = 9) -> dict:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


# case -> (the stream's messages, the outcome, the output tokens its record keeps)
STREAMS = {
    "done-first": ([], NO_FINISH, 0),
    "no-finish": ([token("a"), token("b"), token("c"), usage(3)], NO_FINISH, 3),
    "no-finish-no-usage": ([token("a"), token("b")], NO_FINISH, 2),
    "usage-absurd": ([token("a"), token("b", "length"), usage(10**12)], BAD_USAGE, 2),
    "usage-over-max": ([token("a"), token("b", "length"), usage(MAX_TOKENS + 1)], BAD_USAGE, 2),
    "prompt-absurd": ([token("a"), token("b", "length"), usage(2, prompt=10**12)], BAD_USAGE, 2),
    "fine": ([token("a"), token("b"), token("c"), token("d", "length"), usage(4)], OK, 4),
}


def _sse(case: str) -> bytes:
    body = b"".join(b"data: " + json.dumps(m).encode() + b"\n\n" for m in STREAMS[case][0])
    return body + b"data: [DONE]\n\n"


@pytest.fixture(scope="module")
def stream_server() -> Iterator[str]:
    with canned_server(_sse, "text/event-stream", http11=True) as url:
        yield url


@pytest.mark.parametrize("reader", ["stream_reader", "line_by_line"])
@pytest.mark.parametrize("case", sorted(STREAMS))
def test_a_stream_that_is_no_answer_is_a_failure_with_its_tokens(stream_server, case, reader):
    config = SweepConfig(max_tokens=MAX_TOKENS)
    ctx = RequestContext(uuid.uuid4().hex, 0, 1, "measure", "completions", True, MAX_TOKENS, "test")
    records: list[RequestRecord] = []
    http = HTTPClient.from_url(stream_server, connection_timeout=5, network_timeout=5, concurrency=1)
    if reader == "stream_reader" and not stamp_receive_times(http):
        pytest.skip("kernel receive stamps: Linux only")
    send_request(
        Transport(http),
        COMPLETIONS_PATH,
        build_payload(config, "m", config.prompt, MAX_TOKENS),
        {"Content-Type": "application/json", "X-Case": case},
        ctx,
        total_timeout=10,
        report=records.append,
    )
    (rec,) = records
    _, outcome, tokens = STREAMS[case]
    assert (rec.outcome, rec.output_tokens) == (outcome, tokens), rec.error
    assert rec.ok == (outcome == OK) and (rec.error is None) == (outcome == OK)
    assert RequestRecord.from_dict(json.loads(rec.to_json())) == rec  # the reader takes it back
