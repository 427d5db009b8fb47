"""Presentation of the sweep rows and rung metrics: plain table, markdown, CSV and JSON.

Human formats (table, markdown, csv) round rates and token counts to 1 decimal, wall_s to 2 and
milliseconds to 1; json keeps full precision. In table/markdown a figure computed from
client-counted tokens gets a `*` suffix, a partial rung's concurrency a `!` suffix and the
concurrency of a rung where the load generator was saturated a `^` suffix, each explained in a
note (`table_notes`); csv carries them as `estimated` / `partial` / `saturated` columns. Only the
`table` format prints the notes under the table: markdown, csv and json hold data alone, and the
commands print the notes on stderr (docs/reports.md: which notes, and their thresholds).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from llmload.analysis.identity.determinism import RungDivergence
from llmload.analysis.run.metrics import LATENCY_ALIASES, LATENCY_NAMES, RungMetrics
from llmload.analysis.run.sweep_rows import MissingRung, SweepRow
from llmload.analysis.run.window import NOT_HELD, STEADY, held_floor
from llmload.core.config import SweepConfig
from llmload.core.names import rung_name
from llmload.core.stats import DEFAULT_PERCENTILES, Summary, percentile_label
from llmload.output.toolkit.cells import fmt_num, fmt_pct
from llmload.output.toolkit.grid import grid

FORMATS = ("table", "markdown", "csv", "json")
CORE_COLUMNS = ("conc", "agg_tok/s", "per_req_tok/s", "tokens", "wall_s", "ttft_p50_ms", "failures")
# a reasoning model's run (a rung whose requests reasoned): after ttft_p50_ms, the reasoning share
# of the output tokens and the median time to the first answer token
REASONING_COLUMNS = ("think_%", "ttfo_p50_ms")
# a rate-mode run: after ttft_p50_ms (from the send), TTFT and E2EL from the scheduled arrival, the
# wait for a client slot and the share of requests that waited (sweep_rows: scheduled)
SCHEDULED_COLUMNS = ("ttft_sched_p50_ms", "e2el_sched_p50_ms", "queue_wait_p50_ms", "waited_%")
VALID_COLUMN = "valid_%"  # response_format runs: after the tok/s, the share of answers that fit the schema
CALLS_VALID_COLUMN = "calls_valid_%"  # replies with tool calls: the share of calls whose arguments parse
WIDE_COLUMNS = ("rung", "requests", "partial_tokens", "failure_kinds")
ESTIMATED_MARK = "*"
PARTIAL_MARK = "!"
SATURATED_MARK = "^"
INPUT_TOLERANCE = SweepConfig().input_tolerance  # the note's threshold: the default that fails a run
EDGES_NOTE_PCT = 5.0  # a steady rung is noted when its agg_tok/s is more off its whole span's
CONNECT_NOTE_PCT = 5.0  # connections opened in a rung are noted when they raise its TTFT p50 by more
_ESTIMATED_COLUMNS = ("agg_tok/s", "per_req_tok/s", "tokens")


INTERVAL_COLUMN = "±%"  # after agg_tok/s: its 95 % interval, +- % (llmload.analysis.interval)
CACHE_COLUMN = "cache_%"  # shown when a rung's requests said what the prefix cache served
WAITING_MIN = 0.5  # mean requests waiting in a rung's scrapes from which the sweep says they queued
KV_FULL = 0.9  # KV-cache usage (mean over a rung's scrapes) from which the sweep says it neared full


def cache_share(row: SweepRow) -> float | None:
    """The rung's prefix-cache share of prompt tokens: the requests' own (usage), else the server's
    counters'."""
    if row.cache is not None:
        return float(row.cache["share"])
    share = (row.server or {}).get("cache_share")
    return None if share is None else float(share)


@dataclass(frozen=True, slots=True)
class _Groups:
    """The optional column groups a run's table shows, from its rows: `reasoned` (some rung's
    requests reasoned: REASONING_COLUMNS), `checked` (answers checked against a response_format:
    VALID_COLUMN), `called` (replies made tool calls: CALLS_VALID_COLUMN), `scheduled` (a rate-mode
    rung: SCHEDULED_COLUMNS)."""

    reasoned: bool = False
    checked: bool = False
    called: bool = False
    scheduled: bool = False

    @classmethod
    def of(cls, rows: Sequence[SweepRow]) -> _Groups:
        return cls(
            reasoned=any(r.reasoning and r.reasoning["requests"] for r in rows),
            checked=any(r.structured and r.structured["checked"] for r in rows),
            called=any(r.tool_calls for r in rows),
            scheduled=any(r.scheduled for r in rows),
        )


def _header(rows: Sequence[SweepRow], wide: bool) -> tuple[str, ...]:
    groups = _Groups.of(rows)
    core: tuple[str, ...] = CORE_COLUMNS
    if any(r.interval for r in rows):
        at = core.index("agg_tok/s") + 1
        core = (*core[:at], INTERVAL_COLUMN, *core[at:])
    valid = (VALID_COLUMN,) * groups.checked + (CALLS_VALID_COLUMN,) * groups.called
    at = core.index("per_req_tok/s") + 1
    core = (*core[:at], *valid, *core[at:])
    if groups.scheduled:
        at = core.index("ttft_p50_ms") + 1
        core = (*core[:at], *SCHEDULED_COLUMNS, *core[at:])
    if groups.reasoned:
        at = core.index("ttft_p50_ms") + 1
        core = (*core[:at], *REASONING_COLUMNS, *core[at:])
    if any(cache_share(r) is not None for r in rows):
        core = (*core[:-1], CACHE_COLUMN, core[-1])
    return core + (WIDE_COLUMNS if wide else ())


def _reasoning_cells(row: SweepRow) -> dict[str, str]:
    r = row.reasoning or {}
    return {
        "think_%": fmt_pct(r.get("share")),
        "ttfo_p50_ms": fmt_num(r.get("ttfo_p50_ms")),
    }


def _scheduled_cells(row: SweepRow) -> dict[str, str]:
    s = row.scheduled or {}
    return {
        "ttft_sched_p50_ms": fmt_num(s.get("ttft_p50_ms")),
        "e2el_sched_p50_ms": fmt_num(s.get("e2el_p50_ms")),
        "queue_wait_p50_ms": fmt_num(s.get("queue_wait_p50_ms")),
        "waited_%": fmt_pct(s.get("waited_share")),
    }


def _sweep_cells(row: SweepRow, wide: bool, groups: _Groups = _Groups()) -> dict[str, str]:
    cells = {
        "conc": str(row.conc) if row.rate is None else f"{row.rate:g}/s",  # a rate rung: its rate
        "agg_tok/s": fmt_num(row.agg_tok_s),
        "per_req_tok/s": fmt_num(row.per_req_tok_s),
        "tokens": str(row.tokens),
        "wall_s": fmt_num(row.wall_s, 2),
        "ttft_p50_ms": fmt_num(row.ttft_p50_ms),
        "failures": str(row.failures),
        **(_reasoning_cells(row) if groups.reasoned else {}),
        **(_scheduled_cells(row) if groups.scheduled else {}),
    }
    cells[CACHE_COLUMN] = fmt_pct(cache_share(row))
    cells[INTERVAL_COLUMN] = fmt_num((row.interval or {}).get("agg_tok_s_pct"), 1)
    if groups.checked:
        cells[VALID_COLUMN] = fmt_pct((row.structured or {}).get("valid_share"))
    if groups.called:
        cells[CALLS_VALID_COLUMN] = fmt_pct((row.tool_calls or {}).get("valid_share"))
    if wide:
        cells |= {
            "rung": rung_name(row.rung, row.conc),
            "requests": str(row.requests),
            "partial_tokens": str(row.partial_tokens),
            "failure_kinds": " ".join(f"{k}:{n}" for k, n in row.failures_by_kind.items()) or "-",
        }
    return cells


def _marked(rows: Sequence[SweepRow], wide: bool) -> list[dict[str, str]]:
    """Cells with `*` / `!` marks; in a column holding a mark, unmarked cells get a trailing space
    so the decimal points stay aligned."""
    groups = _Groups.of(rows)
    table = [_sweep_cells(row, wide, groups) for row in rows]
    for mark, columns, flags in (
        (PARTIAL_MARK, ("conc",), [r.partial for r in rows]),
        (ESTIMATED_MARK, _ESTIMATED_COLUMNS, [r.estimated for r in rows]),
        (SATURATED_MARK, ("conc",), [r.saturated for r in rows]),
    ):
        if not any(flags):
            continue
        for flag, cells in zip(flags, table, strict=True):
            for col in columns:
                cells[col] += mark if flag else " "
    return table


def sweep_notes(rows: Sequence[SweepRow]) -> list[str]:
    """Notes printed under the table: what the marks mean, and the failures by kind."""
    notes = []
    if any(r.estimated for r in rows):
        notes.append(
            f"{ESTIMATED_MARK} the server sent no usage on some requests: their tokens are max_tokens "
            "where finish_reason was 'length', else their content chunks (a lower bound)"
        )
    if any(r.partial for r in rows):
        partial = ", ".join(rung_name(r.rung, r.conc) for r in rows if r.partial)
        notes.append(f"{PARTIAL_MARK} rung did not finish (partial): {partial}")
    for r in rows:
        if r.saturated and r.generator:
            g = r.generator
            late = g.get("read_delay_p99_ms")
            reads = f", messages read up to {late:.1f} ms late (p99)" if late is not None else ""
            notes.append(
                f"{SATURATED_MARK} load generator saturated on {rung_name(r.rung, r.conc)} "
                f"(cpu {g['cpu_pct']:.0f} % of a core, event-loop lag {g['lag_ms']:.1f} ms "
                f"on {g['worker']}{reads}): latencies may be off and throughput understated; "
                "rerun with more --processes or workers"
            )
        if r.machine_busy and r.generator:
            g = r.generator
            notes.append(
                f"the machine was busy on {rung_name(r.rung, r.conc)} ({g['machine_cpu_pct']:.0f} % of its "
                f"{g['cores']} cores in use, steal {g['steal_pct']:.0f} %, load {g['load1']:.1f}) while the "
                f"load generator used {g['cpu_pct']:.0f} % of a core: event-loop lag {g['lag_ms']:.1f} ms, "
                "so the figures may be late; other processes (or the hypervisor) took the CPU, not the "
                "generator: free the machine, more --processes would not help"
            )
    notes += window_notes(rows)
    notes += [waited_note(r) for r in rows if r.waited]
    notes += _uncertainty_notes(rows)
    notes += reasoning_notes(rows)
    notes += structured_notes(rows)
    notes += server_notes(rows)
    notes += _input_notes(rows)
    notes += _output_notes(rows)
    opened = [r for r in rows if _connections_matter(r)]
    if opened:
        notes.append(
            "connections opened during the rung (their TCP handshake and TLS inside TTFT, as in vLLM) raise "
            "ttft_p50_ms: "
            + ", ".join(
                f"{rung_name(r.rung, r.conc)} by {r.connect_ttft_ms:.1f} ms "
                f"({r.new_connections} of {r.requests} requests opened one)"
                for r in opened
            )
            + "; compare such rungs with runs that open as many, or read connect and tls in --metrics"
        )
    for r in rows:
        if r.failures:
            kinds = ", ".join(f"{k} x{n}" for k, n in r.failures_by_kind.items())
            notes.append(
                f"{rung_name(r.rung, r.conc)}: {r.failures} of {r.requests} requests failed ({kinds}); "
                f"their {r.partial_tokens} partial tokens are not counted: see their `error` in the records"
            )
    return notes


def window_notes(rows: Sequence[SweepRow]) -> list[str]:
    """Rungs whose window is not their whole span (llmload.analysis.run.window): those that never
    held their concurrency, and those whose steady agg_tok/s is more than `EDGES_NOTE_PCT` off the
    whole span's, ramp and drain included (the JSON's `window` has every rung's)."""
    notes = []
    for r in rows:
        w = r.window or {}
        if w.get("rule") == NOT_HELD:
            notes.append(
                f"{rung_name(r.rung, r.conc)} never held {held_floor(r.conc)} requests in flight (95 % of "
                "its users): its figures are over its whole span, ramp and drain included; run the "
                "rung longer (a held rung: leave `requests_per_user` out, docs/precision.md)"
            )
        elif (
            w.get("rule") == STEADY
            and (span := _span_tok_s(w))
            and abs(r.agg_tok_s / span - 1) * 100 > EDGES_NOTE_PCT
        ):
            parts = [
                f"{part} {w[f'{part}_s']:.1f} s, {w[f'{part}_tokens']:.0f} tokens"
                for part in ("ramp", "drain")
                if w[f"{part}_tokens"] or w[f"{part}_s"] >= 0.05
            ]
            notes.append(
                f"{rung_name(r.rung, r.conc)}: agg_tok/s is over its steady {w['seconds']:.1f} s (at least "
                f"{held_floor(r.conc)} in flight), {r.agg_tok_s / span - 1:+.0%} on its whole span's "
                f"{span:.1f} ({'; '.join(parts)} left out)"
            )
    return notes


def _span_tok_s(w: Mapping[str, Any]) -> float | None:
    """The agg_tok/s of a steady window's rung over its whole span, ramp and drain included."""
    seconds = w["ramp_s"] + w["seconds"] + w["drain_s"]
    return (w["ramp_tokens"] + w["tokens"] + w["drain_tokens"]) / seconds if seconds > 0 else None


def _connections_matter(row: SweepRow) -> bool:
    """Whether the connections a rung opened moved its TTFT p50 beyond CONNECT_NOTE_PCT."""
    moved, p50 = row.connect_ttft_ms, row.ttft_p50_ms
    return moved is not None and p50 is not None and p50 > 0 and moved > CONNECT_NOTE_PCT / 100.0 * p50


def structured_notes(rows: Sequence[SweepRow]) -> list[str]:
    """Rungs whose requests carried tools or a response_format: the valid shares' meaning, and
    how many replies stopped on their own before max_tokens (a cap for them)."""
    calls = (
        [f"{CALLS_VALID_COLUMN}: tool calls whose arguments are a JSON object, of the calls replies made"]
        if _Groups.of(rows).called
        else []
    )
    shaped = [r for r in rows if r.structured]
    if not shaped:
        return calls
    valid = (
        f"{VALID_COLUMN}: answers that parse as JSON and fit the response_format's schema; "
        if _Groups.of(rows).checked
        else ""
    )
    counts = [(r, r.structured or {}) for r in shaped]
    stopped = ", ".join(f"{rung_name(r.rung, r.conc)} {s['stopped']} of {s['requests']}" for r, s in counts)
    return [
        f"tools / response_format: {valid}their replies end on their own (sent without ignore_eos, "
        f"max_tokens a cap); stopped before max_tokens: {stopped}",
        *calls,
    ]


def reasoning_notes(rows: Sequence[SweepRow]) -> list[str]:
    """A reasoning model's rungs: the columns' meaning, requests that never answered, reasoning
    the client counted, and odd streams (named, with what to do)."""
    notes = []
    if _Groups.of(rows).reasoned:
        notes.append(
            "think_%: reasoning tokens of the output tokens; ttfo_p50_ms: median time to the first "
            "answer token (ttft counts the first token of either kind)"
        )
    for r in rows:
        info = r.reasoning
        if not info:
            continue
        name = rung_name(r.rung, r.conc)
        if info["unanswered"]:
            notes.append(
                f"{name}: {info['unanswered']} of {info['requests']} reasoning requests never answered "
                "(max_tokens ended them while thinking: no time to first answer); raise max_tokens"
            )
        if info["counted"]:
            notes.append(
                f"{name}: the server gave no reasoning count on {info['counted']} of {info['requests']} "
                "requests: their reasoning tokens are the client's count of reasoning chunks (a lower "
                "bound when a chunk holds several tokens)"
            )
        for odd, n in info["odd"].items():
            meaning = _ODD_NOTES.get(odd.split(":")[0], "")
            notes.append(
                f"{name}: {n} of {r.requests} streams had {odd}" + (f": {meaning}" if meaning else "")
            )
    return notes


_ODD_NOTES = {
    "reasoning_after_answer": "reasoning came after the answer had begun (counted as reasoning; the "
    "time to first answer is the answer's first token); check the server's reasoning parser",
    "reasoning_tokens_not_a_count": "the server's reasoning_tokens is not a count (the client counted "
    "them instead); check the server's usage",
    "unknown_event": "a Responses API event type llmload does not know (not timed, not counted: a new "
    "event may carry tokens)",
}


def waited_note(r: SweepRow) -> str:
    """A rung whose requests waited for a place in the server's batch (sweep_rows: waited)."""
    most = r.decoding_max
    return (
        f"{rung_name(r.rung, r.conc)}: {r.waited} of {r.requests} requests waited for a place in the "
        f"server's batch (it decoded at most {most} at once): the rung measures the server's queue "
        f"too (TTFT); to measure the server, keep rungs at or below {most}, or raise its batch limit "
        "(vLLM --max-num-seqs, SGLang --max-running-requests, llama.cpp --parallel)"
    )


def server_notes(rows: Sequence[SweepRow]) -> list[str]:
    """What the server's side says about the rungs, when it needs acting on: the prefix cache
    served more than any prompt of the run shares (the server saw these prompts before), requests
    queued behind the server's batch limit, the KV cache neared full."""
    notes = []
    over = [(r, r.cache) for r in rows if r.cache and r.cache.get("over_shared")]
    if over:
        notes.append(
            "the prefix cache served more prompt tokens than the run's prompts share ("
            + ", ".join(
                f"{rung_name(r.rung, r.conc)}: {c['over_shared']} of {c['requests']} requests"
                for r, c in over
            )
            + "): the server had seen these prompts, likely from an earlier run with the same seed; "
            "rerun with another seed, restart the server or flush its prefix cache"
        )
    waited = [  # a rung whose streams showed the wait has its own note (waited_note)
        (r, w) for r in rows if not r.waited and (w := (r.server or {}).get("waiting") or 0.0) >= WAITING_MIN
    ]
    if waited:
        notes.append(
            "requests waited in the server's queue ("
            + ", ".join(f"{rung_name(r.rung, r.conc)}: {w:.1f} waiting on average" for r, w in waited)
            + "): those rungs exceed the server's running batch (vLLM --max-num-seqs, SGLang "
            "--max-running-requests, llama.cpp --parallel): their TTFT includes the queue"
        )
    full = [(r, kv) for r in rows if (kv := (r.server or {}).get("kv_usage") or 0.0) >= KV_FULL]
    if full:
        notes.append(
            "the server's KV cache neared full ("
            + ", ".join(f"{rung_name(r.rung, r.conc)}: {100 * kv:.0f} %" for r, kv in full)
            + "): requests may be preempted or queued; give the server more KV memory "
            "(vLLM --gpu-memory-utilization) or read those rungs as overload"
        )
    return notes


def _uncertainty_notes(rows: Sequence[SweepRow]) -> list[str]:
    """Rungs where the generator read streams late enough that some times may be late
    (`llmload.analysis.run.uncertainty`): how many values of each metric, by how much."""
    notes = []
    for r in rows:
        u = r.timing_uncertainty
        if not u or not u.get("late"):
            continue
        parts = ", ".join(
            f"{name.upper()} p99 up to {u[name]['p99_ms']:.1f} ms late ({u[name]['uncertain']} of "
            f"{u[name]['values']} values, max {u[name]['max_ms']:.1f} ms)"
            for name in ("ttft", "itl", "tpot")
            if u[name]["uncertain"]
        )
        notes.append(
            f"{rung_name(r.rung, r.conc)}: the generator read some streams late, several chunks in one "
            f"read, so their times may be late: {parts}; rerun with more --processes, or on a quieter machine"
        )
    return notes


def _input_notes(rows: Sequence[SweepRow]) -> list[str]:
    """Runs that asked for a prompt length (`prompt_tokens`): the input tokens each rung sent
    (server's count), and a warning when they missed the ask. (JSON has them for every run.)"""
    sent = [(r, r.input_tokens) for r in rows if r.input_tokens is not None and r.input_tokens["asked"]]
    limit = 100.0 * INPUT_TOLERANCE
    missed = [(r, i) for r, i in sent if i["miss_pct"] is not None and abs(i["miss_pct"]) > limit]
    if not missed:  # one length asked and sent needs no note (the JSON row has it: `input_tokens`)
        return (
            [_length_note("input tokens", "", sent, "off their ask by > 1")]
            if any(_mixed(i) for _, i in sent)
            else []
        )
    return [
        _length_note("input tokens", "", sent, "off their ask by > 1"),
        f"inputs missed the asked length by more than {limit:g} %: "
        + ", ".join(f"{rung_name(r.rung, r.conc)} {i['miss_pct']:+.1f} %" for r, i in missed)
        + " (every latency and rate is for a different input length than asked): check the prompt "
        "file or the tokenizer the calibration used",
    ]


def _output_notes(rows: Sequence[SweepRow]) -> list[str]:
    """Runs whose outputs were drawn (`max_tokens` a distribution), or where some output was not
    exactly its max_tokens: the output tokens each rung asked and sent, by whose count. (JSON has
    them for every run; a run of one max_tokens served exactly needs no note.)"""
    sent = [(r, r.output_tokens) for r in rows if r.output_tokens is not None and r.output_tokens["asked"]]
    if not any(_mixed(i) or i["off"] for _, i in sent):
        return []
    counted = any(i.get("client_counted") for _, i in sent)
    by = " by usage.completion_tokens" + (", or the client's count where there was none" if counted else "")
    return [_length_note("output tokens", by, sent, "off their ask")]


def _mixed(summary: dict[str, Any]) -> bool:
    """Whether a length summary's requests asked different lengths."""
    return bool(summary["asked_p50"] != summary["asked_p99"] or summary["asked"] != summary["asked_p50"])


def _length_note(label: str, by: str, sent: Sequence[tuple[SweepRow, dict[str, Any]]], off_words: str) -> str:
    """One note of asked against sent lengths (`llmload.analysis.run.reconcile.length_summary`), the
    input and the output note alike: one ask (`(asked N)`, each rung's sent mean, min, max), one
    drawn mix for every rung (stated once, then each rung's sent mean, p50, p99), or each rung
    its own mix; each rung's requests off their ask, and those the client counted."""
    asks = {(i["asked"], i["asked_p50"], i["asked_p99"]) for _, i in sent}
    mixed = any(_mixed(i) for _, i in sent)

    def extra(i: dict[str, Any]) -> str:
        parts = [f"{i['off']} {off_words}"] if i["off"] else []
        if i.get("client_counted"):
            parts.append(f"{i['client_counted']} counted by the client: no usage")
        return f" ({'; '.join(parts)})" if parts else ""

    def sent_mix(i: dict[str, Any], asked: bool = False) -> str:
        """The sent lengths' mean, p50 and p99 (the asked ones' with `asked`)."""
        mean, p50, p99 = ("asked", "asked_p50", "asked_p99") if asked else ("mean", "p50", "p99")
        return f"mean {i[mean]:.1f} p50 {i[p50]:g} p99 {i[p99]:g}"

    first = sent[0][1]
    if not mixed and len(asks) == 1:
        return f"{label} (asked {first['asked']}){by}: " + ", ".join(
            f"{rung_name(r.rung, r.conc)} mean {i['mean']:.1f} min {i['min']} max {i['max']}{extra(i)}"
            for r, i in sent
        )
    if len(asks) == 1:
        return f"{label} asked {sent_mix(first, asked=True)}, sent{by}: " + ", ".join(
            f"{rung_name(r.rung, r.conc)} {sent_mix(i)}{extra(i)}" for r, i in sent
        )
    return f"{label} asked, sent{by}: " + ", ".join(
        f"{rung_name(r.rung, r.conc)} asked {sent_mix(i, asked=True)}, sent {sent_mix(i)}{extra(i)}"
        for r, i in sent
    )


def _grid(header: Sequence[str], body: Sequence[Sequence[str]], fmt: str) -> str:
    """The sweep's tables: right-aligned, and in `table` format without a rule (2-space gaps)."""
    return grid(header, body, fmt, align=["right"] * len(header), ruled=False)


def _summary_keys(percentiles: Sequence[float]) -> list[str]:
    return ["mean", "median", "std", *map(percentile_label, percentiles)]


def _summary_cells(s: Summary | None, percentiles: Sequence[float]) -> dict[str, str]:
    """mean, median, std and percentiles of a summary (ms, 1 decimal), '-' when there is none."""
    values = {} if s is None else s.as_dict()
    return {k: fmt_num(values.get(k)) for k in _summary_keys(percentiles)}


def _latency_rows(metrics: Sequence[RungMetrics], percentiles: Sequence[float]) -> list[list[str]]:
    body = []
    for m in metrics:
        for name in LATENCY_NAMES:
            s = m.latencies[name]
            if s is None and name in ("queue_wait", "connect", "tls", "think", "ttftc"):
                continue  # only rate-mode rungs wait for a client slot; reused connections cost nothing;
                # only a reasoning model thinks; only a reply with a tool call has a first one
            label = "itl (per chunk)" if name == "itl" and m.itl_per_chunk else name
            cells = _summary_cells(s, percentiles).values()
            body.append([rung_name(m.rung, m.conc), label, str(0 if s is None else s.count), *cells])
    return body


def _rate_cells(m: RungMetrics) -> list[str]:
    return [
        rung_name(m.rung, m.conc),
        fmt_num(m.output_tok_s),
        fmt_num(m.total_tok_s),
        fmt_num(m.request_s, 2),
        fmt_num(m.achieved_concurrency, 2),
        str(m.good_requests),
        fmt_num(m.goodput_request_s, 2),
        str(m.stopped_early),
        str(m.chunks_over_tokens),
    ]


REASONING_METRIC_COLUMNS = ("rung", "reasoning_tok", "think_%", "reasoned", "counted", "unanswered")


def _reasoning_metric_cells(m: RungMetrics) -> list[str]:
    r = m.reasoning or {}
    return [
        rung_name(m.rung, m.conc),
        str(r.get("tokens", 0)),
        fmt_pct(r.get("share")),
        str(r.get("requests", 0)),
        str(r.get("counted", 0)),
        str(r.get("unanswered", 0)),
    ]


RATE_COLUMNS = (
    "rung",
    "out_tok/s",
    "total_tok/s",
    "req/s",
    "achieved_conc",
    "good_reqs",
    "goodput_req/s",
    "stopped_early",
    "chunks>tokens",
)


def render_metrics(
    metrics: Sequence[RungMetrics], fmt: str = "table", percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> str:
    """The latency table (ms; one line per rung and metric) and the rates table, for table or
    markdown output."""
    latency_header = ["rung", "latency_ms", "n", *_summary_keys(percentiles)]
    parts = [
        _grid(latency_header, _latency_rows(metrics, percentiles), fmt),
        _grid(RATE_COLUMNS, [_rate_cells(m) for m in metrics], fmt),
    ]
    reasoning = [m for m in metrics if m.reasoning and m.reasoning["requests"]]
    if reasoning:
        parts.append(_grid(REASONING_METRIC_COLUMNS, [_reasoning_metric_cells(m) for m in reasoning], fmt))
    slo = metrics[0].slo if metrics else {}
    if slo:
        parts.append("goodput SLO: " + ", ".join(f"{k} <= {v:g}" for k, v in slo.items()))
    parts += [tool_call_note(m) for m in metrics if m.tool_calls]
    per_chunk = [rung_name(m.rung, m.conc) for m in metrics if m.itl_per_chunk]
    if per_chunk:
        parts.append(
            f"itl (per chunk) on {', '.join(per_chunk)}: the server put several tokens in a chunk and "
            "sent no usage per chunk, so chunk counts are a lower bound (an empty closing chunk may "
            "hold a token); a server that honours stream_options.continuous_usage_stats "
            "(continuous_usage) gives ITL per token"
        )
    return "\n\n".join(parts)


def tool_call_note(m: RungMetrics) -> str:
    """What a rung's replies with tool calls did (docs/metrics.md)."""
    t = m.tool_calls or {}
    return (
        f"tool calls on {rung_name(m.rung, m.conc)}: {t['requests']} of {m.completed} completed replies "
        f"made {t['calls']} tool calls ({t['parallel']} replies of several calls), {t['invalid']} with "
        "arguments that are not a JSON object (counted, not failed); each delta of a call's name or "
        "arguments is a chunk, ttftc the time to the first"
    )


@dataclass(frozen=True, slots=True)
class Extra:
    """Per-rung figures another report adds to the sweep's (the GPUs': llmload.output.gpu_report):
    its object under `key` in each json row (null for a rung without one), its cells in each csv
    row (every rung the same columns), its table under the metrics tables (table, markdown)."""

    key: str
    json: Mapping[int, dict[str, Any]]
    csv: Callable[[int], dict[str, str]]
    table: Callable[[str], str]


def _csv_row(
    row: SweepRow, m: RungMetrics | None, percentiles: Sequence[float], wide: bool, groups: _Groups
) -> dict[str, str]:
    out = _sweep_cells(row, wide, groups) | {
        "estimated": str(row.estimated),
        "partial": str(row.partial),
        "saturated": str(row.saturated),
    }
    if m is not None:
        for name in (*LATENCY_NAMES, *LATENCY_ALIASES):
            cells = _summary_cells(m.latencies[LATENCY_ALIASES.get(name, name)], percentiles)
            out |= {f"{name}_{k}_ms": v for k, v in cells.items()}
        out |= dict(zip(RATE_COLUMNS[1:], _rate_cells(m)[1:], strict=True))
        out |= dict(zip(REASONING_METRIC_COLUMNS[1:], _reasoning_metric_cells(m)[1:], strict=True))
        out["itl_per_chunk"] = str(m.itl_per_chunk)
    server = row.server or {}
    out |= {f"server_{k}": "" if server.get(k) is None else f"{server[k]:.4g}" for k in _SERVER_KEYS}
    return out


def render(
    rows: Sequence[SweepRow],
    fmt: str = "table",
    *,
    metrics: Sequence[RungMetrics] | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    wide: bool = False,
    missing: Sequence[MissingRung] = (),
    notes: Sequence[str] = (),
    determinism: Sequence[RungDivergence] | None = None,
    extras: Sequence[Extra] = (),
) -> str:
    """The sweep table in `fmt` (one of FORMATS), with the `extras` (`Extra`). With `metrics` (one
    per row, same order):
    table/markdown append the latency and rates tables, csv adds columns, json nests them.
    `missing` rungs (no record) are listed in ladder order, marked, with no figures; `notes` (e.g.
    the greedy-determinism check's) go under the table's own notes; json gives each row the
    check's figures (`determinism`, by rung; null when the check did not run)."""
    if metrics is not None and len(metrics) != len(rows):
        raise ValueError("metrics must hold one entry per sweep row")
    paired: list[tuple[SweepRow, RungMetrics | None]] = list(
        zip(rows, metrics if metrics is not None else [None] * len(rows), strict=True)
    )
    if fmt == "json":
        checked = {d.rung: d.as_dict() for d in determinism or ()}
        data = [
            asdict(r)
            | ({} if m is None else {"metrics": m.as_dict()})
            | {"determinism": checked.get(r.rung)}
            | {e.key: e.json.get(r.rung) for e in extras}
            for r, m in paired
        ]
        data += [asdict(m) | {"not_run": not m.started, "partial": m.started} for m in missing]
        return json.dumps(sorted(data, key=lambda d: d["rung"]), indent=2)
    if fmt == "csv":
        groups = _Groups.of(rows)
        flat = _with_missing(
            [
                (
                    r.rung,
                    _csv_row(r, m, percentiles, wide, groups)
                    | {k: v for e in extras for k, v in e.csv(r.rung).items()},
                )
                for r, m in paired
            ],
            missing,
            wide,
        )
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(flat[0]) if flat else list(CORE_COLUMNS))
        writer.writeheader()
        writer.writerows(flat)
        return buf.getvalue().rstrip("\n")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    header = _header(rows, wide)
    cells = _with_missing(list(zip([r.rung for r in rows], _marked(rows, wide), strict=True)), missing, wide)
    table = _grid(header, [[c[h] for h in header] for c in cells], fmt)
    if fmt == "table":  # a format to paste (markdown) holds data only: the caller shows table_notes
        table = "\n".join([table, *table_notes(rows, missing, notes)])
    parts = [table]
    if metrics is not None:
        parts.append(render_metrics(metrics, fmt, percentiles))
        if any(r.server for r in rows):
            parts.append(_grid(SERVER_VIEW_COLUMNS, [_server_cells(r) for r in rows if r.server], fmt))
        parts += [text for e in extras if (text := e.table(fmt))]
    return "\n\n".join(parts)


def table_notes(
    rows: Sequence[SweepRow], missing: Sequence[MissingRung] = (), notes: Sequence[str] = ()
) -> list[str]:
    """Every note of the sweep table, in the order printed under it (`sweep_notes`, the missing
    rungs', then `notes`): under the table in `table` output, on stderr in the others."""
    return [*sweep_notes(rows), *missing_notes(missing), *notes]


# the server's view of each rung (`--metrics`): means over the rung's scrapes, the counters' deltas
SERVER_VIEW_COLUMNS = ("rung", "srv_running", "srv_waiting", "kv_usage_%", "accept_len", "srv_cache_%")
_SERVER_KEYS = ("running", "waiting", "kv_usage", "accept_len", "cache_share")


_PERCENT_KEYS = ("kv_usage", "cache_share")  # shares 0..1, shown in %


def server_view_cells(server: Mapping[str, Any] | None) -> dict[str, str]:
    """A rung's server figures (`ServerRungMetrics.as_dict`, None: none) as the server view shows
    them, by key: shares in %, two decimals, '-' for a figure that is missing."""
    server = server or {}
    return {
        k: fmt_pct(server.get(k), 2) if k in _PERCENT_KEYS else fmt_num(server.get(k), 2)
        for k in _SERVER_KEYS
    }


def _server_cells(row: SweepRow) -> list[str]:
    return [rung_name(row.rung, row.conc), *server_view_cells(row.server).values()]


# --- rungs without a record (issue 13): a stopped run never looks shorter than its ladder ----------
NOT_RUN_MARK = "~"


def _with_missing(
    indexed: list[tuple[int, dict[str, str]]], missing: Sequence[MissingRung], wide: bool
) -> list[dict[str, str]]:
    """Row cells plus one row per missing rung, in ladder order: its concurrency marked `!`
    (started, stopped before its first record) or `~` (not run), every figure '-'. In csv the
    marks are the `partial` and `not_run` columns."""
    if not missing:
        return [cells for _, cells in indexed]
    columns = list(indexed[0][1]) if indexed else [*CORE_COLUMNS, *(WIDE_COLUMNS if wide else ())]
    csv_like = "partial" in columns
    for _, cells in indexed:
        if csv_like:
            cells["not_run"] = "False"
        elif cells["conc"][-1:] not in (PARTIAL_MARK, SATURATED_MARK, " "):
            cells["conc"] += " "  # keep the digits aligned with the marked rows
    for m in missing:
        cells = dict.fromkeys(columns, "-") | {"conc": str(m.conc), "failures": "0"}
        if wide:
            cells |= {"rung": rung_name(m.rung, m.conc), "requests": "0", "partial_tokens": "0"}
        if csv_like:
            cells |= {"estimated": "False", "partial": str(m.started), "saturated": "False"}
            cells["not_run"] = str(not m.started)
        else:
            cells["conc"] += PARTIAL_MARK if m.started else NOT_RUN_MARK
        indexed.append((m.rung, cells))
    return [cells for _, cells in sorted(indexed, key=lambda pair: pair[0])]


def missing_notes(missing: Sequence[MissingRung]) -> list[str]:
    """What the marks of the missing rungs mean, naming them."""
    notes = []
    started = ", ".join(rung_name(m.rung, m.conc) for m in missing if m.started)
    if started:
        notes.append(f"{PARTIAL_MARK} rung stopped before its first request ended (no record): {started}")
    not_run = ", ".join(rung_name(m.rung, m.conc) for m in missing if not m.started)
    if not_run:
        notes.append(f"{NOT_RUN_MARK} rung not run (the run stopped, or has not reached it yet): {not_run}")
    return notes
