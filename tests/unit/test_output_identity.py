"""Output identity across two runs on hand-built records whose texts are known: matching by place
(prompt, max_tokens, k-th send), the per-rung figures, and the runs that cannot be matched."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from test_determinism import WORDS, record

from llmload.analysis.identity.determinism import digest, divergence, divergence_notes
from llmload.analysis.identity.text_identity import pair_places
from llmload.analysis.output_identity import CHANGED, IDENTICAL, UNMATCHED, output_identity
from llmload.analysis.run.postprocess import RunResult
from llmload.analysis.run.sweep_rows import Rung
from llmload.core.files.records import RequestRecord
from llmload.core.files.run_info import RunInfo


def run(records: list[RequestRecord], config: dict[str, Any] | None = None) -> RunResult:
    info = None if config is None else RunInfo(Path("x_run.json"), (), config)
    return RunResult("x", records, [], [], None, [], info)


def x_at(i: int) -> list[str]:
    return [*WORDS[:i], " x", *WORDS[i + 1 :]]


def test_candidate_texts_against_the_base_at_the_same_place():
    base = [
        record(1, 0, "p0", WORDS, 0.0),
        record(4, 1, "p0", WORDS, 10.0),
        record(4, 1, "p1", WORDS, 10.0),
        record(4, 1, "p1", WORDS, 11.0),  # p1 sent twice: the second send has its own place
    ]
    cand = [
        record(1, 0, "p0", WORDS, 100.0),
        record(4, 1, "p0", x_at(4), 110.0),
        record(4, 1, "p1", WORDS, 110.0),
        record(4, 1, "p1", x_at(2), 111.0),
        record(4, 1, "p2", x_at(0), 111.0),  # no base request sent p2: unmatched, not judged
    ]
    result = output_identity(run(base), run(cand))
    assert result.verdict == CHANGED and not result.reasons
    c1, c4 = result.rungs
    assert (c1.compared, c1.differing, c1.first_diff_median) == (1, 0, None)
    assert (c4.compared, c4.differing, c4.first_diff_median, c4.unit) == (3, 2, 3.0, "token")
    assert (c4.cand_unmatched, c4.base_unmatched) == (1, 0)
    assert result.summary() == "outputs changed on 2 of 4 matched requests"
    assert output_identity(run(base), run(base)).summary() == "outputs identical (4 of 4 matched requests)"


def test_another_max_tokens_is_another_place():
    base = [record(1, 0, "p", WORDS, 0.0)]
    cand = [record(1, 0, "p", WORDS[:3], 0.0)]  # max_tokens 3: shorter by request, not by change
    assert pair_places(base, cand) == ([], 1, 1)
    result = output_identity(run(base), run(cand))
    assert result.verdict == UNMATCHED and "same prompt and max_tokens" in result.reasons[0]


def test_failed_requests_and_chunked_texts():
    base = [record(1, 0, "p", [" a b", " c d", " e f"], 0.0, output_tokens=6)]
    cand = [
        record(1, 0, "p", [" a b", " x d", " e f"], 0.0, output_tokens=6),
        record(1, 0, "p", [" a"], 1.0, outcome="timeout"),
    ]
    (rung,) = output_identity(run(base), run(cand)).rungs
    assert (rung.compared, rung.differing, rung.first_diff_median, rung.unit) == (1, 1, 1.0, "chunk")
    assert rung.cand_unmatched == 0  # a failed request has no text to compare


def test_runs_that_cannot_be_matched_say_why():
    recs = [record(1, 0, "p", WORDS, 0.0)]
    sampled = output_identity(run(recs, {"temperature": 0.7, "seed": 0}), run(recs, {"seed": 0}))
    assert sampled.verdict == UNMATCHED
    assert sampled.reasons == ["the base samples (temperature 0.7): its texts are not the prompt's function"]
    unique = output_identity(run(recs, {"seed": 1}), run(recs, {"unique_prompts": True, "seed": 1}))
    assert unique.reasons == [
        "the candidate sends unique prompts (unique_prompts: true): no prompt is sent twice"
    ]
    seeds = output_identity(run(recs, {"seed": 1}), run(recs, {"seed": 2}))
    assert seeds.reasons == ["the runs' seeds differ (base 1, candidate 2): they sent other prompts"]
    assert "cannot be matched, not judged: the runs' seeds differ" in seeds.summary()
    assert output_identity(run(recs, {"seed": 1}), run(recs)).verdict == IDENTICAL  # no run file: by data
    plain = RequestRecord("y", 0, 1, "measure", "completions", True, 4, 0.0, 1.0)
    unhashed = output_identity(run(recs), run([plain]))
    assert unhashed.verdict == UNMATCHED and unhashed.reasons[0].startswith("no request of the candidate")
    assert unhashed.as_dict()["verdict"] == UNMATCHED and unhashed.as_dict()["rungs"][0]["compared"] == 0


def thinking(users: int, rung: int, thoughts: list[str], t: float) -> RequestRecord:
    """A reasoning reply: `thoughts` then the answer WORDS, hashed as the client hashes them."""
    rec = record(users, rung, "p", [*thoughts, *WORDS], t)
    return dataclasses.replace(
        rec,
        text_hash=digest("".join(WORDS)),
        reasoning_hash=digest("".join(thoughts)),
        reasoning_tokens=len(thoughts),
    )


def test_a_change_in_the_reasoning_only_is_an_output_change():
    """Another kernel that changes the thinking but not the answer: compare says the outputs
    changed, and that the reasoning alone did; the in-run check says so too."""
    base = [thinking(1, 0, [" t", " u"], 0.0), thinking(4, 1, [" t", " u"], 10.0)]
    cand = [thinking(1, 0, [" t", " u"], 100.0), thinking(4, 1, [" t", " v"], 110.0)]
    result = output_identity(run(base), run(cand))
    assert result.verdict == CHANGED and result.reasoning_only == 1
    assert result.summary() == (
        "outputs changed on 1 of 2 matched requests (1 in their reasoning only, the answer the same)"
    )
    assert result.rungs[1].first_diff_median == 1.0  # the second token, a reasoning one
    c1, c4 = divergence([Rung(0, 1, cand[:1]), Rung(1, 4, cand[1:])])
    assert (c4.differing, c4.reasoning_only, c1.differing) == (1, 1, 0)
    assert "1 of them in the reasoning only" in divergence_notes([c1, c4])[0]
