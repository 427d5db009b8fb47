"""The GPUs' figures per rung (llmload.analysis.run.gpu_metrics) beside the sweep's: the `gpu` object
of each json row, the `gpu_*` csv columns, a table under `table --metrics`, and the notes of a
run whose exporter gave nothing or whose GPUs' energy came from their power."""

from __future__ import annotations

from collections.abc import Sequence

from llmload.analysis.run.gpu_metrics import GpuMetrics, GpuRung
from llmload.analysis.run.sweep_rows import SweepRow
from llmload.core.names import rung_name
from llmload.output.table import Extra
from llmload.output.toolkit.cells import fmt_num
from llmload.output.toolkit.grid import grid

GPU_COLUMNS = ("rung", "gpus", "energy_J", "power_W", "util_%", "mem_peak_MiB", "tok/J")
CSV_COLUMNS = ("gpus", "gpu_energy_j", "gpu_power_w", "gpu_util_pct", "gpu_mem_peak_mib", "tok_per_j")


def _cells(g: GpuRung | None) -> list[str]:
    if g is None:
        return ["-"] * (len(GPU_COLUMNS) - 1)
    return [
        str(g.gpus),
        fmt_num(g.energy_j),
        fmt_num(g.power_w),
        fmt_num(g.util_pct),
        fmt_num(g.mem_peak_mib, 0),
        fmt_num(g.tok_per_j, 3),
    ]


def gpu_extra(gpu: GpuMetrics, rows: Sequence[SweepRow]) -> Extra:
    """The GPU figures as the sweep table's `Extra` (rows: the sweep's, for the rungs' names)."""

    def table(fmt: str) -> str:
        if fmt not in ("table", "markdown") or not gpu.rungs:
            return ""
        body = [[rung_name(r.rung, r.conc), *_cells(gpu.rungs.get(r.rung))] for r in rows]
        return grid(GPU_COLUMNS, body, fmt, align=["right"] * len(GPU_COLUMNS))

    return Extra(
        key="gpu",
        json={rung: g.as_dict() for rung, g in gpu.rungs.items()},
        csv=lambda rung: dict(zip(CSV_COLUMNS, _cells(gpu.rungs.get(rung)), strict=True)),
        table=table,
    )


def gpu_notes(gpu: GpuMetrics | None) -> list[str]:
    """The notes of a run that asked for GPU figures: none came (what to do), or some GPUs' energy
    came from their power gauge (which); else nothing."""
    return [] if gpu is None else gpu.notes
