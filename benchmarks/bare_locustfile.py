"""The least a Locust user can do per streamed request: a benchmark instrument
(`benchmarks/overhead.py --bare`, `benchmarks/request_cost.py --bare`), never a way to measure a
server.

Each user holds one keep-alive gevent socket and, per request, writes the asyncio client's request
(`aiohttp_client.completion_body`: greedy, `max_tokens` with `ignore_eos`, `include_usage`) as one
prebuilt byte string with a fresh `X-Request-Id`, reads until the chunked message's end
(`0\\r\\n\\r\\n`) with one `recv` and one clock reading per readiness, and fires Locust's request
event. No HTTP parser, no SSE or JSON parsing, no record, no kernel stamps, no connection checks:
what is left is what any Locust user streaming a response pays (Locust's task loop and request
event, gevent's hub, the socket calls and the kernel), so a request's fixed CPU here is the floor
under llmload's.
Its tokens come from the simulator's truth log (it counts none); its output lines are the
asyncio client's (`aiohttp_client.py`), written when the test stops.

    python -m locust -f benchmarks/bare_locustfile.py --headless -u 64 -r 64 -t 12s \\
        --host http://127.0.0.1:8000 --max-tokens 16 --bare-out /tmp/bare.jsonl
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import gevent.socket
from aiohttp_client import completion_body  # Locust puts the locustfile's folder on sys.path
from locust import User, constant, events, task

END = b"0\r\n\r\n"  # the last chunk of a chunked message
DONE: list[dict[str, Any]] = []


@events.init_command_line_parser.add_listener
def _arguments(parser: Any) -> None:
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--bare-out", default="bare_records.jsonl", help="JSONL of the completed requests")


@events.quitting.add_listener
def _write(environment: Any, **_: Any) -> None:
    Path(environment.parsed_options.bare_out).write_text("".join(json.dumps(r) + "\n" for r in DONE))


class BareUser(User):
    wait_time = constant(0)

    def on_start(self) -> None:
        url = urlsplit(self.host)
        self.sock = gevent.socket.create_connection((url.hostname, url.port or 80))
        body = json.dumps(completion_body(self.environment.parsed_options.max_tokens)).encode()
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\nX-Request-Id: "
        ).encode()
        self.request = (head, b"\r\n\r\n" + body)

    def on_stop(self) -> None:
        self.sock.close()

    @task
    def complete(self) -> None:
        request_id = os.urandom(16).hex()
        perf = time.perf_counter
        t_wall, t0 = time.time(), perf()
        head, rest = self.request
        self.sock.sendall(head + request_id.encode() + rest)
        tail, size, recv = b"", 0, self.sock.recv
        while not tail.endswith(END):
            data = recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            size += len(data)
            tail = (tail + data)[-len(END) :]
        elapsed = perf() - t0
        self.environment.events.request.fire(
            request_type="POST",
            name="/v1/completions",
            response_time=elapsed * 1000.0,
            response_length=size,
            exception=None,
            context={},
        )
        DONE.append({"request_id": request_id, "t_start": t_wall, "t_end": t_wall + elapsed})
