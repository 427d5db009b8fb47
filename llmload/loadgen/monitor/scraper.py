"""The live scrape of a Prometheus page during a run: `MetricsScraper` reads one `/metrics` URL
(through `llmload.loadgen.transport.server_pages`) and appends one flushed line per scrape to a
JSONL file, in the format `llmload.analysis.run.server_metrics` reads back (the server's
counters) and `llmload.analysis.run.gpu_metrics` (a DCGM exporter's, or NVML's through
`llmload.loadgen.monitor.nvml`, a subclass).
"""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path
from typing import IO, Any

from llmload.analysis.run.server_metrics import KNOWN_NAMES, base_name
from llmload.loadgen.transport.server_pages import scrape_metrics


class MetricsScraper:
    """Scrapes one `/metrics` URL into a JSONL file, one flushed line per `sample()` call, keeping
    the metrics named in `names` (default: the server families'; the GPU scrape keeps DCGM's)."""

    def __init__(
        self, url: str, path: Path, *, timeout: float = 2.0, names: frozenset[str] = KNOWN_NAMES
    ) -> None:
        self.url = url
        self.path = Path(path)
        self.timeout = timeout
        self.names = names
        self._fh: IO[str] | None = None

    def sample(self, now: float) -> bool:
        """Scrape once and append the line stamped `now`; False (and an error line) on failure."""
        try:
            scraped = self.read()
        except (OSError, urllib.error.URLError, ValueError) as exc:
            self._write({"t": now, "error": str(exc)})
            return False
        self._write({"t": now, "samples": {k: v for k, v in scraped.items() if base_name(k) in self.names}})
        return True

    def read(self) -> dict[str, float]:
        """One page's samples (the NVML sampler reads its GPUs instead: llmload.loadgen.monitor.nvml)."""
        return scrape_metrics(self.url, timeout=self.timeout)

    def _write(self, line: dict[str, Any]) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("a", encoding="utf-8")
        self._fh.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
