"""llmload's completions locustfile with the per-read Python cut to its floor: a benchmark
instrument (`benchmarks/overhead.py --floor`), never a way to measure a server.

Each readiness of a stream's socket still costs what no user-space parser can avoid: the hub's
callback, one `recvmsg` (and the ACK the kernel sends for it), the bytes fed to the HTTP parser
(chunked framing). Everything else a read does in `StreamReader._on_readable` (the kernel stamp,
the clock, the line split, the SSE lines and their times) is skipped: the read's complete lines
are dropped unparsed, except in the read that holds `data: [DONE]` or ends the message, which
goes through the real path so the request ends as usual. The records' token counts and chunk
times are therefore wrong (the benchmark takes the floor's tokens from the simulator's truth log);
what the run measures is CPU: what a streamed token would cost if a compiled reader made the
per-read Python free, with the kernel, the event loop and the per-request work left as they are.
"""

from __future__ import annotations

import time

from llmload.loadgen.transport import stream_reader
from llmload.locustfiles.completions import CompletionsUser, LadderShape

__all__ = ["LadderShape", "CompletionsUser"]


def _on_readable_floor(self: stream_reader.StreamReader, stream: stream_reader._Stream) -> None:
    self._reads += 1
    try:
        data = stream.raw.recvmsg(stream_reader.READ_SIZE, stream_reader.ANCILLARY_SIZE)[0]
        stream.last_read = time.perf_counter()
        resp = stream.resp
        stream_reader._parse(resp, data)
        if data and not resp.message_complete and b"[DONE]" not in data:
            body = resp._body_buffer
            del body[: body.rfind(b"\n") + 1]  # this read's complete lines, not parsed
            return
        if not stream_reader._take_lines(stream, stream.clock.now()):
            stream.outcome = stream_reader.StreamEnded("message ended" if data else "connection closed")
    except BlockingIOError:
        return
    except BaseException as e:  # noqa: BLE001 - handed to the request's greenlet, as the real reader does
        stream.outcome = e
    stream_reader._end(stream)


stream_reader.StreamReader._on_readable = _on_readable_floor  # type: ignore[method-assign]
