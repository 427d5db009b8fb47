"""The request body the load generator sends, built from the run configuration.

Greedy (temperature 0 by default), an exact output length: `max_tokens` (fixed, or drawn per
request) with `ignore_eos` so the server decodes exactly that many tokens; streaming with
`stream_options.include_usage` so the server reports the true token count (vLLM `bench serve`
sends the same fields).
"""

from __future__ import annotations

from typing import Any

from llmload.core.config import SweepConfig

COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"


def endpoint_path(endpoint: str) -> str:
    return CHAT_PATH if endpoint == "chat" else COMPLETIONS_PATH


def build_payload(config: SweepConfig, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """The JSON body of one request, asking for `max_tokens` output tokens (the configured length,
    or this request's draw of it)."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": config.temperature,
        "stream": config.stream,
    }
    if config.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        body["max_completion_tokens"] = max_tokens
    else:
        body["prompt"] = prompt
    if config.ignore_eos:
        body["ignore_eos"] = True
    if config.stream:
        body["stream_options"] = {"include_usage": True}
        if config.continuous_usage:  # usage on every chunk: tokens per chunk, so ITL per token (vLLM)
            body["stream_options"]["continuous_usage_stats"] = True
    return body
