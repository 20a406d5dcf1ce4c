"""NVIDIA DCGM exporter series as a trace: the one rule from GPU metrics to trace rows.

Contract. :func:`dcgm_nodes` puts per-GPU DCGM exporter series on one grid in the trace
file format's units (docs/formats.md), per node; :func:`dcgm_trace_frame` writes them as the
rows every trace reader checks and summarizes (``gleaner.perfmodel.frames``). The operator's
Prometheus source (live range queries) summarizes :func:`dcgm_nodes` directly and the
trace-file reader (saved Prometheus answers, :func:`read_dcgm_text`) goes through the rows,
so a saved file and a live query of the same data give the same node summaries.

The metrics, in dcgm-exporter's units:

- ``DCGM_FI_DEV_GPU_UTIL`` (percent, 0..100): ``online_busy`` = util / 100, clipped to 0..1;
- ``DCGM_FI_DEV_FB_FREE`` (MiB): ``free_memory_gib`` = free / 1024, at least 0;
- ``DCGM_FI_DEV_FB_USED`` (MiB, optional): ``gpu_memory_gib`` = the GPU's largest
  (free + used) / 1024 over the series; without it the GPU's memory is unknown.

A series' node is its ``Hostname`` label (dcgm-exporter's), else ``node``,
``kubernetes_node`` or ``instance``; its GPU is the ``gpu`` label (the index); ``UUID`` and
``modelName`` become ``gpu_uuid`` and ``gpu_product``. Series of one metric and GPU (e.g.
before and after the exporter's Pod restarted, with another ``pod`` label) are merged.

Alignment. Every GPU's series are put on one step grid: the given step, else the median
gap between samples. At each grid time a series has its latest sample no older than
``lookback_seconds`` (Prometheus' staleness rule, 5 minutes by default). With
``on_gap="error"`` (files) the grid spans the whole file and a series that cannot fill a
grid time, a GPU without ``DCGM_FI_DEV_FB_FREE`` or ``DCGM_FI_DEV_GPU_UTIL``, or a series
without node or GPU labels is a ``TraceFormatError`` naming the series; with
``on_gap="drop"`` (live queries, where one bad exporter must not hide the others) such
series are skipped and a node keeps only the grid times all its series fill.

:func:`read_dcgm_text` reads what a user saves from Prometheus: the JSON answer of
``/api/v1/query_range`` (a ``matrix``; several answers may follow each other in one file),
or the text exposition format with timestamps (``/federate``, ``promtool tsdb dump``, or
repeated scrapes of dcgm-exporter's ``/metrics`` saved with their times), or OpenMetrics
text (``promtool tsdb dump-openmetrics``; it ends with ``# EOF``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from gleaner.perfmodel.summary import FloatArray, GpuSpec, TraceFormatError

if TYPE_CHECKING:
    import pandas as pd

DCGM_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_FREE = "DCGM_FI_DEV_FB_FREE"
DCGM_USED = "DCGM_FI_DEV_FB_USED"
DCGM_METRICS = (DCGM_UTIL, DCGM_FREE, DCGM_USED)
DCGM_NODE_LABELS = ("Hostname", "node", "kubernetes_node", "instance")
MIB_PER_GIB = 1024.0
DEFAULT_LOOKBACK_SECONDS = 300.0
"""Prometheus' default staleness: a sample stands for its series this long."""
TIME_TOLERANCE = 1e-3
"""Seconds: a sample this close after a grid time still counts for it (float rounding)."""

GapRule = Literal["error", "drop"]


@dataclass(frozen=True)
class MetricSeries:
    """One time series: metric name, labels, sample times (epoch seconds) and values."""

    metric: str
    labels: Mapping[str, str]
    times: FloatArray
    values: FloatArray

    def node(self) -> str | None:
        return next((self.labels[k] for k in DCGM_NODE_LABELS if self.labels.get(k)), None)

    def gpu(self) -> int | None:
        try:
            return int(self.labels["gpu"])
        except (KeyError, ValueError):
            return None

    def describe(self) -> str:
        """The series as PromQL would select it: the metric and its identifying labels."""
        keys = [k for k in (*DCGM_NODE_LABELS, "gpu") if self.labels.get(k)]
        keys = keys or sorted(self.labels)
        inner = ",".join(f'{k}="{self.labels[k]}"' for k in keys)
        return f"{self.metric}{{{inner}}}"


def series_from_results(
    results: Iterable[Mapping[str, Any]], metric: str = ""
) -> list[MetricSeries]:
    """Series from the ``result`` list of a Prometheus query answer (``values`` of a matrix,
    or the single ``value`` of a vector); ``metric`` names results without ``__name__``."""
    out = []
    for result in results:
        labels = {str(k): str(v) for k, v in (result.get("metric") or {}).items()}
        name = labels.pop("__name__", "") or metric
        rows = result.get("values") or ([result["value"]] if "value" in result else [])
        arr = np.array([[float(t), float(v)] for t, v in rows], dtype=np.float64).reshape(-1, 2)
        out.append(MetricSeries(name, labels, arr[:, 0], arr[:, 1]))
    return out


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat().replace("+00:00", "Z")


def _merge(parts: Sequence[MetricSeries]) -> MetricSeries:
    """One series from several of the same metric and GPU: samples in time order, the last
    written value kept where two share a time; NaN samples dropped."""
    times = np.concatenate([p.times for p in parts])
    values = np.concatenate([p.values for p in parts])
    ok = np.isfinite(times) & np.isfinite(values)
    times, values = times[ok], values[ok]
    order = np.argsort(times, kind="stable")
    times, values = times[order], values[order]
    keep = np.append(np.diff(times) > 0, True) if times.size else np.zeros(0, dtype=bool)
    return MetricSeries(parts[0].metric, parts[0].labels, times[keep], values[keep])


def _step(series: Iterable[MetricSeries]) -> float:
    gaps = np.concatenate([np.diff(s.times) for s in series] or [np.zeros(0)])
    gaps = gaps[gaps > TIME_TOLERANCE]
    if gaps.size == 0:
        raise TraceFormatError(
            "the DCGM series have fewer than two samples each: a trace needs samples over time"
        )
    return float(np.round(np.median(gaps), 3))


def _on_grid(s: MetricSeries, grid: FloatArray, lookback: float) -> FloatArray:
    """The series' value at each grid time: its latest sample no older than ``lookback``
    (NaN where there is none)."""
    i = np.searchsorted(s.times, grid + TIME_TOLERANCE, side="right") - 1
    out = np.full(grid.size, np.nan)
    has = i >= 0
    fresh = has.copy()
    fresh[has] = grid[has] - s.times[i[has]] <= lookback + TIME_TOLERANCE
    out[fresh] = s.values[i[fresh]]
    return out


@dataclass(frozen=True, eq=False)
class DcgmNode:
    """One node's DCGM series on the grid: trace units, times where all its GPUs have a value."""

    name: str
    gpus: tuple[GpuSpec, ...]
    times: FloatArray
    """[T] epoch seconds."""
    busy: FloatArray
    """[T, G] online busy fraction, 0..1."""
    free_gib: FloatArray
    """[T, G] free memory, GiB."""


def dcgm_nodes(
    series: Iterable[MetricSeries],
    step_seconds: float | None = None,
    *,
    on_gap: GapRule = "error",
    lookback_seconds: float = DEFAULT_LOOKBACK_SECONDS,
    skip_nodes: Iterable[str] = (),
) -> list[DcgmNode]:
    """Each node's DCGM series on one grid, in trace units; see the module docstring. In
    ``drop`` mode a node without any complete grid time is left out."""
    skipped = set(skip_nodes)
    grouped: dict[tuple[str, str, int], list[MetricSeries]] = defaultdict(list)
    for s in series:
        if s.metric not in DCGM_METRICS:
            continue
        node, gpu = s.node(), s.gpu()
        if node is None or gpu is None:
            if on_gap == "drop":
                continue
            missing = "gpu label" if node is not None else "node label (Hostname)"
            raise TraceFormatError(
                f"series {s.describe()} has no {missing}: dcgm-exporter labels each GPU's "
                f"series with Hostname and gpu ({', '.join(DCGM_NODE_LABELS)} name the node)"
            )
        if node in skipped:
            continue
        grouped[(s.metric, node, gpu)].append(s)
    merged = {key: _merge(parts) for key, parts in grouped.items()}
    gpus = sorted({(node, gpu) for _, node, gpu in merged})
    if not gpus:
        raise TraceFormatError(
            f"no DCGM series ({DCGM_UTIL} and {DCGM_FREE}, labelled with the node and GPU)"
        )
    complete: list[tuple[str, int]] = []
    for node, gpu in gpus:
        lacking = [m for m in (DCGM_UTIL, DCGM_FREE) if (m, node, gpu) not in merged]
        if not lacking:
            complete.append((node, gpu))
        elif on_gap == "error":
            have = next(merged[(m, node, gpu)] for m in DCGM_METRICS if (m, node, gpu) in merged)
            raise TraceFormatError(
                f"GPU {gpu} of node {node} has {have.describe()} but no {' or '.join(lacking)} "
                "series: a trace needs both utilisation and free memory for every GPU"
            )
    wanted = set(complete)
    used_series = [s for (m, n, g), s in merged.items() if (n, g) in wanted]
    empty = next((s for s in used_series if s.times.size == 0), None)
    if empty is not None and on_gap == "error":
        raise TraceFormatError(f"series {empty.describe()} has no samples")
    used_series = [s for s in used_series if s.times.size]
    if not used_series:
        raise TraceFormatError("the DCGM series have no samples")
    step = float(step_seconds) if step_seconds else _step(used_series)
    first = min(float(s.times[0]) for s in used_series)
    last = max(float(s.times[-1]) for s in used_series)
    n_grid = round((last - first) / step) + 1  # scrapes jitter: the nearest count of steps
    grid: FloatArray = first + step * np.arange(n_grid, dtype=np.float64)
    by_node: dict[str, list[int]] = defaultdict(list)
    for node, gpu in complete:
        by_node[node].append(gpu)
    out: list[DcgmNode] = []
    for node, node_gpus in sorted(by_node.items()):
        util: list[FloatArray] = []
        free: list[FloatArray] = []
        specs: list[GpuSpec] = []
        for gpu in node_gpus:
            for metric, into in ((DCGM_UTIL, util), (DCGM_FREE, free)):
                s = merged[(metric, node, gpu)]
                values = _on_grid(s, grid, lookback_seconds)
                if on_gap == "error" and np.isnan(values).any():
                    raise TraceFormatError(_gap_message(s, grid, values, lookback_seconds))
                into.append(values)
            f = merged[(DCGM_FREE, node, gpu)]
            labels = merged[(DCGM_UTIL, node, gpu)].labels
            specs.append(
                GpuSpec(
                    index=gpu,
                    uuid=labels.get("UUID", ""),
                    product=labels.get("modelName", ""),
                    memory_gib=_total_gib(f, merged.get((DCGM_USED, node, gpu))),
                )
            )
        busy = np.stack(util, axis=1)
        free_mib = np.stack(free, axis=1)
        keep = ~(np.isnan(busy).any(axis=1) | np.isnan(free_mib).any(axis=1))
        if not keep.any():
            continue
        out.append(
            DcgmNode(
                node,
                tuple(specs),
                grid[keep],
                np.clip(busy[keep] / 100.0, 0.0, 1.0),
                np.maximum(free_mib[keep], 0.0) / MIB_PER_GIB,
            )
        )
    if not out:
        raise TraceFormatError("the DCGM series share no sample times")
    return out


def dcgm_trace_frame(
    series: Iterable[MetricSeries],
    step_seconds: float | None = None,
    *,
    on_gap: GapRule = "error",
    lookback_seconds: float = DEFAULT_LOOKBACK_SECONDS,
    skip_nodes: Iterable[str] = (),
) -> pd.DataFrame:
    """Trace rows (docs/formats.md) of :func:`dcgm_nodes`, time-major, then node, then GPU."""
    import pandas as pd

    nodes = dcgm_nodes(
        series,
        step_seconds,
        on_gap=on_gap,
        lookback_seconds=lookback_seconds,
        skip_nodes=skip_nodes,
    )
    parts = []
    for n in nodes:
        t, g = n.times.size, len(n.gpus)

        def per_gpu(values: list[Any], t: int = t) -> Any:
            return np.tile(np.array(values, dtype=object), t)

        parts.append(
            pd.DataFrame(
                {
                    "timestamp": np.repeat(n.times, g),
                    "node": np.full(t * g, n.name, dtype=object),
                    "gpu": np.tile(np.array([s.index for s in n.gpus], dtype=np.int64), t),
                    "online_busy": n.busy.reshape(-1),
                    "free_memory_gib": n.free_gib.reshape(-1),
                    "gpu_product": per_gpu([s.product for s in n.gpus]),
                    "gpu_uuid": per_gpu([s.uuid for s in n.gpus]),
                    "gpu_memory_gib": np.tile([s.memory_gib for s in n.gpus], t),
                }
            )
        )
    frame = pd.concat(parts, ignore_index=True)
    return frame.sort_values(["timestamp", "node", "gpu"], kind="stable", ignore_index=True)


def _total_gib(free: MetricSeries, used: MetricSeries | None) -> float:
    """The GPU's memory: its largest free + used at shared sample times (0 when unknown)."""
    if used is None or free.times.size == 0 or used.times.size == 0:
        return 0.0
    common, fi, ui = np.intersect1d(
        np.round(free.times / TIME_TOLERANCE), np.round(used.times / TIME_TOLERANCE),
        return_indices=True,
    )  # fmt: skip
    if common.size == 0:
        return 0.0
    return float(np.max(free.values[fi] + used.values[ui])) / MIB_PER_GIB


def _gap_message(s: MetricSeries, grid: FloatArray, values: FloatArray, lookback: float) -> str:
    missing = np.isnan(values)
    start = int(np.flatnonzero(missing)[0])
    end = start
    while end + 1 < grid.size and missing[end + 1]:
        end += 1
    where = (
        f"at {_when(float(grid[start]))}"
        if start == end
        else f"from {_when(float(grid[start]))} to {_when(float(grid[end]))}"
    )
    return (
        f"series {s.describe()} has no sample {where} (a sample stands for "
        f"{lookback:g} s at most): save a time range every GPU's series covers"
    )


# -- saved Prometheus answers --------------------------------------------------------------


def is_dcgm_text(head: bytes) -> bool:
    """Whether a file starting with ``head`` is a saved Prometheus answer this module reads:
    JSON (``{`` or ``[``) or the text exposition format (``#`` or a metric name first)."""
    text = head.lstrip()
    if text.startswith((b"{", b"[")):
        return True
    first = text.split(b"\n", 1)[0]
    if first.startswith(b"#"):
        return True
    name = first.split(b"{", 1)[0].split(b" ", 1)[0]
    return bool(name) and name.decode("ascii", "replace") in DCGM_METRICS


def read_dcgm_text(text: str) -> list[MetricSeries]:
    """The series of a saved Prometheus answer: query_range JSON or exposition text."""
    if text.lstrip().startswith(("{", "[")):
        return _from_json(text)
    return _from_exposition(text)


def _answers(text: str) -> list[Any]:
    decoder = json.JSONDecoder()
    out: list[Any] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(
                f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from exc
        out += value if isinstance(value, list) else [value]


def _from_json(text: str) -> list[MetricSeries]:
    out: list[MetricSeries] = []
    for n, answer in enumerate(_answers(text), start=1):
        where = f"answer {n}"
        if not isinstance(answer, dict):
            raise TraceFormatError(f"{where}: not a Prometheus query answer (a JSON object)")
        if answer.get("status", "success") != "success":
            raise TraceFormatError(f"{where}: Prometheus answered an error: {answer.get('error')}")
        data = answer.get("data")
        if not isinstance(data, dict) or "result" not in data:
            raise TraceFormatError(
                f"{where}: no data.result: save the answer of /api/v1/query_range"
            )
        if data.get("resultType", "matrix") != "matrix":
            raise TraceFormatError(
                f"{where}: result type {data.get('resultType')!r}, not 'matrix': save a range "
                "query (/api/v1/query_range), not an instant query"
            )
        for i, result in enumerate(data["result"], start=1):
            if not isinstance(result, dict) or not (result.get("metric") or {}).get("__name__"):
                raise TraceFormatError(
                    f"{where}, series {i}: no __name__ label: query the DCGM metrics by name "
                    '(e.g. {__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_FREE|'
                    'DCGM_FI_DEV_FB_USED"}), not through a function'
                )
            try:
                out += series_from_results([result])
            except (TypeError, ValueError) as exc:
                raise TraceFormatError(
                    f'{where}, series {i}: values must be [time, "number"] pairs'
                ) from exc
    return out


def _from_exposition(text: str) -> list[MetricSeries]:
    """Samples of the Prometheus text format (timestamps in ms), or of OpenMetrics text
    (ends with ``# EOF``; timestamps in seconds, as ``promtool tsdb dump-openmetrics``)."""
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )
    from prometheus_client.parser import text_string_to_metric_families

    openmetrics = text.rstrip().endswith("# EOF")
    parse = openmetrics_families if openmetrics else text_string_to_metric_families

    samples: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = defaultdict(
        list
    )
    try:
        for family in parse(text):
            for sample in family.samples:
                if sample.name not in DCGM_METRICS:
                    continue
                key = (sample.name, tuple(sorted(sample.labels.items())))
                if sample.timestamp is None:
                    s = MetricSeries(sample.name, dict(key[1]), np.zeros(0), np.zeros(0))
                    raise TraceFormatError(
                        f"series {s.describe()}: a sample without a timestamp: save scrapes "
                        "with their times (e.g. from /federate or promtool tsdb dump)"
                    )
                samples[key].append((float(sample.timestamp), float(sample.value)))
    except TraceFormatError:
        raise
    except (ValueError, IndexError, KeyError) as exc:
        detail = " ".join(str(exc).split())[:160]
        raise TraceFormatError(f"not in the Prometheus text format: {detail}") from exc
    out = []
    for (metric, labels), rows in samples.items():
        arr = np.array(rows, dtype=np.float64).reshape(-1, 2)
        out.append(MetricSeries(metric, dict(labels), arr[:, 0], arr[:, 1]))
    return out
