"""Output identity across two runs on a real llama.cpp server (SmolLM2-135M) at concurrency 1.

One sequence at a time, greedy: the same prompt goes through the same computation, so the two
runs' texts must be the same, request for request; `llmload compare` must say "outputs identical"
and match every request (the server's own answers are the ground truth: both runs' texts, hashed
by the client, and one token per chunk as `usage` counts them)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from fixtures.paths import REPO
from fixtures.real_runs import sweep_ladder

from llmload.analysis.output_identity import IDENTICAL, output_identity
from llmload.analysis.run.postprocess import load_run

pytestmark = pytest.mark.real

LADDER = "rungs: [1]\nrequests_per_user: 6\nmax_tokens: 32\nprompt_tokens: 32\n"


def test_two_runs_at_concurrency_1_are_identical(llama_server, tmp_path):
    prefixes = [sweep_ladder(llama_server.url, tmp_path / name, LADDER).prefix for name in ("base", "cand")]
    base, cand = (load_run(p, keep_records=True) for p in prefixes)
    for res in (base, cand):
        records = [r for rung in res.record_rungs() for r in rung.records]
        assert len(records) == 6 and all(r.ok and r.text_hash for r in records)
        assert all(r.chunks == r.output_tokens == 32 for r in records)
    result = output_identity(base, cand)
    (rung,) = result.rungs
    assert (rung.compared, rung.cand_unmatched, rung.base_unmatched) == (6, 0, 0)
    assert result.verdict == IDENTICAL, result.as_dict()
    argv = [
        sys.executable,
        str(REPO / "scripts" / "compare.py"),
        *map(str, prefixes),
        "--fail-on-output-change",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0 and "outputs identical (6 of 6 matched requests)" in proc.stdout, proc.stdout
