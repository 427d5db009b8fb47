"""The server's count of a text's tokens, the two ways synthetic prompts are calibrated
(`llmload.loadgen.workload.prompts.calibrate_prompts`): its `/tokenize` endpoint (vLLM
`{"prompt"|"messages"}` -> `count`, llama.cpp `{"content"}` -> `tokens`), and `usage.prompt_tokens`
of a one-token request (each appended to `sent`: the run records it, phase "calibration").

A count the server cannot give (no such endpoint, an HTTP failure, an answer cut short or of
another shape) raises `TokenCountError`, whatever went wrong on the wire.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from llmload.loadgen.transport.preflight import generation_path

# an HTTP-level failure (not HTTP, cut short) is one more way a counting method is not there
_COUNT_ERRORS = (urllib.error.URLError, OSError, http.client.HTTPException, ValueError, KeyError, TypeError)


class TokenCountError(ValueError):
    """The server gave no count this way."""


def _post_json(
    url: str, body: dict[str, Any], headers: dict[str, str], context: ssl.SSLContext | None
) -> Any:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **headers}
    )
    with urllib.request.urlopen(req, timeout=30, context=context) as resp:  # noqa: S310
        return json.loads(resp.read())


@dataclass(slots=True)
class ServerTokenCounts:
    """Token counts of texts sent as a completions prompt or (`chat`) a chat's user message."""

    host: str
    model: str
    chat: bool
    headers: dict[str, str]
    context: ssl.SSLContext | None = None
    sent: list[dict[str, Any]] | None = None

    def tokenize(self, text: str) -> int:
        """Tokens of `text` by the server's /tokenize (vLLM's shape, then llama.cpp's)."""
        host, headers, ctx = self.host.rstrip("/"), self.headers, self.context
        vllm = {
            "model": self.model,
            **({"messages": [{"role": "user", "content": text}]} if self.chat else {"prompt": text}),
        }
        try:
            try:
                return int(_post_json(host + "/tokenize", vllm, headers, ctx)["count"])
            except _COUNT_ERRORS:
                return len(_post_json(host + "/tokenize", {"content": text}, headers, ctx)["tokens"])
        except _COUNT_ERRORS as e:
            raise TokenCountError(f"/tokenize: {e}") from None

    def usage(self, text: str) -> int:
        """Tokens of `text` as usage.prompt_tokens of a one-token request (appended to `sent`)."""
        chat, sent = self.chat, self.sent
        body: dict[str, Any] = {"model": self.model, "max_tokens": 1, "stream": False, "temperature": 0}
        body |= {"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text}
        t_start, usage = time.time(), None
        request_id = f"calibration-{len(sent or ())}"  # its record's id (llmload.loadgen.run.run_start)
        url = self.host.rstrip("/") + generation_path(chat)
        try:
            usage = _post_json(url, body, {**self.headers, "X-Request-Id": request_id}, self.context)["usage"]
            return int(usage["prompt_tokens"])
        except _COUNT_ERRORS as e:
            raise TokenCountError(f"usage.prompt_tokens: {e}") from None
        finally:
            if sent is not None:
                sent.append(
                    {
                        "id": request_id,
                        "endpoint": "chat" if chat else "completions",
                        "t_start": t_start,
                        "t_end": time.time(),
                        "usage": usage if isinstance(usage, dict) else None,
                        "max_tokens": 1,
                        "stream": False,
                    }
                )
