"""Output identity across runs (`llmload compare`): real sweeps against the simulator, judged
against its truth log. The simulator's text is a function of the prompt, except where batch
variance flipped a token (the truth log lists the flipped positions of every request)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.paths import REPO

from llmload.analysis.output_identity import CHANGED, IDENTICAL, UNMATCHED, output_identity
from llmload.analysis.run.postprocess import RunResult, load_run
from llmload.cli import sweep as sweep_command
from llmload.core.exit_codes import OUTPUT_CHANGED
from llmload.core.stats import percentile
from llmload.sim.truth import load_truth

# six real sweeps (~80 s): in make test, not make test-fast; nothing about time asserted
pytestmark = [pytest.mark.slow, pytest.mark.untimed]

SCRIPT = REPO / "scripts" / "compare.py"
# one token per chunk (no speculative decoding) so the first differing chunk is the first token
SIM = {"accept_len": 1, "max_draft": 0, "base_ms": 2, "per_seq_ms": 0.5}
LADDER = "rungs: [1, 2, 4]\nrequests_per_user: 2\nmax_tokens: 48\nprompt_tokens: 16\n"


def sweep(path: Path, extra: str = "", **sim: object) -> tuple[RunResult, dict]:
    """A sweep against a simulator with these settings: (its run, truth requests by id)."""
    path.mkdir(parents=True)
    ladder = path / "ladder.yaml"
    ladder.write_text(LADDER + extra)
    flags = [f"--sim={k}={v}" for k, v in {**SIM, **sim}.items()]
    argv = ["--run-dir", str(path / "run"), "--ladder", str(ladder), *flags, "--scrape-interval", "0"]
    assert sweep_command.main(argv) == 0
    truth, _ = load_truth(path / "run" / "sim_truth.jsonl")
    return load_run(path / "run" / "run", keep_records=True), truth


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[RunResult, dict]]:
    root = tmp_path_factory.mktemp("outputs")
    return {
        "base": sweep(root / "base"),
        "same": sweep(root / "same"),
        "varied": sweep(root / "varied", batch_variance=0.02),
        # another acceptance pattern: other chunks of several tokens, the same text
        "chunked": sweep(root / "chunked", accept_len=3, max_draft=4, seed=9),
        "reseeded": sweep(root / "reseeded", "seed: 7\n"),
        "unhashed": sweep(root / "unhashed", "check_determinism: false\n"),
    }


def compare_cli(base: RunResult, cand: RunResult, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(SCRIPT), base.prefix, cand.prefix, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def partners(base: RunResult, cand: RunResult) -> list[list[tuple]]:
    """Per rung, (candidate record, base record) of one prompt: this ladder sends each prompt once
    a rung, so the prompt alone names the partner."""
    out = []
    for b, c in zip(base.record_rungs(), cand.record_rungs(), strict=True):
        by_prompt = {r.prompt_hash: r for r in b.records}
        assert len(by_prompt) == len(b.records) == len(c.records)
        out.append([(r, by_prompt[r.prompt_hash]) for r in c.records])
    return out


def test_two_runs_of_the_same_simulator_are_identical(runs):
    (base, truth), (same, same_truth) = runs["base"], runs["same"]
    assert not any(t["flipped"] for t in [*truth.values(), *same_truth.values()])
    result = output_identity(base, same)
    assert result.verdict == IDENTICAL and not result.reasons
    assert [(r.conc, r.compared, r.differing) for r in result.rungs] == [(1, 2, 0), (2, 4, 0), (4, 8, 0)]
    proc = compare_cli(base, same, "--fail-on-output-change")
    assert proc.returncode == 0, proc.stderr
    assert "outputs identical (14 of 14 matched requests)" in proc.stdout


def test_batch_variance_changes_outputs_where_the_truth_flipped(runs):
    (base, base_truth), (varied, truth) = runs["base"], runs["varied"]
    result = output_identity(base, varied)
    total_differing = 0
    for rung, pairs in zip(result.rungs, partners(base, varied), strict=True):
        firsts = []
        for cand, ref in pairs:
            flipped = set(truth[cand.request_id]["flipped"]) ^ set(base_truth[ref.request_id]["flipped"])
            assert (cand.text_hash != ref.text_hash) == bool(flipped)
            if flipped:
                firsts.append(min(flipped))
        assert (rung.compared, rung.differing) == (len(pairs), len(firsts))
        assert rung.first_diff_median == (percentile(firsts, 50.0) if firsts else None)
        assert rung.unit == "token"
        total_differing += len(firsts)
    assert result.rungs[0].differing == 0  # batch 1 never flips
    assert total_differing > 0 and result.verdict == CHANGED
    proc = compare_cli(base, varied, "--fail-on-output-change")
    assert proc.returncode == OUTPUT_CHANGED, proc.stdout + proc.stderr
    assert f"outputs changed on {total_differing} of 14 matched requests" in proc.stdout
    assert compare_cli(base, varied).returncode == 0  # without the flag a change does not fail
    data = json.loads(compare_cli(base, varied, "--format", "json").stdout)
    assert data["outputs"]["verdict"] == CHANGED and data["outputs"]["differing"] == total_differing
    assert [r["differing"] for r in data["outputs"]["rungs"]] == [r.differing for r in result.rungs]
    assert [r["conc"] for r in data["rungs"]] == [1, 2, 4]  # the speed comparison beside it
    markdown = compare_cli(base, varied, "--format", "markdown").stdout
    assert "| rung" in markdown and f"outputs changed on {total_differing} of 14" in markdown


def test_other_chunks_of_the_same_text_are_identical(runs):
    (base, _), (chunked, truth) = runs["base"], runs["chunked"]
    assert any(max(t["chunk_tokens"]) > 1 for t in truth.values())  # speculative chunks
    cands = [r for rung in chunked.record_rungs() for r in rung.records]
    bases = {r.prompt_hash: r for rung in base.record_rungs() for r in rung.records}
    assert any(r.chunk_hashes != bases[r.prompt_hash].chunk_hashes for r in cands)
    assert output_identity(base, chunked).verdict == IDENTICAL


def test_runs_whose_prompts_cannot_be_matched_are_not_judged(runs):
    base, _ = runs["base"]
    reseeded, _ = runs["reseeded"]
    assert not {r.prompt_hash for r in base.records or []} & {r.prompt_hash for r in reseeded.records or []}
    result = output_identity(base, reseeded)
    assert result.verdict == UNMATCHED and "seeds differ (base 0, candidate 7)" in result.reasons[0]
    proc = compare_cli(base, reseeded, "--fail-on-output-change")
    assert "outputs cannot be matched, not judged" in proc.stdout
    # a gate that could not look does not pass: exit 2, the reason on stderr in one line
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "llmload compare: error: --fail-on-output-change: outputs cannot be matched, not judged: "
        + "; ".join(result.reasons)
    ]
    unhashed, _ = runs["unhashed"]
    result = output_identity(base, unhashed)
    assert result.verdict == UNMATCHED
    assert result.reasons == [
        "no request of the candidate carries prompt and text hashes (the greedy-determinism check was "
        "off: check_determinism: false, unique_prompts, or temperature > 0)"
    ]
