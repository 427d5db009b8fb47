"""Check the target before the first rung: reachable, OpenAI-compatible, auth accepted, model served;
and whether it honours per-chunk usage (`probe_continuous_usage`); whether it accepts the keys of
a request's tools and format (`probe_fields`).

`preflight(host, ...)` returns the model to use (the configured one, or the first listed by
`GET /v1/models`) or raises `PreflightError` with one line that says what is wrong, so a run
against a wrong host stops at once instead of producing a thousand identical failures.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.error
import urllib.request
from typing import Any


class PreflightError(RuntimeError):
    """The target cannot serve the run; the message is one line."""


def tls_context(ca_bundle: str = "", insecure: bool = False) -> ssl.SSLContext:
    """Certificate verification on by default (system CAs); a CA bundle is trusted in addition
    (as geventhttpclient does for the users' connections); or no verification, on request."""
    context = ssl.create_default_context()
    if insecure:  # the user's explicit choice
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if ca_bundle:
        try:
            context.load_verify_locations(cafile=ca_bundle)
        except (OSError, ssl.SSLError) as e:
            raise PreflightError(f"--ca-bundle {ca_bundle}: cannot load: {e.strerror or e}") from None
    return context


def auth_headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def preflight(
    host: str,
    *,
    model: str | None,
    api_key: str = "",
    context: ssl.SSLContext | None = None,
    timeout: float = 10.0,
    max_tokens: int | None = None,
    prompt_tokens: int | None = None,
) -> str:
    """Return the model to use, or raise PreflightError. With max_tokens (and prompt_tokens, when
    known), a model whose listed `max_model_len` cannot hold them stops the run here."""
    if not host:
        raise PreflightError("no target host: pass --host http://HOST:PORT (or set LOCUST_HOST)")
    url = host.rstrip("/") + "/v1/models"
    req = urllib.request.Request(url, headers=auth_headers(api_key))
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:  # noqa: S310
            body = resp.read()
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise PreflightError(
                f"{url}: HTTP {e.code}: the server rejected the API key "
                "(set --api-key / LOCUST_API_KEY / OPENAI_API_KEY)"
            ) from None
        if e.code == 404:
            raise PreflightError(
                f"{url}: HTTP 404: not an OpenAI-compatible server at this address "
                "(give --host without the /v1 path)"
            ) from None
        raise PreflightError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise PreflightError(f"{url}: cannot reach the server: {reason}") from None
    except http.client.HTTPException as e:  # an answer that is not HTTP, or cut short
        raise PreflightError(f"{url}: {http_failure(e)}") from None
    try:
        cards = {str(m["id"]): m for m in json.loads(body)["data"]}
    except (ValueError, KeyError, TypeError):
        raise PreflightError(f"{url}: answer is not an OpenAI model list: {body[:80]!r}") from None
    if model and model not in cards:
        raise PreflightError(f"model {model!r} is not served by {host}; it serves: {', '.join(cards)}")
    if not cards:
        raise PreflightError(f"{url}: the server lists no model")
    chosen = model or next(iter(cards))
    if max_tokens is not None:
        check_context(url, chosen, cards[chosen], max_tokens, prompt_tokens)
    return chosen


def http_failure(error: http.client.HTTPException) -> str:
    """What went wrong at the HTTP level, in words (at most ~100 characters of what came back)."""
    if isinstance(error, http.client.IncompleteRead):
        expected = f" of {len(error.partial) + error.expected} expected" if error.expected else ""
        return f"the answer was cut short: {len(error.partial)} bytes{expected} arrived (not an HTTP server?)"
    if isinstance(error, http.client.BadStatusLine):
        line = str(error.args[0] if error.args else "")[:100]
        return f"the answer is not HTTP: status line {line!r} (a server of another protocol?)"
    return f"the answer is not valid HTTP: {type(error).__name__}: {str(error)[:100]}"


def generation_path(chat: bool) -> str:
    """The path of a generation request: a chat's, or a completion's."""
    return "/v1/chat/completions" if chat else "/v1/completions"


def check_context(url: str, model: str, card: object, max_tokens: int, prompt_tokens: int | None) -> None:
    """PreflightError when the model card's `max_model_len` (vLLM, the simulator) cannot hold the
    prompt plus max_tokens: every request would fail with HTTP 400. A card without it passes."""
    limit = card.get("max_model_len") if isinstance(card, dict) else None
    if not isinstance(limit, int) or isinstance(limit, bool):
        return
    needed = max_tokens + (prompt_tokens or 1)  # a prompt holds at least one token
    if needed > limit:
        prompt = f"{prompt_tokens} prompt tokens" if prompt_tokens else "the prompt"
        raise PreflightError(
            f"max_tokens {max_tokens} + {prompt} exceed the context of model {model!r}: "
            f"{url} says max_model_len {limit}; lower --max-tokens / 'max_tokens'"
        )


def probe_continuous_usage(
    host: str,
    model: str,
    chat: bool,
    headers: dict[str, str],
    context: ssl.SSLContext | None = None,
    timeout: float = 30.0,
    sent: list[dict[str, Any]] | None = None,
) -> bool:
    """Whether the server honours `stream_options.continuous_usage_stats` (usage on every token
    chunk: vLLM does, llama.cpp ignores it, a strict OpenAI API refuses it): one streamed greedy
    request of 2 tokens, honoured when a `choices` chunk carries usage. Any failure is "no". The
    request is appended to `sent` (start, end, its usage) for the run's records."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 2,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    body |= {"messages": [{"role": "user", "content": "Hello"}]} if chat else {"prompt": "Hello"}
    path = generation_path(chat)
    request_id = f"calibration-{len(sent or ())}"  # its record's id (llmload.loadgen.run.run_start)
    req = urllib.request.Request(
        host.rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Request-Id": request_id, **headers},
    )
    honoured, usage, t_start = False, None, time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:  # noqa: S310
            for line in resp:
                if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                    continue
                data = json.loads(line[5:])
                usage = data.get("usage") or usage
                honoured = honoured or bool(data.get("choices") and data.get("usage"))
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError, AttributeError):
        return False
    finally:
        if sent is not None:
            sent.append(
                {
                    "endpoint": "chat" if chat else "completions",
                    "t_start": t_start,
                    "t_end": time.time(),
                    "usage": usage,
                    "max_tokens": 2,
                    "stream": True,
                }
            )
    return honoured


def probe_fields(
    url: str,
    endpoint: str,
    body: dict[str, Any],
    fields: dict[str, Any],
    headers: dict[str, str],
    context: ssl.SSLContext | None = None,
    timeout: float = 30.0,
    sent: list[dict[str, Any]] | None = None,
) -> None:
    """PreflightError naming the first of `fields` (a request's `tools`, `tool_choice`,
    `parallel_tool_calls`, `response_format` or `text`) the server refuses: one short request to
    `url` per field, `body` plus that field (and `tools`, which the tool keys need), in order; a
    refusal is an HTTP 4xx. An answer that is not a refusal, or no answer, passes: the run itself
    tells those. Each request is appended to `sent` (its endpoint, start, end, usage)."""
    for key in fields:
        probe = {**body, **({"tools": fields["tools"]} if "tools" in fields else {}), key: fields[key]}
        req = urllib.request.Request(
            url,
            data=json.dumps(probe).encode(),
            headers={
                "Content-Type": "application/json",
                "X-Request-Id": f"calibration-{len(sent or ())}",
                **headers,
            },
        )
        usage, t_start, refusal = None, time.time(), None
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:  # noqa: S310
                usage = json.loads(resp.read()).get("usage")
                if isinstance(usage, dict) and "output_tokens" in usage:  # the Responses API's names
                    usage = {
                        "prompt_tokens": usage.get("input_tokens"),
                        "completion_tokens": usage["output_tokens"],
                    }
        except urllib.error.HTTPError as e:
            if 400 <= e.code < 500:
                refusal = f"HTTP {e.code}: {_error_message(e)}"
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError, AttributeError):
            pass
        if sent is not None:
            asked = body.get("max_tokens", body.get("max_output_tokens"))
            times = {"t_start": t_start, "t_end": time.time()}
            sent.append({"endpoint": endpoint, **times, "usage": usage, "max_tokens": asked, "stream": False})
        if refusal is not None:
            raise PreflightError(
                f"the server refuses '{key}' ({refusal}): remove it from the ladder or enable it there"
            )


def _error_message(error: urllib.error.HTTPError) -> str:
    """The OpenAI error's message of a refusal (its first 100 characters), or the body's start."""
    try:
        text = error.read(4096).decode("utf-8", "replace")
        data = json.loads(text)
        message = data.get("error", {}).get("message") if isinstance(data, dict) else None
        return str(message or text)[:100].replace("\n", " ")
    except (OSError, ValueError, AttributeError, http.client.HTTPException):
        return "no readable body"
