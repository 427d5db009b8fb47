"""The server's pages read with one plain GET, outside the run's requests: a Prometheus `/metrics`
page (the server's, or a DCGM exporter's), parsed by `llmload.core.prometheus_text`, and the
server's version from the first version endpoint that answers one (vLLM `GET /version`
{"version"}, SGLang `GET /get_server_info` {"version"}, TGI `GET /info` {"version"}, llama.cpp
`GET /props` {"build_info"}), which the run's environment file records
(`llmload.core.run_environment`).
"""

from __future__ import annotations

import json
import urllib.request

from llmload.core.prometheus_text import parse_prometheus

VERSION_ENDPOINTS = (
    ("/version", "version"),
    ("/get_server_info", "version"),
    ("/info", "version"),
    ("/props", "build_info"),
)


def scrape_metrics(url: str, timeout: float = 5.0) -> dict[str, float]:
    """GET a `/metrics` URL and parse it with `parse_prometheus`."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback servers)
        return parse_prometheus(resp.read().decode("utf-8", errors="replace"))


def server_version(host: str, timeout: float = 1.0) -> dict[str, str] | None:
    """{"endpoint", "version"} from the first version endpoint that answers, else None."""
    for path, key in VERSION_ENDPOINTS:
        try:
            with urllib.request.urlopen(host.rstrip("/") + path, timeout=timeout) as resp:  # noqa: S310
                data = json.loads(resp.read())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get(key), str | int):
            return {"endpoint": path, "version": str(data[key])}
    return None
