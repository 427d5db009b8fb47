"""A stream's token-chunk template: the fast path of `StreamAccumulator.feed_lines`
(llmload.loadgen.stream.sse) for token chunks, and the proof that makes it safe.

A server writes every token chunk of a stream the same way except for its text (vLLM:
`{"id":…,"choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,…}]}`). The
first ordinary token chunk of a stream (text not empty, no finish_reason, no usage) is parsed in
full and becomes the stream's template: its line cut into the bytes before the text's characters
and the bytes after them. The cut is proved, not guessed: the template with a probe text put in
the middle must parse to the same object with the probe as its text. A later line that starts and
ends with those bytes and whose middle is plain string characters (no quote, backslash or control
character; valid UTF-8; not empty) is therefore the same message with another text: a token chunk,
recorded without a JSON decode. Any other line (usage, finish_reason, an error, escapes in the
text, another shape) is parsed in full.

A reasoning model's stream has two such shapes, one for its reasoning chunks (the text in
`delta.reasoning_content` or `delta.reasoning`) and one for its answer chunks (`delta.content`):
each is learned from its own first chunk (`field` names where the text sits), and a template is
learned only from a chunk that carries one kind of text, so a line it matches carries that kind
alone (the proof compares the whole object: the other field is null or absent in both).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

_NOT_PLAIN = re.compile(rb'["\\\x00-\x1f]').search  # what a JSON string's characters spell only escaped
# nor that, nor beyond ASCII: a match sends the text to `plain` (the hot path's common case is ASCII)
not_ascii_plain = re.compile(rb"[^\x20\x21\x23-\x5b\x5d-\x7e]").search
_PROBE = "llmload-template-probe"
TEMPLATE_TRIES = 3  # token chunks of a stream tried as its template (a stream without one is parsed in full)


def plain(text: bytes | bytearray) -> bool:
    """Whether `text` is a JSON string's characters as they are, no escapes: UTF-8 without a quote,
    backslash or control character."""
    if _NOT_PLAIN(text):
        return False
    try:
        text.decode()
    except UnicodeDecodeError:
        return False
    return True


def learn_template(line: bytes | bytearray, field: str) -> tuple[bytes, bytes] | None:
    """The template (the bytes before the text, the bytes after it) of `line`, a data line just
    parsed in full, if it is an ordinary token chunk whose text sits between plain bytes in
    `field` (`text` of a completion, `content`, `reasoning_content` or `reasoning` of a chat
    delta: module docstring); else None."""
    key = b'"' + field.encode() + b'":"'
    start = line.find(key) + len(key)
    end = line.find(b'"', start)
    if start < len(key) or end <= start:
        return None
    head, tail = bytes(line[:start]), bytes(line[end:])
    try:
        obj = orjson.loads(line[5:])
        probe = orjson.loads(head[5:] + _PROBE.encode() + tail)
    except orjson.JSONDecodeError:
        return None
    if _token_text(probe, field) != _PROBE or not _token_text(obj, field) or _other_text(obj, field):
        return None
    _set_token_text(probe, field, _token_text(obj, field))
    if probe == obj and obj.get("usage") is None:
        return head, tail
    return None


_DELTA_TEXTS = ("content", "reasoning_content", "reasoning")  # where a chat delta carries text


def _token_text(obj: Any, field: str) -> Any:
    """choices[0].text (or .delta.<field>) of a parsed message when it is a token chunk without
    finish_reason, else None."""
    try:
        choice = obj["choices"][0]
        if choice.get("finish_reason") is not None:
            return None
        return choice["text"] if field == "text" else choice["delta"][field]
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def _other_text(obj: Any, field: str) -> bool:
    """Whether a chat delta carries text in another field than `field` (a chunk of both kinds)."""
    if field == "text":
        return False
    delta = obj["choices"][0]["delta"]
    return any(delta.get(other) for other in _DELTA_TEXTS if other != field)


def _set_token_text(obj: Any, field: str, text: str) -> None:
    choice = obj["choices"][0]
    if field == "text":
        choice["text"] = text
    else:
        choice["delta"][field] = text
