"""Latency metrics (TTFT, TPOT, ITL, E2EL) and goodput of a real `locust` run against the
simulator's ground truth, for completions and chat, one and several tokens per chunk.

What is compared with what, per request (the record and the truth line share the X-Request-Id):
- The truth is the simulator's own clock: `arrival` (its handler started), the time each chunk
  was handed to the socket (`chunk_times`, `role_sent` for chat's role-only first message),
  tokens per chunk. Server TTFT = first message written - arrival (for chat the role-only
  message: vLLM's TTFT point), server content TTFT = first content chunk - arrival.
- The client's TTFT also holds the request's transit: t0 (just before the client sends) to
  `arrival` (client HTTP framing, loopback, the server's own HTTP parsing). That time is real
  latency that vLLM's TTFT includes too, but the server cannot see it, so it is not a measurement
  error: it is taken out of the comparison (both clocks are this machine's `time.time()`, so
  `arrival - t_start` measures it per request) and bounded on its own (median under
  `TRANSIT_BOUND_MS`). What the comparison tests is the client's own timing of the response:
  when it saw each message versus when the server wrote it.
- TPOT, ITL: differences of server write times, so no offset enters them. TPOT truth =
  (last content chunk - the TTFT point) / (completion_tokens - 1), as vLLM. ITL truth: gaps
  between content chunks, per token (gap / k, k times) when the client knows tokens per chunk
  (`continuous_usage: true`, the chat accept_len 4 case) and per chunk otherwise (the
  completions accept_len 4 case, where the client flags ITL as per chunk).
Bar: medians and p99 within max(1 ms, 2 %) of the truth's. The client's message times are the
kernel's receive stamps (llmload.loadgen.transport.receive_stamps; every record must say
`stamps: kernel`), so a message the event loop reads late (another request's end-of-request
work, the simulator sharing the cores) is still timed when it arrived; without them the chat
TTFT p99 at 4 streams missed the bar by 1-3 ms in about one run in three on a 2-core machine. A
failure message gives the generator's event-loop lag from `<prefix>_health.jsonl`
(llmload.analysis.run.health).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.analysis.run.health import health_path, read_health, rung_health
from llmload.analysis.run.metrics import itl_ms
from llmload.analysis.run.postprocess import load_run
from llmload.analysis.run.rung_tally import tally_rungs
from llmload.analysis.run.uncertainty import request_bounds
from llmload.core.files.chunk_index import index_path
from llmload.core.files.records import RequestRecord, iter_indexed_record_lines, read_records
from llmload.core.files.run_files import RunFiles
from llmload.core.stats import percentile
from llmload.runner.sweep_run import run_sweep
from llmload.sim.truth import load_truth

MAX_TOKENS = 24
REQUESTS_PER_USER = 20  # 100 requests a case: p99 is not just the single largest value
TRANSIT_BOUND_MS = 10.0
CASES = [  # (endpoint, accept_len, continuous_usage)
    ("completions", 1, False),
    ("completions", 4, False),
    ("chat", 1, False),
    ("chat", 4, True),
]


def bar_ms(truth_value: float) -> float:
    return max(1.0, 0.02 * truth_value)


class Run:
    """One run's measured records paired with their truth lines."""

    def __init__(self, run_dir: Path, endpoint: str, accept_len: int, continuous_usage: bool) -> None:
        config = run_dir / "latency.yaml"
        config.write_text(
            f"rungs: [1, 4]\nrequests_per_user: {REQUESTS_PER_USER}\nwarmup_requests: 1\n"
            f"max_tokens: {MAX_TOKENS}\n"
            f"endpoint: {endpoint}\ncontinuous_usage: {str(continuous_usage).lower()}\n"
        )
        self.sweep = run_sweep(
            run_dir=run_dir,
            endpoint=endpoint,
            locust_args=["--ladder", str(config)],
            sim={"accept_len": accept_len, "base_ms": 10, "per_seq_ms": 2},
            timeout=180,
        )
        assert self.sweep.returncode == 0, self.sweep.log.read_text()[-3000:]
        truth, _ = load_truth(self.sweep.truth_log)
        records, skipped = read_records(self.sweep.records)
        assert not skipped
        self.pairs = [(r, truth[r.request_id]) for r in records if r.phase == "measure"]
        assert len(self.pairs) == 5 * REQUESTS_PER_USER and all(r.ok for r, _ in self.pairs)
        assert all(r.stamps == "kernel" for r, _ in self.pairs)
        self.records = [r for r, _ in self.pairs]
        samples = read_health(health_path(self.sweep.records))
        lags = [s["lag_ms"] for s in samples]
        self.lag_note = f"generator event-loop lag p50 {percentile(lags, 50):.1f} ms" if lags else ""
        # the health verdict on the machine (llmload.analysis.run.health.MachineLoad.busy: its
        # cores at least 90 % busy, or stolen): the simulator that writes the truth shares them
        self.busy = [
            h.machine.as_dict()
            for rung in tally_rungs(self.records)
            if (h := rung_health(samples, rung.first_start, rung.last_end)) and h.machine and h.machine.busy
        ]


def ttft_point(t: dict) -> float:
    """vLLM's TTFT point on the server: the first message with choices (chat: the role message)."""
    return t["role_sent"] if t.get("role_sent") is not None else t["first_token"]


def truth_itl(rec: RequestRecord, t: dict) -> list[float]:
    times, tokens = t["chunk_times"], t["chunk_tokens"]
    gaps = [(b - a) * 1000.0 for a, b in zip(times, times[1:], strict=False)]
    if rec.chunk_tokens is None:
        return gaps
    return [g / k for g, k in zip(gaps, tokens[1:], strict=True) for _ in range(k)]


def truth_values(run: Run) -> dict[str, list[float]]:
    """Per-request truth in ms; TTFT and E2EL as the server saw them (no transit)."""
    out: dict[str, list[float]] = {"ttft": [], "ttft_content": [], "tpot": [], "itl": [], "e2el": []}
    for rec, t in run.pairs:
        out["ttft"].append((ttft_point(t) - t["arrival"]) * 1000.0)
        out["ttft_content"].append((t["first_token"] - t["arrival"]) * 1000.0)
        out["tpot"].append((t["last_token"] - ttft_point(t)) * 1000.0 / (t["completion_tokens"] - 1))
        out["itl"].extend(truth_itl(rec, t))
        out["e2el"].append((t["last_token"] - t["arrival"]) * 1000.0)
    return out


def client_values(run: Run) -> dict[str, list[float]]:
    """Per-request client figures in ms, with each request's transit taken out of TTFT and E2EL."""
    out: dict[str, list[float]] = {"ttft": [], "ttft_content": [], "tpot": [], "itl": [], "e2el": []}
    for rec, t in run.pairs:
        transit = t["arrival"] - rec.t_start
        out["ttft"].append((rec.t_first - rec.t_start - transit) * 1000.0)
        out["ttft_content"].append((rec.t_first_content - rec.t_start - transit) * 1000.0)
        out["tpot"].append((rec.t_end - rec.t_first) * 1000.0 / (rec.output_tokens - 1))
        out["itl"].extend(itl_ms(rec))
        out["e2el"].append((rec.t_end - rec.t_start - transit) * 1000.0)
    return out


@pytest.fixture(scope="module", params=CASES, ids=[f"{e}-accept{a}" for e, a, _ in CASES])
def run(request, tmp_path_factory) -> Run:
    endpoint, accept_len, continuous = request.param
    return Run(tmp_path_factory.mktemp(f"{endpoint}{accept_len}"), endpoint, accept_len, continuous)


def late_bounds(run: Run) -> dict[str, list[float]]:
    """Per value, the most the tool itself says it may be late, ms (0 for an exact one): where the
    generator read a stream late, several messages share one kernel stamp and the record marks
    them (llmload.analysis.run.uncertainty; the table reports the p99 of these bounds when it
    exceeds 1 ms). The end of a request is its last chunk's time; ITL's bounds are per gap."""
    out: dict[str, list[float]] = {"ttft": [], "ttft_content": [], "tpot": [], "itl": [], "e2el": []}
    for rec, _ in run.pairs:
        ttft, gaps, tpot = request_bounds(rec)
        marks = dict(zip(rec.uncertain_chunks or (), rec.uncertain_ms or (), strict=False))
        out["ttft"].append(ttft or 0.0)
        out["ttft_content"].append(max(ttft or 0.0, marks.get(0, 0.0)))
        out["tpot"].append(tpot or 0.0)
        out["itl"].extend(gaps)
        out["e2el"].append(marks.get(rec.chunks - 1, 0.0))
    return out


def check_percentile(run: Run, q: float) -> None:
    """The client's percentile within the bar of the truth's, widened by the same percentile of
    the bounds the tool reports for the values' lateness (0 when every value was read on time),
    so a run on a busy machine is judged as the tool tells its user to read it."""
    truth, client, bounds = truth_values(run), client_values(run), late_bounds(run)
    for name in truth:
        assert len(client[name]) == len(truth[name]), name
        want = percentile(truth[name], q)
        got = percentile(client[name], q)
        late = percentile(bounds[name] + [0.0] * (len(client[name]) - len(bounds[name])), q)
        assert got == pytest.approx(want, abs=bar_ms(want) + late), (
            f"{name} p{q} late {late} ({run.lag_note})"
        )


def test_latency_medians_match_truth(run):
    check_percentile(run, 50)


def test_latency_p99_match_truth(run):
    """Judged on a machine the health verdict does not call busy: there, the simulator that
    stamps the truth is itself descheduled between its stamp and its write, now and then by a few
    ms (at load 10 on 2 cores: TTFT p99 39.1 against 34.9 ms with every client value read on
    time), and a p99 of 100 values is two requests. The medians are judged on any machine."""
    if run.busy:
        pytest.skip(f"machine busy by the health verdict, the truth's p99 is not exact: {run.busy[0]}")
    check_percentile(run, 99)


def test_transit_is_small(run):
    transit = [(t["arrival"] - r.t_start) * 1000.0 for r, t in run.pairs]
    assert 0 < percentile(transit, 50) < TRANSIT_BOUND_MS


def test_token_accounting_matches_truth(run):
    for rec, t in run.pairs:
        assert rec.output_tokens == t["completion_tokens"] == t["tokens_sent"] == MAX_TOKENS
        assert rec.chunks == len(t["chunk_times"])
        assert rec.finish_reason == t["finish_reason"] == "length"
        if rec.chunk_tokens is not None:
            assert rec.chunk_tokens == t["chunk_tokens"]


def test_itl_semantics_flagged(run):
    metrics = [r.metrics() for r in tally_rungs(run.records)]
    several_per_chunk = any(len(t["chunk_times"]) < t["completion_tokens"] for _, t in run.pairs)
    per_token = all(r.chunk_tokens is not None for r in run.records)
    assert all(m.itl_per_chunk == (several_per_chunk and not per_token) for m in metrics)
    assert all(m.stopped_early == m.disagree == 0 for m in metrics)


# How far a request's client TTFT / TPOT may sit from its truth: the TTFT bar, and for TPOT (a
# difference of two stamps over completion_tokens - 1 tokens) a few ms of stamp error spread
# over MAX_TOKENS - 1 tokens, rounded up. As in the p99 bar, one request in a hundred may miss
# it: on a loaded 2-core machine the generator is now and then late by more than the gap between
# two messages, and both are then stamped when the later one arrived
# (llmload.loadgen.transport.receive_stamps).
GOODPUT_MARGIN_MS = {"ttft_ms": 1.0, "tpot_ms": 0.3}


def goodput_inputs(run: Run) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per request TTFT and TPOT in ms: (truth, client). TTFT truth runs from the request's t0 (the
    SLO is on the latency the user sees, transit included) to the first message the server wrote;
    the client's figures come straight from the record's stamps."""
    truth = {
        "ttft_ms": [(ttft_point(t) - r.t_start) * 1000.0 for r, t in run.pairs],
        "tpot_ms": [
            (t["last_token"] - ttft_point(t)) * 1000.0 / (t["completion_tokens"] - 1) for _, t in run.pairs
        ],
    }
    client = {
        "ttft_ms": [(r.t_first - r.t_start) * 1000.0 for r, _ in run.pairs],
        "tpot_ms": [(r.t_end - r.t_first) * 1000.0 / (r.output_tokens - 1) for r, _ in run.pairs],
    }
    return truth, client


def meets(values: dict[str, list[float]], i: int, slo: dict[str, float], shift: float = 0.0) -> bool:
    """Whether request i's values meet every SLO, each moved by shift x GOODPUT_MARGIN_MS."""
    return all(values[name][i] <= limit + shift * GOODPUT_MARGIN_MS[name] for name, limit in slo.items())


def goodput(run: Run, slo: dict[str, float]) -> int:
    return sum(r.metrics().good_requests for r in tally_rungs(run.records, slo))


@pytest.mark.parametrize(
    "at", [{"ttft_ms": 25}, {"ttft_ms": 75}, {"tpot_ms": 25}, {"tpot_ms": 75}, {"ttft_ms": 50, "tpot_ms": 50}]
)
def test_goodput_counts_the_requests_whose_stamps_meet_the_slos(run, at):
    """With SLOs at quartiles of the client's own values (so a scale or definition error in
    either metric moves many requests across), goodput counts exactly the requests whose TTFT and
    TPOT, computed here from their stamps, meet every SLO."""
    _, client = goodput_inputs(run)
    slo = {name: percentile(client[name], q) for name, q in at.items()}
    assert goodput(run, slo) == sum(meets(client, i, slo) for i in range(len(run.pairs)))


def test_goodput_classifies_requests_as_the_truth_does(run):
    """Each SLO sits in the middle of the widest gap between neighbouring truth values, so few
    requests lie near it. Each request must be classified as its truth says, except one whose truth
    lies within GOODPUT_MARGIN_MS of an SLO (either side is then right) or, for at most 1 % of the
    requests, one whose own measurement missed its truth by more than that."""
    truth, client = goodput_inputs(run)

    def mid_gap(values: list[float]) -> float:
        ordered = sorted(values)
        i = max(range(len(ordered) - 1), key=lambda j: ordered[j + 1] - ordered[j])
        return (ordered[i] + ordered[i + 1]) / 2

    slo = {name: mid_gap(values) for name, values in truth.items()}
    n = len(run.pairs)
    good_truth = [meets(truth, i, slo) for i in range(n)]
    near = [meets(truth, i, slo, -1.0) != meets(truth, i, slo, +1.0) for i in range(n)]
    assert 0 < sum(good_truth) < n, "the SLOs do not split the requests"
    assert sum(near) <= n // 10, "too many requests near the SLOs"
    misjudged = [
        f"{run.pairs[i][0].request_id}: "
        + ", ".join(
            f"{k} client {client[k][i]:.2f} truth {truth[k][i]:.2f} slo {v:.2f}" for k, v in slo.items()
        )
        for i in range(n)
        if meets(client, i, slo) != good_truth[i] and not near[i]
    ]
    assert len(misjudged) <= n // 100, f"{misjudged} ({run.lag_note})"


def test_the_table_reads_the_chunk_index_the_run_wrote(run):
    """The ladder wrote each record's chunk times into the records' index as it wrote the record,
    and post-processing read them from it (every record whose ITL is per chunk: those with
    tokens per chunk are read from their lines): its latency metrics, ITL included, are those of
    the records read alone, which the tests above hold against the truth."""
    records = run.sweep.records
    indexed = [micros is not None for _, _, micros in iter_indexed_record_lines(records)]
    assert indexed == [r.chunk_tokens is None for r in read_records(records)[0]]
    prefix = RunFiles.of_records(records).prefix
    with_index = load_run(prefix, with_metrics=True)
    aside = records.with_name("index-aside")
    index_path(records).rename(aside)
    try:
        alone = load_run(prefix, with_metrics=True)
    finally:
        aside.rename(index_path(records))
    assert with_index.metrics == alone.metrics and with_index.rows == alone.rows
    assert with_index.metrics[0].latencies["itl"] is not None
