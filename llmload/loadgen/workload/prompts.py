"""Workloads: the prompts a run sends, built before the timed path and reproducible from the seed.

Sources (config keys):
- `prompt`: one fixed prompt (the default).
- `prompt_tokens: N`: synthetic prompts whose length as the server counts it
  (`usage.prompt_tokens`, BOS and chat template included) is N. Calibrated once, on the master
  (`calibrate_prompts`): every word of a plain English vocabulary is tokenized after a fixed anchor word
  (with `/tokenize` where the server has it, else `usage.prompt_tokens` of one-token requests:
  the transport asks, `llmload.loadgen.transport.token_counts`), and only the
  words that cost exactly one token there are used. Every synthetic prompt is the anchor followed
  by such words, so it costs `overhead` + words tokens, where `overhead` (BOS, chat template, the
  anchor) is measured from `usage.prompt_tokens` of a probe request (from `/tokenize` when the
  server sends no usage). The run re-checks every request's `usage.prompt_tokens` against N
  (`llmload.analysis.run.reconcile.check_inputs`).
- `prompt_tokens: {dist: ...}` (llmload.core.workload.lengths): request i asks its own drawn length; the
  pool holds prompts of the longest length, and each request's is cut to its length (every body
  word is one token, so a cut of k words is k tokens shorter).
- `shared_prefix_ratio: r`: the first r of a synthetic prompt's words are the same in every
  request (a system-prompt-like prefix a prefix cache can reuse); the rest differ per prompt.
- `prompt_file`: text (one prompt per non-empty line), JSONL (objects with a "prompt" field), or
  ShareGPT JSON (a list of {"conversations": [{"from": "human", "value": ...}, ...]}; the first
  human turn is the prompt), read by `llmload.core.workload.prompt_files.load_prompt_file`.
  `prompt_format: auto` picks by content. Every request asks for `max_tokens` with `ignore_eos`,
  so rungs stay comparable; `max_tokens: {dist: empirical, replies: true}` draws it from the
  lengths of the file's replies (`llmload.core.workload.lengths`), independently of the prompt.
- `distinct_prompts: true` (the default): every request of a run gets a prompt no other request of
  the run sends, so a prefix cache can serve it only its shared prefix: a tag right after the
  shared prefix (synthetic prompts) or in front of `prompt`, picked by a hash of the seed and the
  request's place (`key`: its phase and rung, and its index there). A rerun with the same seed
  sends the same prompts (output identity compares them); another seed, other ones. The
  greedy-determinism check's probes share one key at every rung ("determinism"): their prompt i
  is the same at every rung, and the warm-up sends each once (llmload.loadgen.run.stage_plan).
  Prompt files are sent as written (their prompts repeat once the file is used up).
- `unique_prompts: true`: the tag comes from the request id instead (random): no prompt is sent
  twice, not even by a rerun. In a synthetic prompt either tag is `TAG_WORDS` one-token words
  counted inside N; in front of `prompt` it is `[<tag words>] ` (distinct) or `[<12 hex digits>] `
  (unique), on top of it.

Request i (of its stage's one index sequence, which processes share out) gets prompt
`pool[i % len(pool)]` (tagged): the pool is the shuffled file prompts or `SYNTHETIC_POOL`
synthetic prompts, built once per process (`workload_for`).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from llmload.core.config import ConfigError, SweepConfig
from llmload.core.workload.lengths import as_lengths
from llmload.core.workload.prompt_files import load_prompt_file

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
WORDS = tuple(_VOCAB.split())
SYNTHETIC_POOL = 1024  # distinct synthetic prompts per process
POOL_WORDS = 2_000_000  # drawn lengths: the pool holds the longest prompts, so fewer of very long ones
ANCHOR = WORDS[0]  # every synthetic prompt starts with it: the words after it all have a leading space
TAG_WORDS = 4  # words of a synthetic prompt's unique_prompts tag (counted inside prompt_tokens)
MIN_VOCAB = 16  # fewer one-token words than this: the server's tokenizer is too unlike BPE on English
OVERHEAD_PROBE_WORDS = 32


@dataclass(frozen=True, slots=True)
class Calibration:
    """How the server counts a synthetic prompt: each word of `vocab` costs one token after the
    anchor, and a prompt costs `overhead` tokens more (BOS, chat template, the anchor)."""

    vocab: tuple[str, ...]
    overhead: int
    method: str  # how the words were counted: "tokenize" or "usage"
    overhead_method: str  # how the overhead was measured: "usage" or "tokenize"

    def words_for(self, tokens: int, tagged: bool) -> int:
        """Words after the anchor (the tag of a `tagged` prompt included) of a prompt of `tokens`
        tokens; ConfigError if the asked length is below what every prompt costs anyway."""
        words = tokens - self.overhead
        least = 1 + (TAG_WORDS if tagged else 0)
        if words < least:
            raise ConfigError(
                f"'prompt_tokens' {tokens} is too short: every prompt costs {self.overhead} tokens on this "
                f"server (BOS, chat template) plus {least} word(s); ask for at least {self.overhead + least}"
            )
        return words


def synthetic_text(rng: random.Random, words: int, vocab: tuple[str, ...] = WORDS) -> str:
    return " ".join(rng.choice(vocab) for _ in range(words))


def tag_words(request_id: str, vocab: tuple[str, ...]) -> str:
    """A prompt's tag: TAG_WORDS vocab words from a hash of the request id (unique_prompts) or of
    its seed and place (distinct_prompts)."""
    n = int.from_bytes(hashlib.blake2b(request_id.encode(), digest_size=8).digest(), "big")
    out = []
    for _ in range(TAG_WORDS):
        n, digit = divmod(n, len(vocab))
        out.append(vocab[digit])
    return " ".join(out)


class TokenCounts(Protocol):
    """The server's count of a text's tokens, two ways (each raises ValueError when the server gives
    none that way): `llmload.loadgen.transport.token_counts.ServerTokenCounts` asks the server."""

    host: str

    def tokenize(self, text: str) -> int: ...

    def usage(self, text: str) -> int: ...


def calibrate_prompts(counts: TokenCounts) -> Calibration:
    """Find the words that cost one token on the server, and the overhead of every prompt (see
    the module docstring), counting with `counts`."""
    host = counts.host.rstrip("/")
    for method, count in (("tokenize", counts.tokenize), ("usage", counts.usage)):
        try:
            base = count(ANCHOR)
            vocab = tuple(w for w in WORDS[1:] if count(f"{ANCHOR} {w}") == base + 1)
        except ValueError:  # the server gives no count this way
            continue
        if len(vocab) < MIN_VOCAB:
            raise ConfigError(
                f"{host}: only {len(vocab)} common English words cost one token on this server "
                f"(by {method}): 'prompt_tokens' cannot build prompts of an exact length; use 'prompt_file'"
            )
        words = vocab[:OVERHEAD_PROBE_WORDS]
        probe = " ".join([ANCHOR, *words])  # costs overhead (the anchor's cost included) + len(words)
        for overhead_method, measure in (("usage", counts.usage), ("tokenize", count)):
            try:
                overhead = measure(probe) - len(words)
            except ValueError:
                continue
            return Calibration(vocab, overhead, method, overhead_method)
    raise ConfigError(
        f"{host}: cannot measure prompt lengths for 'prompt_tokens' (no /tokenize, no usage.prompt_tokens)"
    )


class Workload:
    """The prompt pool of a run in one process; `prompt(i, request_id)` is a list lookup (with
    drawn input lengths, a list lookup and a cut at the request's length)."""

    def __init__(
        self, config: SweepConfig, prompt_words: int | None = None, vocab: Sequence[str] | None = None
    ) -> None:
        rng = random.Random(f"llmload-workload:{config.seed}")
        self.unique = config.unique_prompts
        self.seed = config.seed
        # a tag from the seed and the request's place; prompt files are sent as written
        self.distinct = config.distinct_prompts and not self.unique and config.prompt_file is None
        self.prefix = ""
        self.vocab: tuple[str, ...] | None = None  # synthetic prompts: the words (and tag words)
        self.longest: tuple[int, int] | None = None  # drawn lengths: the longest's tokens, body words
        self.shared_words = 0  # synthetic prompts: words of the shared prefix after the anchor
        self.fixed_words = len(config.prompt.split())  # words of `prompt`
        if config.prompt_file is not None:
            pool = load_prompt_file(config.prompt_file, config.prompt_format)
            rng.shuffle(pool)
        elif config.prompt_tokens is not None:
            self.vocab = tuple(vocab or WORDS[1:])
            lengths = as_lengths(config.prompt_tokens)
            words = prompt_words or lengths.high  # of the longest prompt, after the anchor, tag included
            # the prefix all prompts share is a share of the shortest one
            shared = round((words - (lengths.high - lengths.low)) * config.shared_prefix_ratio)
            self.shared_words = shared
            body = max(1, words - shared - (TAG_WORDS if config.tagged_prompts else 0))
            self.prefix = " ".join([ANCHOR, *(rng.choice(self.vocab) for _ in range(shared))]) + " "
            self.longest = None if lengths.fixed is not None else (lengths.high, body)
            size = (
                SYNTHETIC_POOL
                if lengths.fixed is not None
                else max(16, min(SYNTHETIC_POOL, POOL_WORDS // body))
            )
            pool = [synthetic_text(rng, body, self.vocab) for _ in range(size)]
        else:
            pool = [config.prompt]
        self.pool = pool

    def shared_prefix(self, overhead: int | None) -> dict[str, int] | None:
        """What a prompt of this workload may share with another of the run, for the run file
        (llmload.analysis.run.rung_tally.SharedPrefix): a synthetic prompt's `shared_tokens`
        (`overhead`: BOS, chat template and anchor, plus the shared words, plus the tag's words,
        which two requests' tags may share by chance: a token-level cache like llama.cpp's then
        reuses them), or the `distinct_words` of a tagged `prompt` (its own words, after the tag);
        None when prompts repeat (a prompt file, or `distinct_prompts: false`)."""
        if not (self.unique or self.distinct):
            return None
        if self.vocab is not None:
            return None if overhead is None else {"shared_tokens": overhead + self.shared_words + TAG_WORDS}
        return {"distinct_words": self.fixed_words}

    def prompt(self, index: int, request_id: str, tokens: int | None = None, key: str = "") -> str:
        """Prompt `index` of the place `key` (module docstring); with drawn lengths, cut to
        `tokens` tokens (each body word is one)."""
        body = self.pool[index % len(self.pool)]
        if self.longest is not None and tokens is not None:
            high, words = self.longest
            keep = max(1, words - (high - tokens))
            body = " ".join(body.split(" ", keep)[:keep])
        if self.unique:
            if self.vocab is not None:
                return f"{self.prefix}{tag_words(request_id, self.vocab)} {body}"
            return f"{self.prefix}[{request_id[:12]}] {body}"
        if not self.distinct:
            return self.prefix + body
        tag = tag_words(f"{self.seed}:{key}:{index}", self.vocab or WORDS)
        return f"{self.prefix}{tag} {body}" if self.vocab is not None else f"[{tag}] {body}"


_CACHE: dict[tuple[str, int | None], Workload] = {}
_LAST_CALL: tuple[SweepConfig, int | None, Sequence[str] | None, Workload] | None = None


def workload_for(
    config: SweepConfig, prompt_words: int | None, vocab: Sequence[str] | None = None
) -> Workload:
    """This process's workload for a run's configuration (built on first use, then reused). The
    users ask once per request with the stage's own config and vocabulary objects: the same
    objects as the last call are answered without building the key (a JSON of the vocabulary)."""
    global _LAST_CALL
    if _LAST_CALL is not None:
        last_config, last_words, last_vocab, last_workload = _LAST_CALL
        if config is last_config and vocab is last_vocab and prompt_words == last_words:
            return last_workload
    key = (
        json.dumps(
            [
                config.prompt_file,
                repr(config.prompt_tokens),
                config.prompt,
                config.seed,
                config.shared_prefix_ratio,
                config.unique_prompts,
                config.distinct_prompts,
                config.prompt_format,
                list(vocab or ()),
            ]
        ),
        prompt_words,
    )
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = Workload(config, prompt_words, vocab)
    _LAST_CALL = (config, prompt_words, vocab, _CACHE[key])
    return _CACHE[key]
