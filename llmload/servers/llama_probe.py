"""Does this `llama-server` binary work here? Answered by generating tokens, not by `--version`.

A binary built for this CPU can start, load the model and answer `/health`, then die with
SIGILL on its first prompt: the AMX matmul of repacked Q4 weights on some Intel Xeon VMs is the
case that made this check necessary. So the probe does real work: it starts the server with the
model on a free loopback port, with the run flags under test, asks for one greedy completion of
`PROBE_TOKENS` tokens with `ignore_eos`, and checks that exactly that many came back and that the
server is still alive. The server is started under an alias of its own, and `/v1/models` must
list it before its answer counts: a free port can be taken by another process between the check
and the bind, and another server would then answer the probe; the probe then tries a new port.
Whatever goes wrong becomes a one-line `ProbeResult.detail` ("killed by SIGILL on its first
completion", "exited with code 1 before it was healthy: ...").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path

from llmload.servers.process import LOOPBACK, ManagedProcess, ServerStartError, free_port

PROBE_TOKENS = 4
PROBE_PROMPT = (
    "The quick brown fox jumps over the lazy dog. Then the dog"  # several tokens: a real prefill batch
)
START_TIMEOUT_S = 120.0
COMPLETION_TIMEOUT_S = 120.0
EXIT_WAIT_S = 5.0  # how long a server whose connection broke is given to finish dying
PORT_TRIES = 3


@dataclass(frozen=True)
class ProbeResult:
    """What one probe saw: `ok` when the server generated exactly PROBE_TOKENS tokens."""

    ok: bool
    detail: str


def server_command(binary: Path, gguf: Path, port: int, alias: str, run_args: Sequence[str]) -> list[str]:
    """The smallest server that can answer one completion: one slot, one thread, a short context."""
    return [
        str(binary),
        "-m",
        str(gguf),
        "--alias",
        alias,
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--parallel",
        "1",
        "-c",
        "512",
        "-t",
        "1",
        "--no-webui",
        *run_args,
    ]


def _death(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


def _serves(url: str, alias: str) -> bool:
    """True if the server at url lists `alias` among its models (it is the one this probe started)."""
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=COMPLETION_TIMEOUT_S) as resp:  # noqa: S310
            models = json.loads(resp.read())
        return any(entry.get("id") == alias for entry in models.get("data", []))
    except (OSError, HTTPException, ValueError, AttributeError):
        return False


def _complete(url: str, alias: str) -> int:
    """POST one greedy completion; the completion_tokens the server reports."""
    body = {
        "model": alias,
        "prompt": PROBE_PROMPT,
        "max_tokens": PROBE_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
        "stream": False,
    }
    request = urllib.request.Request(
        f"{url}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=COMPLETION_TIMEOUT_S) as resp:  # noqa: S310 (loopback only)
        answer = json.loads(resp.read())
    return int(answer["usage"]["completion_tokens"])


def probe(binary: Path, gguf: Path, run_args: Sequence[str], log_path: Path) -> ProbeResult:
    """Start `binary` with the model and `run_args`, generate PROBE_TOKENS tokens, stop it."""
    for _ in range(PORT_TRIES):
        result = _probe_on(free_port(), binary, gguf, run_args, log_path)
        if result is not None:
            return result
    return ProbeResult(False, f"another server answered on each of {PORT_TRIES} free ports tried")


def _probe_on(
    port: int, binary: Path, gguf: Path, run_args: Sequence[str], log_path: Path
) -> ProbeResult | None:
    """The probe on one port; None when the server that answered there is not the one started."""
    url = f"http://{LOOPBACK}:{port}"
    alias = f"llmload-probe-{os.getpid()}-{port}"
    command = server_command(binary, gguf, port, alias, run_args)
    server = ManagedProcess(command, f"{url}/health", log_path, start_timeout=START_TIMEOUT_S)
    started = time.monotonic()
    try:
        server.start()
    except ServerStartError:
        died = server.proc.returncode if server.proc is not None else None
        return ProbeResult(False, f"{_death(died)} before it was healthy (log: {log_path})")
    except OSError as exc:
        return ProbeResult(False, f"could not start ({exc.strerror or exc})")
    try:
        if not _serves(url, alias):
            return None
        tokens = _complete(url, alias)
    except (OSError, HTTPException, urllib.error.URLError, ValueError, KeyError, TypeError) as exc:
        assert server.proc is not None
        try:
            returncode: int | None = server.proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:  # still alive: the answer itself was wrong
            returncode = None
        if returncode is not None:
            return ProbeResult(False, f"{_death(returncode)} on its first completion (log: {log_path})")
        return ProbeResult(False, f"answered no usable completion ({type(exc).__name__}: {str(exc)[:100]})")
    finally:
        server.stop()
    if tokens != PROBE_TOKENS:
        return ProbeResult(False, f"generated {tokens} tokens where {PROBE_TOKENS} were asked")
    return ProbeResult(True, f"generated {tokens} tokens ({time.monotonic() - started:.1f} s with start)")
