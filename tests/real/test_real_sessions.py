"""Multi-turn sessions against the real llama.cpp server: its prompt cache serves the history a
later turn resends, and the server says so (usage.prompt_tokens_details.cached_tokens, which
llama.cpp sends with every final chunk, also as timings.cache_n)."""

from __future__ import annotations

import pytest
from fixtures.real_runs import sweep_ladder

from llmload.analysis.run.production_traffic import turn_metrics
from llmload.core.files.records import read_records

pytestmark = pytest.mark.real

LADDER = """\
endpoint: chat
rungs: [1]
max_tokens: 16
warmup_requests: 0
sessions:
  turns: 3
  per_user: 2
  user_tokens: 24
  system_tokens: 200
"""


def test_turn_two_reports_cached_tokens(llama_server, tmp_path):
    run = sweep_ladder(llama_server.url, tmp_path / "run", LADDER, endpoint="chat")
    records, skipped = read_records(run.records)
    assert not skipped and len(records) == 6 and all(r.ok for r in records)
    assert len({r.session for r in records}) == 2
    for r in records:
        assert r.cached_tokens is not None and 0 <= r.cached_tokens < r.prompt_tokens
        if r.turn > 1:  # the system message and the earlier turns were already in the slot's cache
            assert r.cached_tokens > 200
    rows = turn_metrics(records)
    assert [t.turn for t in rows] == [1, 2, 3]
    assert rows[1].prompt_tokens > rows[0].prompt_tokens and rows[1].cached_share > 0.5
