"""The greedy-determinism check through a real `locust` run against the simulator, checked against
the simulator's truth log: which token positions batch variance really flipped in each request.
The check compares its probes (one request per user after each rung, on prompts of its own); the
measured requests' prompts are never sent twice, so the simulator's prefix cache serves them
nothing beyond the BOS block while it holds every probe prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.analysis.identity.determinism import digest, divergence, first_difference
from llmload.analysis.run.sweep_rows import Rung, group_rungs
from llmload.cli import sweep as sweep_command
from llmload.cli import table
from llmload.core.exit_codes import DIVERGED
from llmload.core.files.records import read_records
from llmload.core.stats import percentile
from llmload.sim.truth import load_truth

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

# one token per chunk (no speculative decoding) so the first differing chunk is the first token
SIM = {"accept_len": 1, "max_draft": 0, "base_ms": 2, "per_seq_ms": 0.5}
LADDER = "rungs: [1, 2, 4]\nrequests_per_user: 2\nmax_tokens: 64\nprompt_tokens: 16\n"
LADDER += "check_determinism: true\n"


def sweep(tmp_path: Path, variance: float, extra: str = "") -> tuple[int, Path, list[Rung], dict]:
    """`llmload sweep --fail-on-divergence` against a simulator with this batch variance (and its
    prefix cache on): (exit code, records prefix, the probes' rungs, truth requests by id)."""
    ladder = tmp_path / "ladder.yaml"
    ladder.write_text(LADDER + extra)
    sim = {**SIM, "batch_variance": variance, "prefix_cache_blocks": 4096, "block_size": 4}
    flags = [f"--sim={k}={v}" for k, v in sim.items()]
    run_dir = tmp_path / "run"
    argv = ["--run-dir", str(run_dir), "--ladder", str(ladder), *flags, "--fail-on-divergence"]
    code = sweep_command.main([*argv, "--scrape-interval", "0"])
    records, _ = read_records(run_dir / "run_records.jsonl")
    truth, _ = load_truth(run_dir / "sim_truth.jsonl")
    measured = [r for r in records if r.phase == "measure"]
    assert measured and all(truth[r.request_id]["cached_tokens"] <= 4 for r in measured)  # BOS block
    probes = [r for r in records if r.phase == "determinism"]
    assert all(truth[r.request_id]["cached_tokens"] == 12 for r in probes)  # the warm-up sent them all
    return code, run_dir / "run", group_rungs(records, "determinism"), truth


def test_no_batch_variance_no_divergence(tmp_path):
    code, prefix, rungs, truth = sweep(tmp_path, 0.0, "record_text: true\n")
    assert code == 0
    for rec in (r for rung in rungs for r in rung.records):
        assert rec.text is not None and len(rec.text.split()) == 64 and digest(rec.text) == rec.text_hash
    divs = divergence(rungs)
    assert [d.conc for d in divs] == [1, 2, 4]
    assert [d.differing for d in divs] == [0, 0, 0]
    # one probe request a user: prompt i's reference is the lowest rung with more than i users
    assert [d.compared for d in divs] == [0, 1, 2]
    assert not any(t["flipped"] for t in truth.values())
    # every rung's probe sent the same prompts: probe prompt i of a rung is prompt i of the others
    prompts = [{r.prompt_hash for r in rung.records} for rung in rungs]
    assert prompts[0] < prompts[1] < prompts[2]
    assert table.main([str(prefix), "--fail-on-divergence"]) == 0


def expected_first_flip(flipped: list[int], reference_flipped: list[int]) -> int | None:
    """The first position where two texts of one prompt differ: a flipped word is the same word
    whatever the batch size, so the texts differ exactly where one of them was flipped alone."""
    different = set(flipped) ^ set(reference_flipped)
    return min(different) if different else None


def test_batch_variance_diverges_above_conc_1_where_the_truth_flipped(tmp_path, capsys):
    code, prefix, rungs, truth = sweep(tmp_path, 0.01)
    assert code == DIVERGED
    measured = [r for rung in rungs for r in rung.records]
    assert all(r.text_hash and r.chunks == r.output_tokens == 64 for r in measured)
    assert not any(truth[r.request_id]["flipped"] for r in rungs[0].records)  # batch 1 never flips
    assert sum(len(truth[r.request_id]["flipped"]) for r in measured) > 0

    # the reference of a prompt: its earliest request at the lowest concurrency that sent it
    reference = {}
    for rung in rungs:
        for rec in sorted(rung.records, key=lambda r: r.t_start):
            reference.setdefault(rec.prompt_hash, rec)
    divs = divergence(rungs)
    assert divs[0].differing == 0
    for rung, div in zip(rungs[1:], divs[1:], strict=True):
        firsts = []
        for rec in rung.records:
            ref = reference[rec.prompt_hash]
            if ref is rec:
                continue
            first = expected_first_flip(truth[rec.request_id]["flipped"], truth[ref.request_id]["flipped"])
            assert (rec.text_hash != ref.text_hash) == (first is not None)
            if first is not None:
                assert first_difference(rec, ref) == (first, "token")
                firsts.append(first)
        assert div.differing == len(firsts)
        assert div.first_diff_median == (percentile(firsts, 50.0) if firsts else None)
    assert sum(d.differing for d in divs) > 0
    assert table.main([str(prefix), "--fail-on-divergence"]) == DIVERGED
    assert "greedy text differs" in capsys.readouterr().out


def test_warmup_sends_every_probe_prompt_once():
    from llmload.core.config import parse_config
    from llmload.loadgen.run.stage_plan import plan_stages  # imports Locust (gevent patching): not in unit

    def warmup(raw: dict, prompts: int) -> tuple[int, int]:
        stage = plan_stages(parse_config(raw, "x"), "m", None, prompts=prompts)[0]
        return stage.users, stage.requests_per_user

    on = {"check_determinism": True}
    # the largest rung's probe sends 10 prompts: one user sends all 10 in the warm-up
    assert warmup({"rungs": [1, 4, 10], **on}, 1024) == (1, 10)
    assert warmup({"rungs": [2, 4, 10], "requests_per_user": 2, **on}, 1024) == (2, 5)
    assert warmup({"rungs": [1, 4, 10], **on}, 1) == (1, 1)  # one fixed prompt: once is enough
    assert warmup({"rungs": [1, 4, 10]}, 1024) == (1, 1)  # the check is off: the warm-up as asked
    assert warmup({"rungs": [1, 4], "duration": 5, **on}, 1024) == (1, 4)  # the probes are count-based
    stages = plan_stages(parse_config({"rungs": [1, 4], **on}, "x"), "m", None, prompts=1024)
    assert [(s.phase, s.rung, s.users, s.requests_per_user) for s in stages] == [
        ("warmup", -1, 1, 4),
        ("measure", 0, 1, 1),
        ("determinism", 0, 1, 1),
        ("measure", 1, 4, 1),
        ("determinism", 1, 4, 1),
    ]
    cap = {"mode": "capacity", "slo": {"tpot_ms": 9}, "capacity": {"start": 2, "requests": 9}}
    assert len(plan_stages(parse_config(cap, "x"), "m", None, prompts=1024)) == 1  # the search's probes
