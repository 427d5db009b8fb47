"""A stream's token-chunk template: the fast path of `feed_lines` (`TemplatePath`, the layer of
the SSE accumulator llmload.loadgen.stream.sse that reads a read's lines) for token chunks, and
the proof that makes it safe.

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

`feed_lines`: a line that matches the stream's token-chunk template is a token chunk, recorded
without a JSON decode; a reasoning stream learns its second template once reasoning came, tried
on a data line that is not an answer chunk (so a plain stream's token chunks cost what they cost
without it); every other line is parsed in full (`_feed_data`, the accumulator's).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import orjson

from llmload.loadgen.stream.chunks import TokenChunks
from llmload.loadgen.stream.reasoning import (
    ANSWER,
    REASONING_AFTER_ANSWER,
    TAGS_NONE,
    TAGS_OPEN,
    THINK_CLOSE_BYTES,
    THOUGHT,
)

_NOT_PLAIN = re.compile(rb'["\\\x00-\x1f]').search  # what a JSON string's characters spell only escaped
# nor that, nor beyond ASCII: a match sends the text to `plain` (the hot path's common case is ASCII)
not_ascii_plain = re.compile(rb"[^\x20\x21\x23-\x5b\x5d-\x7e]").search
_PROBE = "llmload-template-probe"
TEMPLATE_TRIES = 3  # token chunks of a stream tried as its template (a stream without one is parsed in full)
# the accumulator's caches of its fast path (feed_lines): the templates and what learns them
# (`_rfield`, the field the reasoning template is learned from, is last set by the full parse:
# a reasoning chunk that takes the fast path leaves it as it was)
TEMPLATE_SLOTS = ("_head", "_tail", "_tries", "_rhead", "_rtail", "_rtries", "_rfield", "_learning", "_kind")


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


class TemplatePath(TokenChunks):
    """The token chunks of a stream read with its templates' fast path (module docstring); the
    full parse of a data line (`_feed_data`) is the accumulator's."""

    __slots__ = ("_head", "_tail", "_tries", "_rhead", "_rtail", "_rtries", "_learning")

    def __init__(self, chat: bool = False, keep_text: bool = False) -> None:
        super().__init__(chat, keep_text)
        self._head: bytes | None = None  # the token-chunk template (module docstring): line before the text
        self._tail = b""  # and after it
        self._tries = TEMPLATE_TRIES
        self._rhead: bytes | None = None  # the reasoning-chunk template, as _head and _tail
        self._rtail = b""
        self._rtries = TEMPLATE_TRIES
        self._learning = True  # a template is still to learn (a reasoning one once reasoning came)

    def _feed_data(self, payload: bytes | bytearray, t: float) -> bool:
        """One data field parsed in full; True at the end of the stream."""
        raise NotImplementedError

    def feed_lines(self, lines: Iterable[bytes | bytearray], t: float) -> bool:
        """Consume the SSE lines of one read (no line ends), all arrived at t; True at [DONE]
        (the lines after it are not read). Token chunks that match the stream's template take
        the fast path (module docstring)."""
        head, tail, texts, times = self._head, self._tail, self.texts, self.chunk_times
        start, after = (len(head), len(tail)) if head is not None else (0, 0)
        rhead = self._rhead
        for line in lines:
            if head is not None and line.startswith(head) and line.endswith(tail):
                end = len(line) - after
                if end > start and (not_ascii_plain(line, start, end) is None or plain(line[start:end])):
                    self.t_last = t
                    times.append(t)
                    if texts is not None:
                        texts.append(line[start:end].decode())
                    continue
            if line[:5] != b"data:":
                continue
            if rhead is not None and line.startswith(rhead) and self._reasoning_fast(line, t):
                continue
            if not self._learning:
                if self._feed_data(line[5:], t):
                    return True
            else:
                chunks = len(times)
                if self._feed_data(line[5:], t):
                    return True
                if len(times) > chunks:
                    self._learn_template(line)
            if self._head is not head or self._rhead is not rhead:  # a template learned or moved
                head, tail, rhead = self._head, self._tail, self._rhead
                start, after = (len(head), len(tail)) if head is not None else (0, 0)
        return False

    def _reasoning_fast(self, line: bytes | bytearray, t: float) -> bool:
        """The reasoning template's fast path (module docstring): whether `line`, which starts
        with the template's head, is a reasoning chunk of it, counted."""
        tail = self._rtail
        if not line.endswith(tail):
            return False
        start, end = len(self._rhead or b""), len(line) - len(tail)
        if end <= start or (not_ascii_plain(line, start, end) is not None and not plain(line[start:end])):
            return False
        if self._tags == TAGS_OPEN and line.find(THINK_CLOSE_BYTES, start, end) >= 0:
            return False  # the end of the thinking: parsed in full
        if self.t_first_content is not None and REASONING_AFTER_ANSWER not in self.odd:
            self.odd.append(REASONING_AFTER_ANSWER)
        self.t_last = t
        self.reasoning_chunks += 1
        self.chunk_times.append(t)
        if self.texts is not None:
            text = line[start:end].decode()
            self._spans.append((len(self.texts), len(text)))
            self.texts.append(text)
        return True

    def _reasoning_began(self) -> None:
        """The first reasoning chunk: its template is now worth learning."""
        self._learning = self._learning or bool(self._rtries)

    def _learn_template(self, line: bytes | bytearray) -> None:
        """Make `line`, just parsed in full and counted as a token chunk, the stream's template of
        its kind (answer or reasoning) if it is one and that template is still to learn; else
        leave it."""
        if self._kind == ANSWER and self._tags == TAGS_NONE and self._head is None and self._tries:
            # (not while the stream's first text is still whitespace: its next chunk may open a
            # `<think>`, which the fast path would not look for)
            self._tries -= 1
            template = learn_template(line, "content" if self.chat else "text")
            if template is not None:
                self._head, self._tail = template
        elif self._kind == THOUGHT and self._rhead is None and self._rtries:
            self._rtries -= 1
            template = learn_template(line, self._rfield)
            if template is not None:
                self._rhead, self._rtail = template
        self._learning = bool(
            (self._head is None and self._tries)
            or (self._rhead is None and self._rtries and self.t_first_reasoning is not None)
        )
