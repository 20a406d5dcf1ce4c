"""Pure helpers that turn metric time series (e.g. from Prometheus) into model inputs.

Contract. ``counter_increase`` is a counter's increase over its raw samples with resets
handled as Prometheus does (a drop means the counter restarted from zero), and the
seconds those samples cover; no extrapolation, so ratios of two counters scraped
together are exact. ``align_on_grid`` puts several series sampled on a common step grid
(what a range query returns) into one [T, n] matrix, keeping only grid times where every
series has a value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def counter_increase(times: npt.ArrayLike, values: npt.ArrayLike) -> tuple[float, float]:
    """(increase, covered seconds) of a counter's samples; (0, 0) for fewer than two."""
    t = np.asarray(times, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if t.size < 2:
        return 0.0, 0.0
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    deltas = np.diff(v)
    # After a reset the counter restarted at 0, so the whole new value is increase.
    increase = float(np.where(deltas >= 0, deltas, v[1:]).sum())
    return increase, float(t[-1] - t[0])


def align_on_grid(
    series: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]], resolution: float = 1e-3
) -> tuple[FloatArray, FloatArray]:
    """(grid times [T], values [T, n]) at the times every one of ``series`` has a sample.

    Times are matched after rounding to ``resolution`` seconds; NaN values count as missing.
    """
    if not series:
        return np.zeros(0), np.zeros((0, 0))
    cleaned: list[tuple[npt.NDArray[np.int64], FloatArray]] = []
    for times, values in series:
        t = np.asarray(times, dtype=np.float64).reshape(-1)
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if t.shape != v.shape:
            raise ValueError("a series needs as many values as times")
        ok = np.isfinite(v) & np.isfinite(t)
        keys, first = np.unique(np.round(t[ok] / resolution).astype(np.int64), return_index=True)
        cleaned.append((keys, v[ok][first]))
    grid = cleaned[0][0]
    for keys, _ in cleaned[1:]:
        grid = np.intersect1d(grid, keys, assume_unique=True)
    columns = [vals[np.searchsorted(keys, grid)] for keys, vals in cleaned]
    matrix = np.stack(columns, axis=1) if grid.size else np.zeros((0, len(series)))
    return grid.astype(np.float64) * resolution, np.asarray(matrix, dtype=np.float64)
