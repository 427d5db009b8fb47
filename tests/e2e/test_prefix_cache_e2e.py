"""No accidental prefix-cache hits, and the cache per rung, against the simulator's prefix cache:
its truth log says what it served each request, its /metrics counts queries and hits in tokens.

- synthetic prompts and the default prompt: no measured request is served more than one block
  (the simulator's blocks are 16 tokens; the BOS and anchor sit in the first block with the tag);
- a 50 % shared prefix: the cache share per rung is 50 % (within one block), in the JSON, from
  the records and from the server's counters alike (its hits = the records' cached tokens);
- a rerun with the same seed against the same server: every prompt was seen, so the cache serves
  more than the shared prefix and the sweep says what to do; another seed: no note."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.cli import sweep as sweep_command
from llmload.cli import table
from llmload.core.files.records import read_records
from llmload.sim.truth import load_truth

BLOCK = 16
NOTE = "the prefix cache served more prompt tokens than the run's prompts share"


def sweep(tmp_path: Path, url: str, name: str, ladder: str) -> tuple[Path, str]:
    config = tmp_path / f"{name}.yaml"
    config.write_text("rungs: [1, 3]\nrequests_per_user: 2\nmax_tokens: 8\n" + ladder)
    run_dir = tmp_path / name
    assert sweep_command.main(["--host", url, "--run-dir", str(run_dir), "--ladder", str(config)]) == 0
    return run_dir / "run", (run_dir / "run_records.jsonl").as_posix()


def rows(capsys: pytest.CaptureFixture[str], prefix: Path) -> list[dict]:
    capsys.readouterr()
    assert table.main([str(prefix), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("ladder", ["prompt_tokens: 256\n", ""], ids=["synthetic", "default-prompt"])
def test_measured_requests_get_no_cached_tokens_beyond_one_block(tmp_path, sim_start, capsys, ladder):
    sim = sim_start(base_ms=1, prefix_cache_blocks=4096, block_size=BLOCK)
    prefix, records_path = sweep(tmp_path, sim.url, "run", ladder)
    truth, _ = load_truth(sim.truth_log)
    records, _ = read_records(Path(records_path))
    measured = [r for r in records if r.phase == "measure"]
    assert len(measured) == 8 and all(truth[r.request_id]["cached_tokens"] <= BLOCK for r in measured)
    assert all(r.cached_tokens == truth[r.request_id]["cached_tokens"] for r in measured)
    for row in rows(capsys, prefix):
        assert (
            row["cache"]["over_shared"] == 0
            and row["cache"]["share"] <= BLOCK / row["cache"]["prompt_tokens"] * 2
        )
    assert NOTE not in capsys.readouterr().out


def test_a_half_shared_prefix_is_half_the_prompt_per_rung_and_a_rerun_is_told(tmp_path, sim_start, capsys):
    sim = sim_start(base_ms=1, prefix_cache_blocks=4096, block_size=BLOCK)
    half = "prompt_tokens: 256\nshared_prefix_ratio: 0.5\n"
    prefix, records_path = sweep(tmp_path, sim.url, "first", half)
    truth, _ = load_truth(sim.truth_log)
    records, _ = read_records(Path(records_path))
    for row in rows(capsys, prefix):
        measured = [r for r in records if r.phase == "measure" and r.rung == row["rung"]]
        cached = sum(truth[r.request_id]["cached_tokens"] for r in measured)
        assert row["cache"]["cached_tokens"] == cached == row["server"]["cache_hits"]
        assert abs(row["cache"]["share"] - 0.5) <= BLOCK / 256 and row["cache"]["over_shared"] == 0
        assert abs(row["server"]["cache_share"] - row["cache"]["share"]) < 1e-9
    again, _ = sweep(tmp_path, sim.url, "again", half)  # the same seed, the same server: all seen
    assert all(row["cache"]["over_shared"] == row["cache"]["requests"] for row in rows(capsys, again))
    assert table.main([str(again)]) == 0
    out = capsys.readouterr().out
    assert NOTE in out and "rerun with another seed, restart the server or flush its prefix cache" in out
    other, _ = sweep(tmp_path, sim.url, "other", half + "seed: 7\n")
    assert all(row["cache"]["over_shared"] == 0 for row in rows(capsys, other))
