"""Trace frames: the trace file format (docs/architecture.md) as a pandas frame, checked and
summarized.

Contract. A trace frame has one row per (timestamp, node, gpu) with the columns
``TRACE_COLUMNS`` and optionally ``OPTIONAL_COLUMNS``. ``validate_trace_frame`` checks it
and returns clean dtypes, raising ``TraceFormatError`` with a one-line message that names
the first bad column and row; ``summarize_samples`` turns a valid frame into one
``NodeSummary`` per node (``NodeSummary.from_samples``), optionally keeping only each node's
last ``window_seconds``. pandas is imported when a frame is read, not with this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel.sketch import DEFAULT_MAX_STATES, DEFAULT_STEP_GIB
from gleaner.perfmodel.summary import FloatArray, IntArray, NodeSummary, TraceFormatError

if TYPE_CHECKING:
    import pandas as pd

TRACE_COLUMNS = ("timestamp", "node", "gpu", "online_busy", "free_memory_gib")
OPTIONAL_COLUMNS = ("offline_enabled",)
MAX_GPU_INDEX = 15


def _column_error(frame: pd.DataFrame, name: str, bad: npt.NDArray[np.bool_], what: str) -> str:
    row = int(np.flatnonzero(bad)[0])
    value = frame[name].iloc[row]
    return f"column {name!r} {what} (row {row + 1}: {value!r})"


def validate_trace_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Check a trace frame (docs/architecture.md); return it with clean dtypes, or raise."""
    import pandas as pd

    missing = [c for c in TRACE_COLUMNS if c not in frame.columns]
    if missing:
        raise TraceFormatError(
            f"missing column(s) {', '.join(missing)}; a trace needs "
            f"{', '.join(TRACE_COLUMNS)} and optionally offline_enabled"
        )
    if len(frame) == 0:
        raise TraceFormatError("the trace has no samples")
    out = pd.DataFrame({"node": frame["node"].astype(str)})
    if frame["node"].isna().any():
        bad = frame["node"].isna().to_numpy()
        raise TraceFormatError(_column_error(frame, "node", bad, "must name a node"))
    numeric = ["timestamp", "gpu", "online_busy", "free_memory_gib"]
    if "offline_enabled" in frame.columns:
        numeric.append("offline_enabled")
    for name in numeric:
        col = pd.to_numeric(frame[name], errors="coerce").astype("float64")
        bad = ~np.isfinite(col.to_numpy())
        if bad.any():
            raise TraceFormatError(_column_error(frame, name, bad, "must be a finite number"))
        out[name] = col
    gpu = out["gpu"].to_numpy()
    bad = (gpu != np.round(gpu)) | (gpu < 0) | (gpu > MAX_GPU_INDEX)
    if bad.any():
        raise TraceFormatError(
            _column_error(frame, "gpu", bad, f"must be an integer 0..{MAX_GPU_INDEX}")
        )
    out["gpu"] = out["gpu"].astype("int64")
    for name in ("online_busy", "offline_enabled"):
        if name in out:
            v = out[name].to_numpy()
            bad = (v < 0) | (v > 1)
            if bad.any():
                raise TraceFormatError(_column_error(frame, name, bad, "must be within 0..1"))
    bad = out["free_memory_gib"].to_numpy() < 0
    if bad.any():
        raise TraceFormatError(_column_error(frame, "free_memory_gib", bad, "must be >= 0"))
    return out


def _scatter(values: npt.ArrayLike, cell: IntArray, shape: tuple[int, int]) -> FloatArray:
    m = np.empty(shape[0] * shape[1])
    m[cell] = np.asarray(values, dtype=np.float64)
    return m.reshape(shape)


def summarize_samples(
    frame: pd.DataFrame,
    step_gib: float = DEFAULT_STEP_GIB,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    sample_seconds: float | None = None,
    window_seconds: float | None = None,
) -> dict[str, NodeSummary]:
    """Summarize a trace frame (one row per timestamp, node, gpu) per node.

    ``window_seconds`` keeps only each node's last that many seconds of samples. Every
    node's samples must be aligned: each timestamp has exactly one row per GPU of that
    node (TraceFormatError names the first gap or duplicate). The memory sketch's error
    bound is documented in ``gleaner.perfmodel.sketch``.
    """
    df = validate_trace_frame(frame)
    has_enabled = "offline_enabled" in df.columns
    out: dict[str, NodeSummary] = {}
    for node, sub in df.groupby("node", sort=True):
        name = str(node)
        ts_all = sub["timestamp"].to_numpy()
        if window_seconds is not None:
            keep = ts_all > ts_all.max() - float(window_seconds)
            sub = sub[keep]
            ts_all = ts_all[keep]
        times, t_inv = np.unique(ts_all, return_inverse=True)
        gpus, g_inv = np.unique(sub["gpu"].to_numpy(), return_inverse=True)
        n_t, n_g = times.size, gpus.size
        cell = t_inv.ravel() * n_g + g_inv.ravel()
        counts = np.bincount(cell, minlength=n_t * n_g)
        if np.any(counts != 1):
            c = int(np.flatnonzero(counts != 1)[0])
            t, gi = times[c // n_g], int(gpus[c % n_g])
            what = "has duplicate samples" if counts[c] > 1 else "has no sample"
            raise TraceFormatError(
                f"node {name}: GPU {gi} {what} at timestamp {t:g} "
                "(samples of one node must be aligned: one row per GPU per timestamp)"
            )

        def matrix(column: str) -> FloatArray:
            return _scatter(sub[column].to_numpy(), cell, (n_t, n_g))  # noqa: B023 - used at once

        out[name] = NodeSummary.from_samples(
            name,
            [int(g) for g in gpus],
            times,
            matrix("online_busy"),
            matrix("free_memory_gib"),
            matrix("offline_enabled") if has_enabled else None,
            sample_seconds=sample_seconds,
            step_gib=step_gib,
            max_states=max_states,
        )
    return out
