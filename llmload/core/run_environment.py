"""The environment of a run: target, server version, package versions, load-generator machine.

Written by the master when a run starts, as `<prefix>_env.json`, so a report made later says
what produced the numbers. Everything here is a local lookup; the server's version is read by
the caller (`llmload.loadgen.transport.server_pages.server_version`: a few short GETs).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from llmload.core.files.run_files import RunFiles

PACKAGES = ("llmload", "locust", "gevent", "geventhttpclient")


def env_path(prefix: str | Path) -> Path:
    return RunFiles(Path(prefix)).environment


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo, else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def collect_environment(host: str, server_version: dict[str, str] | None) -> dict[str, Any]:
    """What produced the run: target and server version (as its version endpoint told it), packages,
    Python, generator CPU."""
    return {
        "recorded_at": time.time(),
        "target": host,
        "server_version": server_version,
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
    }


def write_environment(prefix: str | Path, data: dict[str, Any]) -> None:
    path = env_path(prefix)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def read_environment(prefix: str | Path) -> dict[str, Any] | None:
    try:
        data = json.loads(env_path(prefix).read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None
