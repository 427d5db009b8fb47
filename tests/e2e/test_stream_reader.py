"""The stream reader (llmload.loadgen.transport.stream_reader) on byte sequences a simulator never writes:
an SSE line split across TCP reads (inside its JSON and inside the HTTP chunk framing), many events
in one read, a connection closed in the middle of a line, garbage and an error event after some
tokens, [DONE] with the chunked terminator late. A scripted loopback server sends each piece as
its own write, a pause apart, so each is its own read. Every case runs through both readers (the
hub's StreamReader and line by line in the greenlet), which must give the same record, and the
timed cases check that a chunk is timed by the read that completed it."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from geventhttpclient import HTTPClient
from test_faults_client import send

from llmload.core.files.records import RequestRecord
from llmload.loadgen.transport.receive_stamps import stamp_receive_times
from llmload.servers.process import LOOPBACK

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
PAUSE_S = 0.03
END = b"0\r\n\r\n"


def chunked(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(text: str, finish: str | None = None, usage: int | None = None) -> bytes:
    body: dict = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = {"prompt_tokens": 3, "completion_tokens": usage, "total_tokens": 3 + usage}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
A, B, C = event("a"), event("b"), event("c", "length", usage=3)
WHOLE = chunked(A) + chunked(B) + chunked(C) + chunked(DONE) + END
SPLIT_AT = WHOLE.index(b'"text": "b"')  # inside the second event's JSON
FRAME_SPLIT_AT = len(chunked(A)) + 2  # inside the second chunk's size line

# name -> (the pieces the server writes, each its own read; the expected outcome, tokens, chunks)
CASES = {
    "all-in-one-read": ([WHOLE], "ok", 3, 3),
    "line-split-in-json": ([WHOLE[:SPLIT_AT], WHOLE[SPLIT_AT:]], "ok", 3, 3),
    "split-in-chunk-framing": ([WHOLE[:FRAME_SPLIT_AT], WHOLE[FRAME_SPLIT_AT:]], "ok", 3, 3),
    "byte-by-byte-head-of-stream": ([WHOLE[i : i + 1] for i in range(12)] + [WHOLE[12:]], "ok", 3, 3),
    "terminator-late": ([WHOLE[: -len(END)], END], "ok", 3, 3),
    "closed-mid-line": ([chunked(A) + chunked(B)[:20]], "drop", 1, 1),
    "garbage-after-a-token": ([chunked(A) + chunked(b"data: {oops\n\n")], "malformed", 1, 1),
    "error-event-after-a-token": (
        [chunked(A), chunked(b'data: {"error": {"message": "overloaded"}}\n\n')],
        "stream_error",
        1,
        1,
    ),
}


@contextmanager
def scripted_server(pieces: list[bytes]) -> Iterator[tuple[str, list[float]]]:
    """A loopback server that answers one request with HEAD then `pieces`, PAUSE_S apart, then
    closes; yields its URL and the epoch time each piece was written."""
    listener = socket.socket()
    listener.bind((LOOPBACK, 0))
    listener.listen(1)
    written: list[float] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = int(
                next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
            )
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(HEAD)
            for piece in pieces:
                time.sleep(PAUSE_S)
                written.append(time.time())
                conn.sendall(piece)
            time.sleep(PAUSE_S)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{listener.getsockname()[1]}", written
    finally:
        thread.join(timeout=10)
        listener.close()


def send_to(url: str, stamped: bool) -> RequestRecord:
    http = HTTPClient.from_url(url, connection_timeout=5, network_timeout=5, concurrency=1)
    if stamped:
        assert stamp_receive_times(http)
    (rec,) = send(http, max_tokens=3, total=10)
    return rec


@pytest.mark.parametrize("case", sorted(CASES))
def test_both_readers_give_the_same_record(case):
    pieces, outcome, tokens, chunks = CASES[case]
    records = []
    for stamped in (True, False):
        with scripted_server(pieces) as (url, written):
            rec = send_to(url, stamped)
        assert rec.outcome == outcome, (stamped, rec.error)
        assert (rec.output_tokens, rec.chunks) == (tokens, chunks), stamped
        assert rec.stamps == ("kernel" if stamped else "user")
        # a chunk is timed by the read that completed its line: not before that piece was written
        # and, the reads being a pause apart, well before the next one was
        arrived = [rec.t_start + t for t in rec.chunk_times]
        completed_by = [w for w in written if w <= arrived[-1] + 0.001]
        assert completed_by and arrived[-1] - completed_by[-1] < PAUSE_S / 2, (arrived, written)
        records.append(rec)
    kernel, user = records
    assert (kernel.finish_reason, kernel.prompt_tokens, kernel.error) == (
        user.finish_reason,
        user.prompt_tokens,
        user.error,
    )


def test_a_line_split_across_reads_is_timed_by_the_read_that_completed_it():
    pieces = CASES["line-split-in-json"][0]
    with scripted_server(pieces) as (url, written):
        rec = send_to(url, stamped=True)
    first, second = (rec.t_start + t for t in rec.chunk_times[:2])
    assert abs(first - written[0]) < 0.005  # event a came whole in the first piece
    assert abs(second - written[1]) < 0.005  # event b's line was completed by the second piece
