"""The greedy-determinism check's analysis, the simulator's batch-variance flips and the config
keys of both features (no processes)."""

from __future__ import annotations

import pytest

from llmload.analysis.identity.determinism import (
    digest,
    divergence,
    divergence_notes,
    first_difference,
    text_digests,
)
from llmload.analysis.run.sweep_rows import Rung
from llmload.core.config import ConfigError, parse_config
from llmload.core.files.records import RequestRecord
from llmload.sim.tokens import completion_text, flips, prompt_hash


def record(users: int, rung: int, prompt: str, chunks: list[str], t: float, **extra) -> RequestRecord:
    text_hash, chunk_hashes = text_digests(chunks)
    return RequestRecord(
        request_id=f"{rung}-{t}",
        rung=rung,
        users=users,
        phase="measure",
        endpoint="completions",
        stream=True,
        max_tokens=len(chunks),
        t_start=t,
        t_end=t + 1,
        output_tokens=extra.pop("output_tokens", len(chunks)),
        chunks=len(chunks),
        prompt_hash=digest(prompt),
        text_hash=text_hash,
        chunk_hashes=chunk_hashes,
        **extra,
    )


WORDS = [" a", " b", " c", " d", " e", " f"]


def test_first_difference_counts_tokens_before_the_first_differing_chunk():
    ref = record(1, 0, "p", WORDS, 0.0)
    same = record(4, 1, "p", WORDS, 1.0)
    assert same.text_hash == ref.text_hash
    changed = record(4, 1, "p", [*WORDS[:3], " x", *WORDS[4:]], 1.0)
    assert first_difference(changed, ref) == (3, "token")
    shorter = record(4, 1, "p", WORDS[:4], 1.0)
    assert first_difference(shorter, ref) == (4, "token")
    # chunks of several tokens: the server's per-chunk counts say where the chunk starts
    multi = record(4, 1, "p", [" a b", " c d", " x f"], 1.0, chunk_tokens=[2, 2, 2], output_tokens=6)
    multi_ref = record(1, 0, "p", [" a b", " c d", " e f"], 0.0, chunk_tokens=[2, 2, 2], output_tokens=6)
    assert first_difference(multi, multi_ref) == (4, "token")
    # without them the index counts chunks, and says so
    bare = record(4, 1, "p", [" a b", " x d", " e f"], 1.0, output_tokens=6)
    assert first_difference(bare, multi_ref) == (1, "chunk")


def test_divergence_per_rung_against_the_lowest_concurrency():
    c1 = Rung(0, 1, [record(1, 0, "p0", WORDS, 0.0), record(1, 0, "p1", WORDS, 1.0)])
    c4 = Rung(
        1,
        4,
        [
            record(4, 1, "p0", WORDS, 2.0),
            record(4, 1, "p1", [*WORDS[:2], " x", *WORDS[3:]], 2.0),
            record(4, 1, "p2", WORDS, 2.0),  # no reference below: this is p2's reference
            record(4, 1, "p2", [" x", *WORDS[1:]], 2.5),
        ],
    )
    failed = record(8, 2, "p0", [" x"], 3.0, outcome="timeout")
    c8 = Rung(2, 8, [record(8, 2, "p0", [*WORDS[:5], " x"], 3.0), failed])
    d1, d4, d8 = divergence([c1, c4, c8])
    assert (d1.compared, d1.differing) == (0, 0)
    assert (d4.compared, d4.differing, d4.first_diff_median) == (3, 2, 1.0)  # median of 2 and 0
    assert d4.references == ("rung01 c1", "rung02 c4")
    assert (d8.compared, d8.differing, d8.first_diff_median, d8.share) == (1, 1, 5.0, 1.0)
    notes = divergence_notes([d1, d4, d8])
    assert len(notes) == 2 and notes[0].startswith("rung02 c4: greedy text differs")
    assert "2 of 3 requests (67 %); median first differing token 1" in notes[0]


def test_no_text_hashes_nothing_compared():
    plain = RequestRecord("x", 0, 1, "measure", "completions", True, 4, 0.0, 1.0)
    (d,) = divergence([Rung(0, 1, [plain])])
    assert (d.compared, d.differing) == (0, 0) and divergence_notes([d]) == []


def test_sim_flips_only_above_batch_1_and_are_seeded_by_prompt_position_batch():
    h = prompt_hash("a prompt")
    assert flips(h, 0, 10_000, 1, 0.5) == []
    assert flips(h, 0, 100, 4, 0.0) == []
    drawn = flips(h, 0, 20_000, 4, 0.01)
    assert 150 < len(drawn) < 250  # binomial(20000, 0.01): 200 +- 14
    assert flips(h, 0, 20_000, 4, 0.01) == drawn
    assert flips(h, 0, 20_000, 5, 0.01) != drawn  # another batch size, other flips
    assert flips(h, 100, 50, 4, 0.01) == [p for p in drawn if 100 <= p < 150]


def test_sim_flipped_positions_change_exactly_those_words():
    h = prompt_hash("a prompt")
    plain = completion_text(h, 0, 40).split()
    flipped = completion_text(h, 0, 40, [3, 17]).split()
    assert [i for i, (a, b) in enumerate(zip(plain, flipped, strict=True)) if a != b] == [3, 17]
    assert completion_text(h, 10, 5, [3, 12]) == " " + " ".join(
        completion_text(h, 0, 40, [3, 12]).split()[10:15]
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"mode": "capacity"}, "'mode: capacity' needs a bound in 'slo'"),
        ({"mode": "capacity", "slo": {"tpot_ms": 5}, "duration": 10}, "remove 'duration'"),
        ({"capacity": {"percentile": 100}}, "'capacity.percentile' must be a number in (0, 100)"),
        ({"capacity": {"confidence": 1}}, "'capacity.confidence' must be a number in (0, 1)"),
        ({"capacity": {"requests": 50, "max_requests": 10}}, "'capacity.max_requests' must be >="),
        ({"capacity": {"start": 0}}, "'capacity.start' must be a number > 0"),
        ({"capacity": {"bisect": 1}}, "unknown key 'capacity.bisect'"),
        ({"check_determinism": True, "temperature": 0.7}, "'check_determinism' needs 'temperature: 0'"),
        ({"check_determinism": True, "unique_prompts": True}, "('unique_prompts: false')"),
        ({"check_determinism": True, "mode": "rate", "duration": 1}, "it needs 'mode: concurrency'"),
        ({"record_text": "yes"}, "'record_text' must be true or false"),
    ],
)
def test_bad_capacity_and_determinism_keys(raw, message):
    with pytest.raises(ConfigError) as err:
        parse_config(raw, source="x.yaml")
    assert str(err.value).startswith("x.yaml: ") and message in str(err.value)


def test_the_check_runs_on_request_and_texts_are_hashed_where_greedy():
    """The check's probes cost requests: it runs with `check_determinism: true` only; the records
    keep text hashes (for `llmload compare`) at temperature 0 without unique prompts, unless false."""
    assert not parse_config({}, "x").determinism and parse_config({}, "x").hash_texts
    assert parse_config({"check_determinism": True}, "x").determinism
    assert not parse_config({"temperature": 0.5}, "x").hash_texts
    assert not parse_config({"unique_prompts": True}, "x").hash_texts
    assert not parse_config({"check_determinism": False}, "x").hash_texts
    cfg = parse_config({"mode": "capacity", "slo": {"e2el_ms": 900}, "capacity": {"percentile": 99}}, "x")
    assert cfg.capacity.percentile == 99.0 and cfg.with_overrides(max_tokens=8).capacity == cfg.capacity
