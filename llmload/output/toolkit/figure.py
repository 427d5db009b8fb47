"""Every PNG plot's set-up: a figure on matplotlib's Agg canvas (no display, no pyplot state), the
concurrency axis, and the save. matplotlib is imported inside these functions, so importing llmload
never loads it (a unit test checks): only drawing a plot does. A plot is `width` x `height` inches
at DPI (8 x 5 inches: 800 x 500 pixels) unless its caller says otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 100


def figure(width: float, height: float) -> Figure:
    """An empty figure of `width` x `height` inches at DPI, on an Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def concurrency_axis(ax: Axes) -> None:
    """The x axis of a plot against concurrency: labelled, integer ticks only."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("concurrency (users)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def save(fig: Figure, path: Path, dpi: int = DPI) -> Path:
    """The figure as a PNG at `path` (its folder made if missing), at `dpi`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    return path
