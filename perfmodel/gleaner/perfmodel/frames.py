"""Trace frames: the trace file format (docs/architecture.md) as a pandas frame, checked and
summarized.

Contract. A trace frame has one row per (timestamp, node, gpu) with the columns
``TRACE_COLUMNS`` and optionally ``OPTIONAL_COLUMNS``. ``validate_trace_frame`` checks it
and returns clean dtypes, raising ``TraceFormatError`` with a one-line message that names
the first bad column and row (rows count from 1, the header not included) and shows the
bad value as it was written, never as a numpy repr. Timestamps are epoch seconds or ISO
8601 times (a zone-less time is UTC). ``summarize_samples`` turns a valid frame into one
``NodeSummary`` per node (``NodeSummary.from_samples``), optionally keeping only each node's
last ``window_seconds``; the optional ``gpu_product``, ``gpu_uuid`` and ``gpu_memory_gib``
columns, or a nodes file's ``NodeInfo`` (``gleaner.perfmodel.inventory``), fill in each
GPU's spec.

Free memory above the GPU's memory (``gpu_memory_gib``, else the nodes file's, else
``MAX_GPU_MEMORY_GIB``, more than any GPU has) is an error that names the likely unit: DCGM's
``DCGM_FI_DEV_FB_FREE`` is in MiB, and a MiB column read as GiB would make every job look
feasible. pandas is imported when a frame is read, not with this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel.sketch import DEFAULT_MAX_STATES, DEFAULT_STEP_GIB
from gleaner.perfmodel.summary import (
    FloatArray,
    GpuSpec,
    IntArray,
    NodeSummary,
    TraceFormatError,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd

    from gleaner.perfmodel.inventory import NodeInfo

TRACE_COLUMNS = ("timestamp", "node", "gpu", "online_busy", "free_memory_gib")
OPTIONAL_COLUMNS = ("offline_enabled", "gpu_product", "gpu_memory_gib", "gpu_uuid")
MAX_GPU_INDEX = 15
MAX_GPU_MEMORY_GIB = 512.0
"""More memory than any one GPU has (the largest have 288 GB): the bound when unknown."""
MEMORY_TOLERANCE = 1.01
"""Free memory may exceed the GPU's stated memory by this factor (rounding of the sources)."""
TIMESTAMP_FORMS = "epoch seconds or an ISO 8601 time such as 2024-06-01T12:00:00Z"


def plain(value: object) -> str:
    """A cell's value as the user wrote it: no numpy repr, strings quoted."""
    item = getattr(value, "item", None)
    if callable(item):
        value = item()
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _column_error(frame: pd.DataFrame, name: str, bad: npt.NDArray[np.bool_], what: str) -> str:
    row = int(np.flatnonzero(bad)[0])
    value = frame[name].iloc[row]
    return f"column {name!r} {what} (row {row + 1}: {plain(value)})"


def _timestamps(frame: pd.DataFrame) -> pd.Series[float]:
    """Epoch seconds from epoch seconds or ISO 8601 times (zone-less: UTC)."""
    import pandas as pd

    raw = frame["timestamp"]
    numeric = pd.to_numeric(raw, errors="coerce").astype("float64")
    text = ~np.isfinite(numeric.to_numpy()) & raw.notna().to_numpy()
    if text.any():
        parsed = pd.to_datetime(raw[text].astype(str), utc=True, errors="coerce", format="ISO8601")
        seconds = (parsed - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
        numeric = numeric.copy()
        numeric[text] = seconds.to_numpy()
    bad = ~np.isfinite(numeric.to_numpy())
    if bad.any():
        raise TraceFormatError(_column_error(frame, "timestamp", bad, f"must be {TIMESTAMP_FORMS}"))
    return numeric


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
    out["timestamp"] = _timestamps(frame)
    numeric = ["gpu", "online_busy", "free_memory_gib"]
    numeric += [c for c in ("offline_enabled", "gpu_memory_gib") if c in frame.columns]
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
    if "gpu_memory_gib" in out:
        bad = out["gpu_memory_gib"].to_numpy() < 0
        if bad.any():
            raise TraceFormatError(_column_error(frame, "gpu_memory_gib", bad, "must be >= 0"))
    for name in ("gpu_product", "gpu_uuid"):
        if name in frame.columns:
            out[name] = frame[name].fillna("").astype(str)
    # Every reader of trace files gets the unit check (summarize_samples repeats it with a
    # nodes file's GPU memory): the trace's own gpu_memory_gib, else no GPU's memory.
    stated = out["gpu_memory_gib"].to_numpy() if "gpu_memory_gib" in out else np.zeros(len(out))
    check_free_memory(out, np.where(stated > 0, stated, MAX_GPU_MEMORY_GIB), stated > 0)
    return out


def _likely_unit(value: float, memory_gib: float) -> str:
    """Which unit a free-memory value above the GPU's memory was probably written in."""
    # A unit is likely when the value is at least one GiB in it and fits the GPU in it.
    for unit, per_gib in (("MiB (DCGM's FB_FREE unit)", 1024.0), ("bytes", 1024.0**3)):
        if per_gib <= value <= per_gib * memory_gib * MEMORY_TOLERANCE:
            return f"the values look like {unit}: divide them by {per_gib:.0f}"
    return "free_memory_gib is in GiB: check the GPU memory given (gpu_memory_gib, --nodes)"


def check_free_memory(
    frame: pd.DataFrame, memory_gib: npt.NDArray[np.float64], known: npt.NDArray[np.bool_]
) -> None:
    """Raise when a row's free memory exceeds its GPU's memory (``memory_gib`` per row,
    ``known``: stated by the trace or a nodes file rather than the generic bound)."""
    free = frame["free_memory_gib"].to_numpy(dtype=np.float64)
    bad = free > memory_gib * MEMORY_TOLERANCE
    if not bad.any():
        return
    row = int(np.flatnonzero(bad)[0])
    value, memory = float(free[row]), float(memory_gib[row])
    node, gpu = frame["node"].iloc[row], int(frame["gpu"].iloc[row])
    limit = (
        f"GPU {gpu} of node {node} has {memory:g} GiB"
        if known[row]
        else f"no GPU has more than {memory:g} GiB"
    )
    raise TraceFormatError(
        f"column 'free_memory_gib' exceeds the GPU's memory (row {row + 1}: "
        f"{value:g}; {limit}); {_likely_unit(value, memory)}"
    )


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
    inventory: Mapping[str, NodeInfo] | None = None,
) -> dict[str, NodeSummary]:
    """Summarize a trace frame (one row per timestamp, node, gpu) per node.

    ``window_seconds`` keeps only each node's last that many seconds of samples. Every
    node's samples must be aligned: each timestamp has exactly one row per GPU of that
    node (TraceFormatError names the first gap or duplicate). ``inventory`` (a nodes
    file) gives labels, products and memory the frame's columns do not; free memory above
    a GPU's memory is an error (``check_free_memory``). The memory sketch's error bound is
    documented in ``gleaner.perfmodel.sketch``.
    """
    df = validate_trace_frame(frame)
    nodes = inventory or {}
    has_enabled = "offline_enabled" in df.columns
    stated = df["gpu_memory_gib"].to_numpy() if "gpu_memory_gib" in df else np.zeros(len(df))
    by_node = {n: i.gpu_memory_gib for n, i in nodes.items()}
    from_file = df["node"].map(by_node).fillna(0.0).to_numpy(dtype=np.float64)
    memory = np.where(stated > 0, stated, from_file)
    check_free_memory(df, np.where(memory > 0, memory, MAX_GPU_MEMORY_GIB), memory > 0)
    df["memory_bound"] = memory
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

        info = nodes.get(name)
        out[name] = NodeSummary.from_samples(
            name,
            _specs(sub, [int(g) for g in gpus], info),
            times,
            matrix("online_busy"),
            matrix("free_memory_gib"),
            matrix("offline_enabled") if has_enabled else None,
            sample_seconds=sample_seconds,
            step_gib=step_gib,
            max_states=max_states,
            labels=info.labels if info is not None else None,
        )
    return out


def _first_named(rows: pd.DataFrame, column: str) -> str:
    """A text column's first non-empty value ("" without the column or a value)."""
    if column not in rows:
        return ""
    named = rows[column][rows[column] != ""]
    return str(named.iloc[0]) if len(named) else ""


def _specs(sub: pd.DataFrame, gpus: list[int], info: NodeInfo | None) -> list[GpuSpec]:
    """Each GPU's spec: the trace's ``gpu_product`` and ``gpu_uuid`` (their first non-empty
    value per GPU), else the nodes file's product; the memory found for the free-memory
    check."""
    out = []
    for gpu in gpus:
        rows = sub[sub["gpu"] == gpu]
        product, uuid = _first_named(rows, "gpu_product"), _first_named(rows, "gpu_uuid")
        if not product and info is not None:
            product = info.gpu_product
        memory = float(rows["memory_bound"].max()) if len(rows) else 0.0
        out.append(GpuSpec(index=gpu, uuid=uuid, product=product, memory_gib=memory))
    return out
