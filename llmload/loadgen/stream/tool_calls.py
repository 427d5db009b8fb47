"""A reply's tool calls as they stream: each call's function name and arguments, gathered from
its pieces (`ToolCalls`), how many calls the reply made, how many carry arguments that are not a
JSON object, and the text the greedy identity check hashes.

Where the pieces come from (tests/unit/test_sse_tools.py holds each shape):
- chat (vLLM, SGLang, llama.cpp, OpenAI): `delta.tool_calls`, a list of
  `{index, id?, type?, function: {name?, arguments?}}`; a call is named by its `index` (parallel
  calls: index 1, 2, ...), its name and arguments arrive in pieces to concatenate (vLLM sends the
  name whole in the first delta of a call, then argument pieces; a name may be split too);
- the Responses API (llmload.loadgen.stream.responses): a `function_call` output item names the
  call (`response.output_item.added`, `item.name`), `response.function_call_arguments.delta`
  events carry its arguments; a call is named by its `output_index`.

Each call's id (chat: the `id` of its first delta; the Responses API: the item's `call_id`) is
kept with it, so an agent session resends the calls exactly as received (`calls`).

A tool-call piece is a token chunk like answer text (the stream parsers count it; its text is not
the answer's). A call's arguments are *invalid* when their whole text is not a JSON object (what
the OpenAI API defines `arguments` to be): counted, the request does not fail.
"""

from __future__ import annotations

import json
from typing import Any

from llmload.loadgen.stream.decode import MalformedStream

_SEPARATOR = "\x1e"  # between two calls in the hashed text (a record separator: no JSON holds one raw)


class ToolCalls:
    """The tool calls of one reply, by the index the server gives each (module docstring)."""

    __slots__ = ("_names", "_arguments", "_ids")

    def __init__(self) -> None:
        self._names: dict[int, list[str]] = {}
        self._arguments: dict[int, list[str]] = {}
        self._ids: dict[int, str] = {}

    def add(self, index: int, name: Any, arguments: Any, call_id: Any = None) -> str:
        """A piece of call `index`: its name's and its arguments' text (either may be None), and
        the call's id when the piece carries it; returns the piece's text (name then arguments).
        MalformedStream when one is not a string."""
        if not isinstance(name, str | None) or not isinstance(arguments, str | None):
            raise MalformedStream(f"tool call {index}: name or arguments is not a string")
        if not isinstance(call_id, str | None):
            raise MalformedStream(f"tool call {index}: its id is not a string")
        if call_id:
            self._ids[index] = call_id
        names = self._names.setdefault(index, [])
        self._arguments.setdefault(index, [])
        if name:
            names.append(name)
        if arguments:
            self._arguments[index].append(arguments)
        return (name or "") + (arguments or "")

    def add_chat(self, entries: Any, shown: str) -> str:
        """A chat delta's `tool_calls` (module docstring); returns the text of its pieces.
        MalformedStream when it is not a list of objects with an integer index."""
        if not isinstance(entries, list):
            raise MalformedStream(f"delta.tool_calls is not a list: {shown!r}")
        text = ""
        for entry in entries:
            index = entry.get("index", 0) if isinstance(entry, dict) else None
            function = entry.get("function") or {} if isinstance(entry, dict) else None
            if type(index) is not int or not isinstance(function, dict):
                raise MalformedStream(f"delta.tool_calls holds an entry that is not a call: {shown!r}")
            text += self.add(index, function.get("name"), function.get("arguments"), entry.get("id"))
        return text

    @property
    def count(self) -> int:
        """The calls the reply made (distinct indexes)."""
        return len(self._names)

    def invalid(self) -> int:
        """Calls whose arguments are not a JSON object (module docstring)."""
        bad = 0
        for pieces in self._arguments.values():
            try:
                bad += not isinstance(json.loads("".join(pieces)), dict)
            except ValueError:
                bad += 1
        return bad

    def calls(self) -> list[tuple[str, str, str]]:
        """Every call whole, in index order: (id, name, arguments) as received (id "": none sent)."""
        return [
            (self._ids.get(i, ""), "".join(self._names[i]), "".join(self._arguments[i]))
            for i in sorted(self._names)
        ]

    def text(self) -> str:
        """Every call's name and arguments, in index order: what the identity check hashes."""
        return _SEPARATOR.join(
            "".join(self._names[i]) + "(" + "".join(self._arguments[i]) + ")" for i in sorted(self._names)
        )
