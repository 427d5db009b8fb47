"""The step against the batch: the one least-squares line of a decode step's duration on the
batch it ran (`step_ms = base + per_seq x batch`, both terms held >= 0), fitted over the twin's
decode steps (llmload.analysis.twin.fit) and over a budget's rungs (llmload.analysis.budget) alike;
definition in docs/integrate.md."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def least_squares(
    columns: Sequence[Sequence[float]], y: Sequence[float]
) -> tuple[np.ndarray, np.ndarray, float]:
    """(coefficients, their standard errors, rms residual) of y on the columns."""
    a = np.column_stack([np.asarray(c, dtype=float) for c in columns])
    yv = np.asarray(y, dtype=float)
    coef, *_ = np.linalg.lstsq(a, yv, rcond=None)
    resid = yv - a @ coef
    dof = max(len(yv) - a.shape[1], 1)
    sigma2 = float(resid @ resid) / dof
    try:
        cov = sigma2 * np.linalg.inv(a.T @ a)
        se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    except np.linalg.LinAlgError:
        se = np.full(a.shape[1], math.inf)
    return coef, se, math.sqrt(float(resid @ resid) / len(yv))


def step_line(batch: Sequence[float], dur: Sequence[float]) -> tuple[tuple[float, float], float, str]:
    """(base, per_seq), rms residual, and which term was held at 0 ('' none): least squares of
    duration on batch with both terms >= 0, as the simulator needs them. When the free line's
    term is negative the constrained optimum has it at 0 (one active bound of a two-term fit): a
    step nearly proportional to batch (a compute-bound CPU server) reads a base of a few ms
    below 0 by noise."""
    (base, per_seq), _, rms = least_squares([[1.0] * len(dur), batch], dur)
    if base < 0:
        (per_seq,), _, rms = least_squares([batch], dur)
        return (0.0, float(per_seq)), rms, f"base_ms (free fit {base:.2f})"
    if per_seq < 0:
        (base,), _, rms = least_squares([[1.0] * len(dur)], dur)
        return (float(base), 0.0), rms, f"per_seq_ms (free fit {per_seq:.3f})"
    return (float(base), float(per_seq)), rms, ""
