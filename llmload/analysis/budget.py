"""The Amdahl budget: what share of a decode step a component costs, and what making it faster buys.

Per rung, the decode step and the batch:
- from a run: measured (llmload.analysis.run.steps): the median of the server's steps from the
  streams' chunks, the batch it ran (its metrics' running requests, else the streams decoding at
  once) and the tokens a step gives each sequence; the server's counters' acceptance is shown
  beside, never used for the step;
- from a sweep table typed in by hand (concurrency and aggregate output tok/s per rung) and the
  accepted tokens per sequence per step (speculative decoding's acceptance length; 1 without it):
  tokens_per_step = conc * accept_len (every user in the batch, every step advancing accept_len
  tokens), step_ms = tokens_per_step / agg_tok_s * 1000;
- the component's cost per step c (constant, a table by batch size, or a + b * batch, at the
  batch the step ran), share = c / step_ms; a component larger than the step is refused;
- end-to-end gain if the component became k times faster: step / (step - c + c / k) - 1;
  the limit k -> infinity (the component free) is step / (step - c) - 1 (Amdahl's law).
Assumes the component sits on the step's critical path (serial with the rest of the step).
"""

from __future__ import annotations

import csv
import io
import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llmload.analysis.run.postprocess import load_run
from llmload.analysis.run.records_pass import StartChild
from llmload.analysis.run.server_metrics import load_server_metrics
from llmload.analysis.run.steps import RungSteps, measure_run
from llmload.analysis.step_fit import step_line
from llmload.core.config import ConfigError
from llmload.core.files.run_files import RunFiles, names_a_table
from llmload.core.schema import shown


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """What the budget needs of one rung: its concurrency and aggregate output tok/s."""

    conc: int
    agg_tok_s: float
    accept_len: float | None = None  # measured for this rung (server counters), if known
    steps: RungSteps | None = None  # the rung's step and batch measured from a run's streams


@dataclass(frozen=True, slots=True)
class CostModel:
    """A component's cost per step in ms: constant, linear a + b * batch, or a table by batch size."""

    name: str = "component"
    constant_ms: float | None = None
    linear: tuple[float, float] | None = None  # (a, b)
    table: tuple[tuple[int, float], ...] = ()  # (batch, ms), sorted by batch

    def cost_ms(self, batch: float) -> float:
        if self.constant_ms is not None:
            return self.constant_ms
        if self.linear is not None:
            return self.linear[0] + self.linear[1] * batch
        sizes = [b for b, _ in self.table]
        if not sizes[0] <= batch <= sizes[-1]:
            raise ConfigError(
                f"{self.name}: batch {batch} is outside the cost table ({sizes[0]}..{sizes[-1]})"
            )
        i = bisect_left(sizes, batch)
        if sizes[i] == batch:
            return self.table[i][1]
        (b0, c0), (b1, c1) = self.table[i - 1], self.table[i]
        return c0 + (c1 - c0) * (batch - b0) / (b1 - b0)

    def describe(self) -> str:
        if self.constant_ms is not None:
            return f"{self.constant_ms:g} ms per step"
        if self.linear is not None:
            return f"{self.linear[0]:g} + {self.linear[1]:g} * batch ms per step"
        return "ms per step by batch size: " + ", ".join(f"{b}: {c:g}" for b, c in self.table)


def _number(value: Any, where: str) -> float:
    """A finite number (an integer too large for a float is not one)."""
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:
        number = math.nan
    if not math.isfinite(number):
        raise ConfigError(f"{where}: expected a number, got {shown(value)}")
    return number


def _positive(value: Any, where: str) -> float:
    number = _number(value, where)
    if number <= 0:  # a step of zero tokens, or a component infinitely slower: no budget
        raise ConfigError(f"{where}: expected a number > 0, got {value!r}")
    return number


def check_number(source: str, key: str, value: Any) -> float:
    """`cost_ms` as a number (the file's key and --component-ms): finite."""
    return _number(value, f"{source}: {key}")


def check_positive(source: str, key: str, value: Any) -> float:
    """`accept_len`, `step_scale` (the file's keys and their flags): a finite number > 0."""
    return _positive(value, f"{source}: {key}")


MAX_SPEEDUP = 1e12  # a finite speedup beyond this is the component free: say `inf`


def check_speedup(source: str, key: str, value: Any) -> float:
    """`speedup` (the file's key and --speedup): a number in (0, 1e12], or infinity (`inf`: the
    component free)."""
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return value
    speedup = _positive(value, f"{source}: {key}")
    if speedup > MAX_SPEEDUP:
        raise ConfigError(
            f"{source}: {key}: expected a number in (0, 1e12] or inf (free), got {shown(value)}"
        )
    return speedup


def parse_cost_model(data: Any, name: str, where: str) -> CostModel:
    """`cost_ms` of the budget file: a number, {linear: {a, b}} or {table: {batch: ms}}."""
    if isinstance(data, int | float) and not isinstance(data, bool):
        return CostModel(name, constant_ms=_number(data, where))
    if isinstance(data, Mapping) and set(data) == {"linear"} and isinstance(data["linear"], Mapping):
        lin = data["linear"]
        if set(lin) != {"a", "b"}:
            raise ConfigError(f"{where}.linear: expected keys a and b (ms = a + b * batch)")
        return CostModel(
            name, linear=(_number(lin["a"], f"{where}.linear.a"), _number(lin["b"], f"{where}.linear.b"))
        )
    if isinstance(data, Mapping) and set(data) == {"table"} and isinstance(data["table"], Mapping):
        rows = []
        for batch, ms in data["table"].items():
            if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
                raise ConfigError(f"{where}.table: batch sizes must be positive integers, got {batch!r}")
            rows.append((batch, _number(ms, f"{where}.table.{batch}")))
        if not rows:
            raise ConfigError(f"{where}.table: empty")
        return CostModel(name, table=tuple(sorted(rows)))
    raise ConfigError(f"{where}: expected a number (ms), {{linear: {{a, b}}}} or {{table: {{batch: ms}}}}")


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """The budget file: the component, and optionally the accept length and the speed-up factor."""

    cost: CostModel
    accept_len: float | None = None
    speedup: float | None = None


BUDGET_KEYS = ("component", "cost_ms", "accept_len", "speedup")


def load_budget_config(path: Path) -> BudgetConfig:
    """Read and validate a budget YAML file (see config/budget.yaml)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping with keys {', '.join(BUDGET_KEYS)}")
    unknown = sorted(set(data) - set(BUDGET_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r}; known: {', '.join(BUDGET_KEYS)}")
    if "cost_ms" not in data:
        raise ConfigError(f"{path}: cost_ms is required")
    name = str(data.get("component", "component"))
    accept = data.get("accept_len")
    speedup = data.get("speedup")
    return BudgetConfig(
        cost=parse_cost_model(data["cost_ms"], name, f"{path}: cost_ms"),
        accept_len=None if accept is None else _positive(accept, f"{path}: accept_len"),
        speedup=None if speedup is None else check_speedup(str(path), "speedup", speedup),
    )


# --- sweep tables typed in by hand -----------------------------------------------------------

CONC_HEADERS = ("conc",)
AGG_HEADERS = ("agg_tok/s", "agg_tok_s")


def _points(header: Sequence[str], rows: Sequence[Sequence[str]], source: str) -> list[SweepPoint]:
    cols = [h.strip().lower() for h in header]
    try:
        conc_i = next(cols.index(h) for h in CONC_HEADERS if h in cols)
        agg_i = next(cols.index(h) for h in AGG_HEADERS if h in cols)
    except StopIteration:
        raise ConfigError(f"{source}: the table needs columns conc and agg_tok/s") from None
    points = []
    for n, row in enumerate(rows, start=2):
        try:
            points.append(SweepPoint(int(row[conc_i].rstrip("!* ")), float(row[agg_i].rstrip("!* "))))
        except (ValueError, IndexError):
            raise ConfigError(
                f"{source}: line {n}: cannot read conc and agg_tok/s from {list(row)}"
            ) from None
    if not points:
        raise ConfigError(f"{source}: no rows")
    return points


def parse_sweep_table(text: str, source: str = "<table>") -> list[SweepPoint]:
    """Points from a sweep table as CSV, markdown (`| conc | agg_tok/s |`) or the plain
    whitespace-aligned layout `sweep_table.py` prints (and the seed's table)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ConfigError(f"{source}: empty")
    if "," in lines[0]:
        rows = list(csv.reader(io.StringIO("\n".join(lines))))
    elif lines[0].startswith("|"):
        rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines if not set(ln) <= set("|-: ")]
    else:
        rows = [ln.split() for ln in lines]
    # the table printed by sweep_table.py is followed by notes; keep rows starting with a number
    body = [r for r in rows[1:] if r and r[0].rstrip("!* ").isdigit()]
    return _points(rows[0], body, source)


# --- the budget ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetRow:
    conc: int
    agg_tok_s: float
    accept_len: float  # tokens a step gives each sequence (measured from the streams, or given)
    tokens_per_step: float  # the step's tokens: batch * accept_len
    step_ms: float
    component_ms: float
    share: float  # component_ms / step_ms
    gain_speedup: float | None  # end-to-end throughput gain if k times faster (0.01 = 1 %)
    gain_free: float  # ... if the component cost nothing
    batch: float = 0.0  # the sequences in the step (conc for a table)
    measured: bool = False  # step and batch measured from the run's streams (else the formula)
    steps: RungSteps | None = None  # what was measured


def amdahl_gain(step_ms: float, component_ms: float, speedup: float) -> float:
    """Throughput gain when a serial part of the step becomes `speedup` times faster (inf: free)."""
    new_step = step_ms - component_ms + (0.0 if math.isinf(speedup) else component_ms / speedup)
    return step_ms / new_step - 1.0


def _step(p: SweepPoint, accept_len: float | None) -> tuple[float, float, float, bool]:
    """(step ms, batch, tokens a step per sequence, measured) of a rung (module docstring)."""
    s = p.steps
    if s is not None and s.step_ms and s.batch and s.tokens_per_step:
        return s.step_ms, s.batch, s.tokens_per_step, True
    accept = accept_len if accept_len is not None else p.accept_len
    if accept is None:
        raise ConfigError(
            f"conc {p.conc}: no accept length (give --accept-len, or a run with streamed chunks or "
            "spec-decode counters)"
        )
    if p.agg_tok_s <= 0:
        raise ConfigError(f"conc {p.conc}: agg_tok/s must be > 0")
    return p.conc * accept / p.agg_tok_s * 1000.0, float(p.conc), accept, False


def budget_rows(
    points: Sequence[SweepPoint],
    cost: CostModel,
    accept_len: float | None,
    speedup: float | None,
    given_as: str = "the component",
) -> list[BudgetRow]:
    """One budget row per rung: its measured step and batch when the run's streams gave them, else
    the table's formula with `accept_len` (or the rung's counters'). ConfigError, naming
    `given_as` (the flag or file key of the cost), when the component costs the whole step or
    more: it is part of the step."""
    rows = []
    for p in points:
        step, batch, accept, measured = _step(p, accept_len)
        c = cost.cost_ms(batch)
        if c >= step:
            raise ConfigError(
                f"{given_as}: {c:g} ms is not part of a {step:.1f} ms step (conc {p.conc}): a component "
                "costs less than the step it is in; check the value and its unit (ms per step)"
            )
        rows.append(
            BudgetRow(
                conc=p.conc,
                agg_tok_s=p.agg_tok_s,
                accept_len=accept,
                tokens_per_step=batch * accept,
                step_ms=step,
                component_ms=c,
                share=c / step,
                gain_speedup=None if speedup is None else amdahl_gain(step, c, speedup),
                gain_free=amdahl_gain(step, c, math.inf),
                batch=batch,
                measured=measured,
                steps=p.steps,
            )
        )
    return rows


def fit_step_model(rows: Sequence[BudgetRow]) -> tuple[float, float] | None:
    """(a, b) of step_ms = a + b * batch over the rungs, the one step line
    (llmload.analysis.step_fit.step_line); None with < 2 batch sizes."""
    xs = [r.batch or float(r.conc) for r in rows]
    if len(set(xs)) < 2:
        return None
    return step_line(xs, [r.step_ms for r in rows])[0]


def run_points(prefix: str, start_child: StartChild | None = None) -> list[SweepPoint]:
    """Points of a run's measured rungs: each with its step and batch measured from the streams
    (llmload.analysis.run.steps) and the accept length its server's counters gave (`start_child`:
    a large records file read in two processes, `load_run`)."""
    result = load_run(prefix, start_child=start_child)
    server = load_server_metrics(prefix, result.iter_records())
    accept = {m.rung: m.accept_len for m in server.measured} if server else {}
    steps = {s.rung: s for s in measure_run(result.iter_records(), prefix, accept)}
    return [SweepPoint(r.conc, r.agg_tok_s, accept.get(r.rung), steps.get(r.rung)) for r in result.rows]


def load_points(source: str | Path, start_child: StartChild | None = None) -> list[SweepPoint]:
    """From a run (prefix, records file or run folder) or a sweep-table file (CSV, markdown, plain)."""
    path = Path(source)
    if names_a_table(path):
        return parse_sweep_table(path.read_text(), str(path))
    return run_points(str(RunFiles.find(path).prefix), start_child)
