"""Workloads: the prompts a run sends, built before the timed path and reproducible from the seed.

Sources (config keys):
- `prompt`: one fixed prompt (the default).
- `prompt_tokens: N`: synthetic prompts of N input tokens: words drawn (seeded) from a plain
  English vocabulary. The words-to-tokens ratio of the server's tokenizer is measured once, on
  the master, with the server's `/tokenize` (vLLM: `{"prompt"|"messages"}` -> `count`; llama.cpp:
  `{"content"}` -> `tokens`) and, when the server has none, from `usage.prompt_tokens` of two
  one-token probe requests. Two lengths give the per-word slope and the constant overhead (BOS,
  chat template). The real input length of every request is its `usage.prompt_tokens`.
- `shared_prefix_ratio: r`: the first r of a synthetic prompt's words are the same in every
  request (a system-prompt-like prefix a prefix cache can reuse); the rest differ per prompt.
- `prompt_file`: text (one prompt per non-empty line), JSONL (objects with a "prompt" field), or
  ShareGPT JSON (a list of {"conversations": [{"from": "human", "value": ...}, ...]}; the first
  human turn is the prompt). `prompt_format: auto` picks by content. The ShareGPT replies are not
  used as output lengths: every request asks for `max_tokens` with `ignore_eos`, so rungs stay
  comparable (vLLM's ShareGPT dataset uses the reply's length instead).
- `unique_prompts: true`: a per-request tag makes every prompt unique (defeats prefix caching);
  it goes right after the shared prefix, so the prefix stays shared.

Request i of a process gets prompt `pool[i % len(pool)]`: the pool is the shuffled file prompts or
`SYNTHETIC_POOL` synthetic prompts, built once per process (`workload_for`).
"""

from __future__ import annotations

import json
import random
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmload.core.config import ConfigError, SweepConfig
from llmload.loadgen.payload import endpoint_path

# Common English words; real BPE tokenizers give about one token each (with the leading space).
_VOCAB = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government "
    "number night point home water room mother area money story fact month lot right study book "
    "eye job word business issue side kind head house service friend father power hour game line "
    "end member law car city community name president team minute idea kid body information back "
    "parent face others level office door health person art war history party result change "
    "morning reason research girl guy moment air teacher force education"
)
_WORDS = tuple(_VOCAB.split())
SYNTHETIC_POOL = 1024  # distinct synthetic prompts per process
CALIBRATION_WORDS = 200


@dataclass(frozen=True, slots=True)
class Calibration:
    """Tokens = overhead + per_word * words, measured on the server; `method` says how."""

    per_word: float
    overhead: float
    method: str  # "tokenize" or "usage"

    def words_for(self, tokens: int) -> int:
        return max(1, round((tokens - self.overhead) / self.per_word))


def synthetic_text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _post_json(
    url: str, body: dict[str, Any], headers: dict[str, str], context: ssl.SSLContext | None
) -> Any:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **headers}
    )
    with urllib.request.urlopen(req, timeout=30, context=context) as resp:  # noqa: S310
        return json.loads(resp.read())


def _count_tokenize(host: str, model: str, chat: bool, text: str, headers: dict[str, str], ctx: Any) -> int:
    """Tokens of `text` by the server's /tokenize (vLLM shape, then llama.cpp's)."""
    vllm = {
        "model": model,
        **({"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text}),
    }
    try:
        return int(_post_json(host + "/tokenize", vllm, headers, ctx)["count"])
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return len(_post_json(host + "/tokenize", {"content": text}, headers, ctx)["tokens"])


def _count_usage(host: str, model: str, chat: bool, text: str, headers: dict[str, str], ctx: Any) -> int:
    """Tokens of `text` as usage.prompt_tokens of a one-token request."""
    body: dict[str, Any] = {"model": model, "max_tokens": 1, "stream": False, "temperature": 0}
    body |= {"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text}
    return int(
        _post_json(host + endpoint_path("chat" if chat else "completions"), body, headers, ctx)["usage"][
            "prompt_tokens"
        ]
    )


def calibrate(
    host: str, model: str, endpoint: str, headers: dict[str, str], context: ssl.SSLContext | None = None
) -> Calibration:
    """Measure the server's tokens per synthetic word (see the module docstring)."""
    host = host.rstrip("/")
    chat = endpoint == "chat"
    rng = random.Random("llmload-calibration")
    short, long = synthetic_text(rng, CALIBRATION_WORDS), synthetic_text(rng, 2 * CALIBRATION_WORDS)
    for method, count in (("tokenize", _count_tokenize), ("usage", _count_usage)):
        try:
            a, b = (
                count(host, model, chat, short, headers, context),
                count(host, model, chat, long, headers, context),
            )
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
            continue
        per_word = (b - a) / CALIBRATION_WORDS
        if per_word > 0:
            return Calibration(per_word, a - per_word * CALIBRATION_WORDS, method)
    raise ConfigError(
        f"{host}: cannot measure prompt lengths for 'prompt_tokens' (no /tokenize, no usage.prompt_tokens)"
    )


def _sharegpt(data: Any) -> list[str]:
    prompts = []
    for conv in data if isinstance(data, list) else []:
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        for turn in turns if isinstance(turns, list) else []:
            if (
                isinstance(turn, dict)
                and turn.get("from") == "human"
                and str(turn.get("value") or "").strip()
            ):
                prompts.append(str(turn["value"]))
                break
    return prompts


def _jsonl(lines: list[str]) -> list[str]:
    prompts = []
    for line in lines:
        obj = json.loads(line)
        if isinstance(obj, dict) and isinstance(obj.get("prompt"), str) and obj["prompt"].strip():
            prompts.append(obj["prompt"])
    return prompts


def load_prompt_file(path: str | Path, fmt: str = "auto") -> list[str]:
    """The prompts of a file; ConfigError (naming the file and key) if unreadable or empty."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"{path}: 'prompt_file' cannot be read: {getattr(e, 'strerror', None) or e}"
        ) from None
    stripped = text.lstrip()
    if fmt == "auto":
        fmt = "sharegpt" if stripped.startswith("[") else "jsonl" if stripped.startswith("{") else "lines"
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        prompts = {"sharegpt": lambda: _sharegpt(json.loads(text)), "jsonl": lambda: _jsonl(lines)}.get(
            fmt, lambda: lines
        )()
    except ValueError as e:
        raise ConfigError(f"{path}: 'prompt_file' is not valid {fmt}: {e}") from None
    if not prompts:
        raise ConfigError(f"{path}: 'prompt_file' holds no prompt (format {fmt})")
    return prompts


class Workload:
    """The prompt pool of a run in one process; `prompt(i, request_id)` is a list lookup."""

    def __init__(self, config: SweepConfig, prompt_words: int | None = None) -> None:
        rng = random.Random(f"llmload-workload:{config.seed}")
        self.unique = config.unique_prompts
        self.prefix = ""
        if config.prompt_file is not None:
            pool = load_prompt_file(config.prompt_file, config.prompt_format)
            rng.shuffle(pool)
        elif config.prompt_tokens is not None:
            words = prompt_words or config.prompt_tokens
            shared = round(words * config.shared_prefix_ratio)
            self.prefix = synthetic_text(rng, shared) + " " if shared else ""
            pool = [synthetic_text(rng, words - shared) for _ in range(SYNTHETIC_POOL)]
        else:
            pool = [config.prompt]
        self.pool = pool

    def prompt(self, index: int, request_id: str) -> str:
        body = self.pool[index % len(self.pool)]
        tag = f"[{request_id[:12]}] " if self.unique else ""
        return self.prefix + tag + body


_CACHE: dict[tuple[str, int | None], Workload] = {}


def workload_for(config: SweepConfig, prompt_words: int | None) -> Workload:
    """This process's workload for a run's configuration (built on first use, then reused)."""
    key = (
        json.dumps(
            [
                config.prompt_file,
                config.prompt_tokens,
                config.prompt,
                config.seed,
                config.shared_prefix_ratio,
                config.unique_prompts,
                config.prompt_format,
            ]
        ),
        prompt_words,
    )
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = Workload(config, prompt_words)
    return _CACHE[key]
