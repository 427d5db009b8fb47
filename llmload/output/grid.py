"""The table layout the command reports share (budget, compare, server metrics, twin): cells are
preformatted strings, `table` is tabulate's simple layout and `markdown` GitHub's."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

TABLEFMT = {"table": "simple", "markdown": "github"}


def report_grid(
    header: Sequence[str],
    body: Sequence[Sequence[str]],
    fmt: str,
    *,
    colalign: Sequence[str] | None = None,
    stralign: str = "default",
) -> str:
    """`body` under `header` in `fmt` (a key of TABLEFMT); numbers are not reparsed, so a cell
    shows exactly the digits its renderer chose."""
    return tabulate(
        body,
        headers=list(header),
        tablefmt=TABLEFMT[fmt],
        disable_numparse=True,
        colalign=colalign,
        stralign=stralign,
    )
