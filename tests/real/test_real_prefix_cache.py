"""No accidental prefix-cache hits on a real llama.cpp server (its prompt cache is on by default,
token by token per slot): each measured request's `timings.cache_n` (in the records as
`cached_tokens`) is no more than the prompt it shares with the run's other prompts, and a 50 %
shared prefix shows as about half of the prompt tokens per rung. llama.cpp has no cache counter
in /metrics: its requests' own `cache_n` are the figure."""

from __future__ import annotations

import pytest
from fixtures.real_runs import sweep_ladder

from llmload.analysis.run.postprocess import load_run

pytestmark = pytest.mark.real


@pytest.mark.parametrize(("ratio", "share"), [(0.0, 0.0), (0.5, 0.5)], ids=["distinct", "half-shared"])
def test_the_prefix_cache_serves_only_the_shared_prefix_on_llama_cpp(llama_server, tmp_path, ratio, share):
    ladder = "rungs: [1, 2]\nrequests_per_user: 2\nmax_tokens: 4\nprompt_tokens: 128\n"
    ladder += f"shared_prefix_ratio: {ratio}\n"
    run = sweep_ladder(llama_server.url, tmp_path / "run", ladder + f"seed: {int(ratio * 10) + 31}\n")
    result = load_run(run.prefix)
    for row in result.rows:
        cache = row.cache
        assert cache is not None and cache["requests"] == row.requests  # llama.cpp always says
        assert cache["over_shared"] == 0, cache
        # the slot's previous prompt shares the anchor (and the shared prefix): a few tokens more
        # than none on the first, a few tokens off a half on the second
        assert abs(cache["share"] - share) <= 8 / 128, cache
