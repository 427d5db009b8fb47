"""The report's PNG plots, drawn with matplotlib's Agg canvas (no display, no pyplot state).

Each plot is FIG_SIZE inches (`llmload.output.toolkit.figure`, which imports matplotlib when a
plot is drawn: 800 x 500 pixels).
- throughput: aggregate and mean per-request output tok/s against concurrency;
- latency: TTFT and TPOT p50 / p99 (ms) against concurrency;
- pareto: throughput against interactivity, one point per rung (per-request tok/s on x,
  aggregate tok/s on y, labelled with the concurrency) and the Pareto front (the rungs no other
  rung beats on both axes).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from llmload.analysis.run.metrics import RungMetrics
from llmload.analysis.run.sweep_rows import SweepRow
from llmload.output.toolkit.figure import concurrency_axis, figure, save

FIG_SIZE = (8.0, 5.0)
PLOT_NAMES = ("throughput", "latency", "pareto")


def throughput_plot(rows: Sequence[SweepRow], path: Path) -> Path:
    ordered = sorted(rows, key=lambda r: (r.conc, r.rung))
    fig = figure(*FIG_SIZE)
    ax = fig.add_subplot()
    conc = [r.conc for r in ordered]
    ax.plot(conc, [r.agg_tok_s for r in ordered], "o-", label="aggregate tok/s")
    per_req = [(r.conc, r.per_req_tok_s) for r in ordered if r.per_req_tok_s is not None]
    ax.plot([c for c, _ in per_req], [v for _, v in per_req], "s--", label="per-request tok/s (mean)")
    concurrency_axis(ax)
    ax.set_ylabel("output tokens / s")
    ax.set_title("Output throughput vs concurrency")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    return save(fig, path)


def _latency_series(metrics: Sequence[RungMetrics], name: str, key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for m in metrics:
        summary = m.latencies.get(name)
        value = None if summary is None else summary.as_dict().get(key)
        if value is not None:
            xs.append(m.conc)
            ys.append(float(value))
    return xs, ys


def latency_plot(metrics: Sequence[RungMetrics], path: Path) -> Path:
    ordered = sorted(metrics, key=lambda m: (m.conc, m.rung))
    fig = figure(*FIG_SIZE)
    for i, (name, title) in enumerate((("ttft", "TTFT"), ("tpot", "TPOT"))):
        ax = fig.add_subplot(1, 2, i + 1)
        for key, style in (("p50", "o-"), ("p99", "^--")):
            xs, ys = _latency_series(ordered, name, key)
            if xs:
                ax.plot(xs, ys, style, label=f"{title} {key}")
        concurrency_axis(ax)
        ax.set_ylabel("ms")
        ax.set_title(f"{title} vs concurrency")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return save(fig, path)


def _interactivity(rows: Sequence[SweepRow]) -> list[tuple[float, SweepRow]]:
    """(per-request tok/s, row) of the rungs where some request completed."""
    return [(r.per_req_tok_s, r) for r in rows if r.per_req_tok_s is not None]


def pareto_front(rows: Sequence[SweepRow]) -> list[SweepRow]:
    """Rungs not beaten on both per-request and aggregate tok/s, by per-request tok/s ascending."""
    points = _interactivity(rows)
    front = [
        (x, r)
        for x, r in points
        if not any(
            ox >= x and o.agg_tok_s >= r.agg_tok_s and (ox, o.agg_tok_s) != (x, r.agg_tok_s)
            for ox, o in points
        )
    ]
    return [r for _, r in sorted(front, key=lambda p: p[0])]


def pareto_plot(rows: Sequence[SweepRow], path: Path) -> Path:
    points = _interactivity(rows)
    fig = figure(*FIG_SIZE)
    ax = fig.add_subplot()
    ax.scatter([x for x, _ in points], [r.agg_tok_s for _, r in points], zorder=3)
    for x, r in points:
        ax.annotate(f"c{r.conc}", (x, r.agg_tok_s), textcoords="offset points", xytext=(6, 6))
    front = _interactivity(pareto_front(rows))
    ax.plot([x for x, _ in front], [r.agg_tok_s for _, r in front], "-", alpha=0.6, label="Pareto front")
    ax.set_xlabel("interactivity: per-request tok/s")
    ax.set_ylabel("throughput: aggregate tok/s")
    ax.set_title("Throughput vs interactivity")
    if points:  # room for the labels
        ax.set_xlim(0, max(x for x, _ in points) * 1.15)
        ax.set_ylim(0, max(r.agg_tok_s for _, r in points) * 1.15)
    ax.grid(alpha=0.3)
    ax.legend()
    return save(fig, path)


def write_plots(
    rows: Sequence[SweepRow], metrics: Sequence[RungMetrics], out_dir: Path, stem: str
) -> dict[str, Path]:
    """The three plots as `<out_dir>/<stem>_<name>.png`, keyed by PLOT_NAMES."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {
        "throughput": throughput_plot(rows, out_dir / f"{stem}_throughput.png"),
        "latency": latency_plot(metrics, out_dir / f"{stem}_latency.png"),
        "pareto": pareto_plot(rows, out_dir / f"{stem}_pareto.png"),
    }
