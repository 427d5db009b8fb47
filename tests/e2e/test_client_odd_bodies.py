"""A non-streamed answer of the wrong shape ends the request as a failure kind, never as an
exception in the user's greenlet: the body served by a tiny loopback HTTP server, sent through the
real client (`send_request`, stream false)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from geventhttpclient import HTTPClient

from llmload.core.config import SweepConfig
from llmload.core.files.records import OUTCOME_OK as OK
from llmload.core.files.records import RequestRecord
from llmload.loadgen.request.client import RequestContext, send_request
from llmload.loadgen.transport.exchange import Transport
from llmload.loadgen.workload.payload import COMPLETIONS_PATH, build_payload
from llmload.servers.process import LOOPBACK

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
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps(BODIES[self.headers["X-Case"]][0]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{LOOPBACK}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


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
