"""The table cells' formatters: every number a table, a note or the web UI shows goes through one
of these, so one figure reads the same everywhere. Each says what it takes: `fmt_num` a number as
it is (a percent already in percent is a number), `fmt_pct` a fraction (0..1) shown in percent.
A missing figure (None) and one that is not finite (a ratio over no time) show as '-'."""

from __future__ import annotations

import math

MISSING = "-"


def fmt_num(value: float | None, decimals: int = 1, *, sign: bool = False) -> str:
    """`value` with `decimals` fixed decimals (`sign`: a leading + on a positive value)."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{value:+.{decimals}f}" if sign else f"{value:.{decimals}f}"


def fmt_pct(fraction: float | None, decimals: int = 1, *, sign: bool = False) -> str:
    """A fraction (0.25) as a percent number (25.0), without the % sign."""
    return fmt_num(None if fraction is None else 100.0 * fraction, decimals, sign=sign)
