"""`GET /metrics`: the engine's counters and gauges as Prometheus text, with vLLM's metric names.

Speculative-decoding counters follow vLLM's meaning: one draft per running sequence per step,
`max_draft` draft tokens per draft, `k - 1` accepted tokens when the step gave the sequence k
tokens, so `1 + accepted / drafts` is the mean acceptance length and
`drafts + accepted == generation_tokens`.
"""

from __future__ import annotations

from llmload.sim.engine import Engine

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(engine: Engine, model_name: str) -> str:
    """The Prometheus text exposition of the engine's state."""
    c = engine.counters
    labels = f'model_name="{_label(model_name)}"'
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for extra, value in samples:
            lines.append(f"{name}{{{labels}{extra}}} {value}")

    # (name, kind, help, samples: (extra labels, value))
    families: list[tuple[str, str, str, list[tuple[str, float]]]] = [
        ("vllm:num_requests_running", "gauge", "Requests in the running batch.", [("", len(engine.running))]),
        (
            "vllm:num_requests_waiting",
            "gauge",
            "Requests waiting to be admitted.",
            [("", len(engine.waiting))],
        ),
        (
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage (1 = 100 %): tokens held over max_num_seqs * max_model_len.",
            [("", engine.kv_cache_usage())],
        ),
        ("vllm:prompt_tokens_total", "counter", "Prefill tokens processed.", [("", c.prompt_tokens)]),
        (
            "vllm:generation_tokens_total",
            "counter",
            "Generation tokens processed.",
            [("", c.generation_tokens)],
        ),
        (
            "vllm:request_success_total",
            "counter",
            "Finished requests by finish reason.",
            [(f',finished_reason="{_label(r)}"', n) for r, n in sorted(c.finished.items())],
        ),
    ]
    counters = (  # (name, help, value) of the plain counters
        (
            "vllm:prefix_cache_queries_total",
            "Prompt tokens looked up in the prefix cache.",
            c.prefix_cache_queries,
        ),
        ("vllm:prefix_cache_hits_total", "Prompt tokens served by the prefix cache.", c.prefix_cache_hits),
        ("vllm:num_preemptions_total", "Cumulative preemptions.", c.preemptions),
        ("vllm:spec_decode_num_drafts_total", "Speculative drafts.", c.spec_drafts),
        (
            "vllm:spec_decode_num_draft_tokens_total",
            "Speculative draft tokens proposed.",
            c.spec_draft_tokens,
        ),
        (
            "vllm:spec_decode_num_accepted_tokens_total",
            "Speculative draft tokens accepted.",
            c.spec_accepted_tokens,
        ),
    )
    families += [(name, "counter", help_text, [("", value)]) for name, help_text, value in counters]
    for family in families:
        metric(*family)
    return "\n".join(lines) + "\n"
