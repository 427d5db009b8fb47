"""Request validation: OpenAI/vLLM request JSON -> `GenerationRequest`, or an `ApiError`.

Accepted, as vLLM does: `model` (must be the served name if given), `prompt` (a string or a
list of one string) or `messages`, `max_tokens` / `max_completion_tokens` (default: 16 for
completions, the rest of the context window for chat, as in vLLM), `stream`,
`stream_options.include_usage`, `stream_options.continuous_usage_stats`, `ignore_eos`.
`temperature` and other sampling fields are accepted and ignored: the simulated model is
always greedy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmload.sim.tokens import chat_prompt, count_tokens

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # vLLM's CompletionRequest default (chat has none)


class ApiError(Exception):
    """A request the server rejects with an OpenAI error JSON."""

    def __init__(
        self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    chat: bool
    prompt: str  # for chat: the messages rendered as "role: content" lines
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    ignore_eos: bool
    messages: tuple[dict[str, Any], ...] | None = None  # chat: the messages as sent
    responses: bool = False  # a Responses API request (llmload.sim.formats.responses)


def check_model(body: dict[str, Any], served_model: str) -> None:
    model = body.get("model")
    if model is not None and model != served_model:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")


def prompt_of(body: dict[str, Any], *, chat: bool) -> tuple[str, int]:
    """The prompt text and its token count, from `messages` (chat) or `prompt`."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise ApiError(400, "`messages` must be a non-empty list of message objects", param="messages")
        return chat_prompt(messages)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError(400, "`prompt` must be a string or a list of one string", param="prompt")
    return prompt, count_tokens(prompt)


def _bool(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"`{key}` must be a boolean", param=key)
    return value


def parse_generation(body: Any, *, chat: bool, served_model: str, max_model_len: int) -> GenerationRequest:
    """Validate a completions (chat=False) or chat-completions request body."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    check_model(body, served_model)
    prompt, prompt_tokens = prompt_of(body, chat=chat)
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(key)
    if max_tokens is None:
        max_tokens = max_model_len - prompt_tokens if chat else COMPLETIONS_DEFAULT_MAX_TOKENS
    elif isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ApiError(400, f"`{key}` must be an integer >= 1", param=key)
    if prompt_tokens + max_tokens > max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, {max_tokens} in the "
            "completion). Please reduce the length of the prompt or completion.",
            param=key,
        )
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "`stream_options` must be an object", param="stream_options")
    return GenerationRequest(
        chat=chat,
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=_bool(body, "stream"),
        include_usage=_bool(options, "include_usage"),
        continuous_usage=_bool(options, "continuous_usage_stats"),
        ignore_eos=_bool(body, "ignore_eos"),
        messages=tuple(body["messages"]) if chat else None,
    )
