"""Read Prometheus text exposition (`/metrics`) into a flat dict of floats.

Owns the one small parser the project uses for server-side metrics (llama.cpp's `llamacpp:*`,
vLLM's `vllm:*`, the simulator's), so tests and reports compare client-side counts with the
server's own counters the same way. Keys are the metric name with its label set verbatim,
e.g. `llamacpp:tokens_predicted_total` or `vllm:num_requests_running{model_name="m"}`. The page
is fetched by `llmload.loadgen.transport.server_pages.scrape_metrics` (this module reads no URL).
"""

from __future__ import annotations


def parse_prometheus(text: str) -> dict[str, float]:
    """Samples of a Prometheus text page as {"name{labels}": value}; comments and bad lines skipped.

    Label sets are kept as the server wrote them (no re-ordering); an optional trailing
    timestamp is ignored; NaN and +/-Inf parse as floats.
    """
    samples: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            key, _, rest = line.rpartition("}")
            key += "}"
        else:
            key, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            samples[key] = float(fields[0])
        except ValueError:
            continue
    return samples
