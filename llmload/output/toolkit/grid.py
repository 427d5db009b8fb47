"""The one table layout: every table llmload prints goes through `grid` (a unit test keeps tabulate
out of every other module). Cells are preformatted strings (`llmload.output.toolkit.cells`), shown exactly
as given: numbers are never reparsed (tabulate would drop a trailing zero, or turn 1234567.0 into
1.23457e+06) and whitespace is kept (the sweep table's marks pad cells to keep decimal points in
line). Formats: `table`, tabulate's simple layout (a dashed rule under the header), and
`markdown`, GitHub's."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

TABLEFMT = {"table": "simple", "markdown": "github"}
ALIGNS = ("left", "right", "decimal")  # decimal: decimal points in line; a cell not a number: right


def grid(
    header: Sequence[str],
    body: Sequence[Sequence[str]],
    fmt: str,
    *,
    align: str | Sequence[str] = "left",
    ruled: bool = True,
) -> str:
    """`body` under `header` in `fmt` (a key of TABLEFMT). `align`: one of ALIGNS for every column,
    or one per column. `ruled=False` draws the `table` format without the rule: the header is a
    first row, columns two spaces apart (the sweep table's compact layout; markdown keeps its rule)."""
    one = isinstance(align, str)  # then it is tabulate's stralign, whose "default" is left
    if fmt == "table" and not ruled:  # the header as a first row: no rule, two-space gaps
        rows, headers, tablefmt = [list(header), *body], [], "plain"
    else:
        rows, headers, tablefmt = [*body], list(header), TABLEFMT[fmt]
    return tabulate(
        rows,
        headers=headers,
        tablefmt=tablefmt,
        disable_numparse=True,
        preserve_whitespace=True,
        stralign=("default" if align == "left" else str(align)) if one else "default",
        colalign=None if one else list(align),
    )
