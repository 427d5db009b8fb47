"""A non-streamed answer of the wrong shape ends the request as a failure kind, never as an
exception in the user's greenlet: the body served by a tiny loopback HTTP server, sent through the
real client (`send_request`, stream false)."""

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
from llmload.loadgen.workload.payload import COMPLETIONS_PATH, build_payload

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
    "fine": ({"choices": [{"text": "a", "finish_reason": "length"}], "usage": {"completion_tokens": 8}}, OK),
}


@pytest.fixture(scope="module")
def odd_server() -> Iterator[str]:
    with canned_server(lambda case: json.dumps(BODIES[case][0]).encode(), "application/json") as url:
        yield url


@pytest.mark.parametrize("case", sorted(BODIES))
def test_odd_non_streamed_body_is_a_failure_kind(odd_server, case):
    config = SweepConfig(max_tokens=8, stream=False)
    ctx = RequestContext(uuid.uuid4().hex, 0, 1, "measure", "completions", False, 8, "test")
    records: list[RequestRecord] = []
    http = HTTPClient.from_url(odd_server, connection_timeout=5, network_timeout=5, concurrency=1)
    send_request(
        Transport(http),
        COMPLETIONS_PATH,
        build_payload(config, "m", config.prompt, 8),
        {"Content-Type": "application/json", "X-Case": case},
        ctx,
        total_timeout=10,
        report=records.append,
    )
    (rec,) = records
    assert rec.outcome == BODIES[case][1], rec.error
    assert RequestRecord.from_dict(json.loads(rec.to_json())) == rec  # the reader takes it back
