"""The request body the load generator sends, built from the run configuration.

Greedy (temperature 0 by default), an exact output length: `max_tokens` (fixed, or drawn per
request) with `ignore_eos` so the server decodes exactly that many tokens; streaming with
`stream_options.include_usage` so the server reports the true token count (vLLM `bench serve`
sends the same fields). The output length goes in the endpoint's field (`max_tokens_field`):
completions `max_tokens`, chat both `max_tokens` and `max_completion_tokens` unless the ladder
names one, the Responses API `max_output_tokens`, with the prompt as its `input`, `store: false`
and no `stream_options` (its `response.completed` event always carries the usage).

With `tools` or `response_format` (chat and the Responses API) the body carries `tools`,
`tool_choice` (a tool's name as a named function), `parallel_tool_calls` and `response_format`
(the Responses API: its flat tools and `text.format`), and no `ignore_eos`: such replies stop on
their own, and `max_tokens` is a cap.
"""

from __future__ import annotations

from typing import Any

from llmload.core.config import TOOL_CHOICES, SweepConfig

COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
PATHS = {"completions": COMPLETIONS_PATH, "chat": CHAT_PATH, "responses": RESPONSES_PATH}


def endpoint_path(endpoint: str) -> str:
    return PATHS.get(endpoint, COMPLETIONS_PATH)


def build_payload(config: SweepConfig, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """The JSON body of one request, asking for `max_tokens` output tokens (the configured length,
    or this request's draw of it)."""
    body: dict[str, Any] = {"model": model, "temperature": config.temperature, "stream": config.stream}
    field = config.max_tokens_field
    if config.endpoint == "responses":
        body["input"] = prompt
        body["max_output_tokens"] = max_tokens
        body["store"] = False  # a load test's answers are not kept on the server (OpenAI stores by default)
    elif config.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        if field != "max_completion_tokens":
            body["max_tokens"] = max_tokens
        if field != "max_tokens":
            body["max_completion_tokens"] = max_tokens
    else:
        body["prompt"] = prompt
        body["max_tokens"] = max_tokens
    if config.structured:
        body.update(reply_shape(config))
    elif config.ignore_eos:
        body["ignore_eos"] = True
    if config.stream and config.endpoint != "responses":  # the Responses API always sends usage
        body["stream_options"] = {"include_usage": True}
        if config.continuous_usage:  # usage on every chunk: tokens per chunk, so ITL per token (vLLM)
            body["stream_options"]["continuous_usage_stats"] = True
    return body


def reply_shape(config: SweepConfig) -> dict[str, Any]:
    """The fields of a request's tools and format (module docstring), in the endpoint's form."""
    responses = config.endpoint == "responses"
    out: dict[str, Any] = {}
    if config.tools is not None:
        out["tools"] = [{"type": "function", **t["function"]} if responses else t for t in config.tools]
    choice = config.tool_choice
    if choice is not None:
        named = {"type": "function", **({"name": choice} if responses else {"function": {"name": choice}})}
        out["tool_choice"] = choice if choice in TOOL_CHOICES else named
    if config.parallel_tool_calls is not None:
        out["parallel_tool_calls"] = config.parallel_tool_calls
    if config.response_format is not None:
        fmt: dict[str, Any] = {"type": config.response_format}
        if config.response_schema is not None:
            schema = {"name": "llmload_reply", "schema": config.response_schema}
            fmt.update(schema if responses else {"json_schema": schema})
        out.update({"text": {"format": fmt}} if responses else {"response_format": fmt})
    return out
