"""A stream's data lines decoded: the JSON object of a data field (`decode_data`), the check of a
usage object (`check_usage`), and the two ways a stream fails its request (`MalformedStream`,
`StreamErrorEvent`). Used by every accumulator (llmload.loadgen.stream.sse, .responses) and by the
transport for a non-streamed answer.

The hot path decodes a data line with orjson straight from bytes (the parse is the reader's
largest cost after the socket: benchmarks/sse_parse.py, figures in docs/measurements.md).
orjson is stricter than json (NaN, integers beyond 64 bits, lone surrogates): a line it refuses
is decoded again by json, so both accept the same lines.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_fast_decode = orjson.loads
_decode = json.JSONDecoder().raw_decode


class MalformedStream(ValueError):
    """A data line that is not valid JSON or not an object."""


class StreamErrorEvent(RuntimeError):
    """The server sent an error object inside the stream."""


def decode_data(payload: bytes | bytearray) -> dict[str, Any] | None:
    """A data field's JSON object; None for `[DONE]`; MalformedStream for anything else."""
    try:
        obj = _fast_decode(payload)
    except orjson.JSONDecodeError:
        payload = payload.strip()
        if payload == b"[DONE]":
            return None
        obj = _slow_decode(payload)
    if not isinstance(obj, dict):
        raise MalformedStream(f"data line is not a JSON object: {shown(payload)!r}")
    return obj


def shown(payload: bytes | bytearray) -> bytes:
    """The start of a data field, for an error message."""
    return bytes(payload.strip()[:80])


def _slow_decode(payload: bytes | bytearray) -> Any:
    """json's decode of a data line orjson refused; MalformedStream if json refuses it too."""
    try:
        text = payload.decode()  # SSE is UTF-8; UnicodeDecodeError is a ValueError
        obj, end = _decode(text)
        if end != len(text):
            raise ValueError("data after the JSON value")
    except ValueError:
        raise MalformedStream(f"data line is not JSON: {shown(payload)!r}") from None
    return obj


def check_usage(usage: Any, payload: bytes | bytearray) -> None:
    """MalformedStream unless usage is an object whose token counts are integers >= 0 (or absent)."""
    if not isinstance(usage, dict):
        raise MalformedStream(f"usage is not an object: {shown(payload)!r}")
    for key in ("completion_tokens", "prompt_tokens"):
        count = usage.get(key)
        if count is not None and (type(count) is not int or count < 0):
            raise MalformedStream(f"usage.{key} is not a count: {shown(payload)!r}")
