"""The ground-truth log: what the simulator really did, as JSON lines, and its reader.

Two kinds of line, each flushed as soon as it is written:

- `{"type": "step", "t_start", "t_end", "batch", "tokens", "prefill_tokens"}` per engine step
  (the step's scheduled boundaries on the engine clock, as epoch seconds; prefill_tokens: prompt
  tokens admitted in the step minus those the prefix cache served; gpu_w: what the simulated GPUs
  drew during it, all together, W: llmload.sim.power; `"constrained"`: its sequences decoding
  under a constraint, when there were any: llmload.sim.engine; `"waiting"`: the requests waiting
  for a place through the step, when there were any).
- `{"type": "power", "t0", "gpus", "idle_w", "busy_w", "seq_w", "mem_mib", "kv_mib_per_token"}`
  once, when the server starts: the power model, and the instant its energy counter was 0.
- `{"type": "request", "id", "endpoint", "stream", "arrival", "admitted", "first_token",
  "last_token", "prompt_tokens", "completion_tokens", "tokens_sent", "finish_reason", "fault",
  "chunk_times", "chunk_tokens", "status", "flipped", "cached_tokens", "closed", "accept_seed"}` (plus
  `"role_sent"`,
  `"history_hashes"` and `"reply_hash"` for chat: hashes of the assistant messages it was sent and
  of the reply it generated, so a multi-turn client's history can be checked) when a request
  ends, faulted, rejected or not; `"reasoning_tokens"` (its first tokens that were reasoning)
  and `"chunk_reasoning"` (the reasoning tokens of each chunk); `"connection"` names the
  connection that carried it; `"session"` the request's `X-Session-Id` header (None without one).
  A structured reply (llmload.sim.formats.structured) adds `"structured"` (`tool_calls` or
  `json`), `"valid"`, `"tool_calls"` (each call's id, name and arguments as sent) and `"tokens"`
  (each token's text as sent, a call's header token as its function's name); on a text reply
  they are null. `"tool_results"`: the call ids the request's tool results answer, in order
  (chat: `tool_call_id` of each `role: tool` message; the Responses API: `call_id` of each
  `function_call_output` item), null when it sent none.
  `flipped`: token positions (0-based) that batch variance changed (llmload.sim.tokens.flips),
  in order.
- `{"type": "connection", "id", "accepted", "peer_port", "tls"}` when a connection is
  established (llmload.sim.connections). Times are `time.time()` read right after the bytes
  were handed to the transport (a chunk the `bunched` fault held: when it would have been).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from llmload.core.files.jsonl import iter_jsonl


def text_hash(text: str) -> str:
    """A short stable hash of a message text (the truth log's history_hashes / reply_hash)."""
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


@dataclass(slots=True)
class RequestTruth:
    """One request as the server handled it; filled in by the HTTP handler."""

    id: str
    endpoint: str  # "completions" or "chat"
    stream: bool
    arrival: float
    admitted: float | None = None
    first_token: float | None = None  # first content chunk written (body write if not streaming)
    last_token: float | None = None  # last content chunk written
    prompt_tokens: int | None = None
    completion_tokens: int = 0  # tokens the engine generated for it
    tokens_sent: int = 0  # tokens actually written to the client
    finish_reason: str | None = None  # as sent; "abort" if the client left or the server stopped
    fault: str | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    role_sent: float | None = None  # chat only: when the role-only first chunk was written
    closed: float | None = None  # a stream: when its closing messages (usage, [DONE]) were written
    status: int | None = None  # HTTP status sent; None when the connection was reset before headers
    connection: int | None = None  # id of the connection that carried it (llmload.sim.connections)
    received: float | None = None  # when its first bytes were received, before the handler ran
    flipped: list[int] = field(default_factory=list)  # token positions changed by batch variance
    cached_tokens: int | None = None  # prompt tokens the prefix cache served (None: cache off)
    accept_seed: int | None = None  # the seed of its acceptance draws (llmload.sim.tokens.acceptance_seed)
    history_hashes: list[str] | None = None  # chat: text_hash of each assistant message sent to it
    reply_hash: str | None = None  # chat: text_hash of the whole reply it generated (its answer)
    reasoning_tokens: int = 0  # of its tokens, the first this many were reasoning (--reasoning)
    chunk_reasoning: list[int] = field(default_factory=list)  # reasoning tokens of each chunk
    session: str | None = None  # the request's X-Session-Id header, if it carried one
    structured: str | None = None  # "tool_calls" or "json": a structured reply (None: text)
    valid: bool | None = None  # a structured reply: whether what was sent parses and fits its schema
    tool_calls: list[dict[str, str]] | None = None  # each call sent: its id, name and arguments
    tokens: list[str] | None = None  # a structured reply: each token sent (a call's header: its name)
    tool_results: list[str] | None = None  # the call ids its tool results answer, in order (None: none)

    def content_written(self, t: float, tokens: int) -> None:
        """Record one content chunk (or a non-streamed body) carrying `tokens` tokens."""
        if self.first_token is None:
            self.first_token = t
        self.last_token = t
        self.tokens_sent += tokens
        self.chunk_times.append(t)
        self.chunk_tokens.append(tokens)

    def to_dict(self) -> dict[str, Any]:
        data = {"type": "request", **asdict(self)}
        if self.endpoint != "chat":
            for key in ("role_sent", "history_hashes", "reply_hash"):
                del data[key]
        return data


class TruthLog:
    """Writes ground-truth lines to a JSONL file, one flush per line. The file is started anew:
    one server process, one log (a log appended to by two servers would mix their requests).

    A line that cannot be written (a full disk) ends the log: `failure` keeps the error, later
    lines are dropped, and `on_failure(error)` is called once (the server stops: its truth is
    gone, and a load test against it would check nothing)."""

    def __init__(self, path: Path, on_failure: Callable[[OSError], None] | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = self.path.open("w", encoding="utf-8")
        self.failure: OSError | None = None
        self.on_failure = on_failure

    def _write(self, data: dict[str, Any]) -> None:
        if self._fh is None:
            return
        try:
            self._fh.write(json.dumps(data, separators=(",", ":")) + "\n")
            self._fh.flush()
        except OSError as e:
            self._fail(e)

    def _fail(self, error: OSError) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            with contextlib.suppress(OSError):  # what its buffer holds cannot be written either
                fh.close()
        if self.failure is None:
            self.failure = error
            if self.on_failure is not None:
                self.on_failure(error)

    def connection(self, data: dict[str, Any]) -> None:
        self._write({"type": "connection", **data})

    def request(self, rec: RequestTruth) -> None:
        self._write(rec.to_dict())

    def step(
        self,
        *,
        t_start: float,
        t_end: float,
        batch: int,
        tokens: int,
        prefill_tokens: int,
        gpu_w: float | None = None,
        constrained: int = 0,
        waiting: int = 0,
    ) -> None:
        line: dict[str, Any] = {
            "type": "step",
            "t_start": t_start,
            "t_end": t_end,
            "batch": batch,
            "tokens": tokens,
            "prefill_tokens": prefill_tokens,
        }
        if constrained:
            line["constrained"] = constrained
        if waiting:
            line["waiting"] = waiting  # requests that waited for a place through the step
        self._write(line if gpu_w is None else line | {"gpu_w": gpu_w})

    def power(self, data: dict[str, Any]) -> None:
        """The power model and the instant its energy counter started (llmload.sim.power)."""
        self._write({"type": "power", **data})

    def close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError as e:
                self._fail(e)


def _lines(path: Path) -> list[dict[str, Any]]:
    """The truth log's lines; only a truncated last line may be unreadable (a killed server)."""
    read = list(iter_jsonl(path))
    bad = [number for number, data in read if data is None]
    if bad and bad != [read[-1][0]]:
        raise ValueError(f"{path}:{bad[0]}: not a JSON object line")
    return [data for _, data in read if data is not None]


def load_truth(path: Path) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Read a truth log: (requests by id, steps in order). A truncated last line is skipped."""
    lines = _lines(path)
    requests = {data["id"]: data for data in lines if data.get("type") == "request"}
    return requests, [data for data in lines if data.get("type") == "step"]


def load_connections(path: Path) -> list[dict[str, Any]]:
    """The connection lines of a truth log, in acceptance order."""
    return [data for data in _lines(path) if data.get("type") == "connection"]
