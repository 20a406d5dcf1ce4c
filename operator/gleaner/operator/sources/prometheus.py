"""The operator's readings of Prometheus (through ``gleaner.clients.prometheus``): node
summaries from agent metrics, else DCGM, and the SLA monitor's per-job observation.

Contract. ``PrometheusTraceSource(url, window_seconds, step_seconds, end).load()`` returns
``{node: NodeSummary}`` for the window (end - window, end]:

- Nodes with Gleaner agent metrics (docs/architecture.md, "Metric names"): per-GPU
  ``gleaner_gpu_online_busy_seconds_total`` and ``gleaner_gpu_offline_enabled_seconds_total``,
  per-pair ``gleaner_gpu_pair_busy_{overlap,union}_seconds_total{gpu_a,gpu_b}`` are read as
  raw samples of the window (an instant query of a range selector) and reduced to their
  increase with counter resets handled and without extrapolation; the window of a node is
  the time its busy counters cover. ``gleaner_gpu_harvestable_memory_bytes`` is read with a
  range query at ``step_seconds`` into the joint memory sketch. Event counters
  (``gleaner_preemptions_total``, ``gleaner_online_requests_total``,
  ``gleaner_memory_reclaim_events_total``, ``gleaner_memory_reclaimed_bytes_total``) fill
  the per-GPU counts where they carry ``node`` and ``gpu`` labels.
- Nodes without agent metrics, when ``dcgm_fallback``: NVIDIA DCGM exporter gauges
  ``DCGM_FI_DEV_GPU_UTIL`` (percent; online busy = util / 100), ``DCGM_FI_DEV_FB_FREE`` and
  ``DCGM_FI_DEV_FB_USED`` (MiB; harvestable = free) by range query, for what-if analysis:
  no offline-enabled time, so P_compute = 1 - busy fraction. The series become trace rows
  by the same rule as a saved file (``gleaner.perfmodel.dcgm.dcgm_nodes``, with
  unusable series skipped rather than refused): the node is the ``Hostname`` label
  (dcgm-exporter's default), else ``node``, ``kubernetes_node`` or ``instance``; ``UUID``
  and ``modelName`` fill the GPU inventory.

Failures to reach Prometheus or a window without any usable series raise
``PrometheusSourceError`` with a one-line message. The arithmetic is pure and lives in
``gleaner.perfmodel`` (``series``, ``NodeSummary.from_totals``/``from_samples``).

``observe_from_prometheus(client, namespace, job, ...)`` is the SLA monitor's one query
(``gleaner.operator.observation.timeslice_query``, reduced there): the job's observed
window, None when Prometheus has no series of the job; a failed query raises
``gleaner.clients.prometheus.PrometheusError``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from gleaner.api.units import GIB
from gleaner.clients.prometheus import PrometheusClient, PrometheusError
from gleaner.operator.observation import (
    ObservedWindow,
    fraction_from_vector,
    timeslice_query,
    window_from_fraction,
)
from gleaner.perfmodel import (
    DEFAULT_MAX_STATES,
    DEFAULT_STEP_GIB,
    GpuEvents,
    NodeSummary,
    TraceFormatError,
)
from gleaner.perfmodel.dcgm import (
    DCGM_FREE,
    DCGM_USED,
    DCGM_UTIL,
    dcgm_nodes,
    series_from_results,
)
from gleaner.perfmodel.series import align_on_grid, counter_increase

BUSY = "gleaner_gpu_online_busy_seconds_total"
ENABLED = "gleaner_gpu_offline_enabled_seconds_total"
PAIR_OVERLAP = "gleaner_gpu_pair_busy_overlap_seconds_total"
PAIR_UNION = "gleaner_gpu_pair_busy_union_seconds_total"
HARVESTABLE = "gleaner_gpu_harvestable_memory_bytes"
EVENT_COUNTERS = {
    "preemptions": "gleaner_preemptions_total",
    "online_requests": "gleaner_online_requests_total",
    "reclamations": "gleaner_memory_reclaim_events_total",
    "reclaimed_bytes": "gleaner_memory_reclaimed_bytes_total",
}

Samples = tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.float64]]]


class PrometheusSourceError(PrometheusError):
    """Prometheus could not be queried, or it holds no usable series for the window."""


async def observe_from_prometheus(
    client: PrometheusClient,
    namespace: str,
    job: str,
    window_seconds: float,
    predicted_memory: float,
    now: datetime,
) -> ObservedWindow | None:
    """The job's timeslice rate over the window ending ``now`` (one instant query)."""
    result = await client.aquery(timeslice_query(namespace, job, window_seconds), now)
    fraction = fraction_from_vector(result, predicted_memory)
    if fraction is None:
        return None
    return window_from_fraction(fraction, predicted_memory, now, window_seconds)


def _samples(result: Mapping[str, Any]) -> Samples:
    rows = result.get("values") or ([result["value"]] if "value" in result else [])
    arr = np.array([[float(t), float(v)] for t, v in rows], dtype=np.float64).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


def _gpu(labels: Mapping[str, str]) -> int | None:
    try:
        return int(labels["gpu"])
    except (KeyError, ValueError):
        return None


@dataclass
class PrometheusTraceSource:
    """Summaries of the last ``window_seconds`` before ``end`` (default: now)."""

    url: str
    window_seconds: float = 3600.0
    step_seconds: float = 15.0
    end: datetime | None = None
    step_gib: float = DEFAULT_STEP_GIB
    max_states: int = DEFAULT_MAX_STATES
    dcgm_fallback: bool = True
    timeout_seconds: float = 30.0
    disable_ssl: bool = True
    retries: int = 2
    """Retries of a failed request (connection errors, 502/503/504), with backoff."""

    def _client(self) -> PrometheusClient:
        return PrometheusClient(
            self.url,
            timeout_seconds=self.timeout_seconds,
            retries=self.retries,
            disable_ssl=self.disable_ssl,
        )

    def _end(self) -> datetime:
        return self.end or datetime.now(UTC)

    def _query(self, client: PrometheusClient, promql: str) -> list[dict[str, Any]]:
        try:
            return client.query(promql, self._end())
        except PrometheusError as exc:
            raise PrometheusSourceError(str(exc)) from exc

    def _query_range(self, client: PrometheusClient, promql: str) -> list[dict[str, Any]]:
        try:
            return client.query_window(promql, self._end(), self.window_seconds, self.step_seconds)
        except PrometheusError as exc:
            raise PrometheusSourceError(str(exc)) from exc

    def _raw_window(self, client: PrometheusClient, metric: str) -> list[dict[str, Any]]:
        return self._query(client, f"{metric}[{round(self.window_seconds)}s]")

    # -- the source ----------------------------------------------------------------------

    def load(self) -> dict[str, NodeSummary]:
        client = self._client()
        out = self._load_agent(client)
        if self.dcgm_fallback:
            for name, summary in self._load_dcgm(client, skip=set(out)).items():
                out[name] = summary
        if not out:
            raise PrometheusSourceError(
                f"{self.url}: no agent ({BUSY}) or DCGM ({DCGM_UTIL}) series in the "
                f"{self.window_seconds:g}s window before {self._end().isoformat()}"
            )
        return dict(sorted(out.items()))

    def _per_gpu_counter(
        self, client: PrometheusClient, metric: str
    ) -> dict[str, dict[int, tuple[float, float]]]:
        """node -> gpu -> (increase, covered seconds); the longest series wins duplicates."""
        found: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
        for result in self._raw_window(client, metric):
            labels = result.get("metric", {})
            node, gpu = labels.get("node"), _gpu(labels)
            if not node or gpu is None:
                continue
            inc = counter_increase(*_samples(result))
            if gpu not in found[node] or inc[1] > found[node][gpu][1]:
                found[node][gpu] = inc
        return found

    def _pair_counter(
        self, client: PrometheusClient, metric: str
    ) -> dict[str, dict[tuple[int, int], float]]:
        found: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
        for result in self._raw_window(client, metric):
            labels = result.get("metric", {})
            node = labels.get("node")
            try:
                a, b = int(labels["gpu_a"]), int(labels["gpu_b"])
            except (KeyError, ValueError):
                continue
            if not node or a == b:
                continue
            found[node][(min(a, b), max(a, b))] = counter_increase(*_samples(result))[0]
        return found

    def _load_agent(self, client: PrometheusClient) -> dict[str, NodeSummary]:
        busy = self._per_gpu_counter(client, BUSY)
        if not busy:
            return {}
        enabled = self._per_gpu_counter(client, ENABLED)
        overlap = self._pair_counter(client, PAIR_OVERLAP)
        union = self._pair_counter(client, PAIR_UNION)
        events = {k: self._per_gpu_counter(client, m) for k, m in EVENT_COUNTERS.items()}
        memory: dict[str, dict[int, Samples]] = defaultdict(dict)
        for result in self._query_range(client, HARVESTABLE):
            labels = result.get("metric", {})
            node, gpu = labels.get("node"), _gpu(labels)
            if node and gpu is not None:
                memory[node][gpu] = _samples(result)
        out: dict[str, NodeSummary] = {}
        for node, per_gpu in busy.items():
            gpus = sorted(per_gpu)
            window = max(per_gpu[g][1] for g in gpus)
            if window <= 0:
                continue
            node_enabled = enabled.get(node, {})
            has_enabled = all(g in node_enabled for g in gpus)
            n = len(gpus)
            ov = np.full((n, n), np.nan)
            un = np.full((n, n), np.nan)
            for i, a in enumerate(gpus):
                for j, b in enumerate(gpus):
                    if (a, b) in overlap.get(node, {}) and (a, b) in union.get(node, {}):
                        ov[i, j] = ov[j, i] = overlap[node][(a, b)]
                        un[i, j] = un[j, i] = union[node][(a, b)]
            node_mem = memory.get(node, {})
            if all(g in node_mem for g in gpus):
                _, mem = align_on_grid([node_mem[g] for g in gpus])
                mem = mem / GIB
            else:
                mem = np.zeros((0, n))
            summary = NodeSummary.from_totals(
                node,
                gpus,
                window,
                [per_gpu[g][0] for g in gpus],
                [node_enabled[g][0] for g in gpus] if has_enabled else None,
                ov,
                un,
                mem,
                self.step_seconds,
                step_gib=self.step_gib,
                max_states=self.max_states,
                window_end=self._end(),
            )
            counts = {
                k: np.array(
                    [round(v.get(node, {}).get(g, (0.0, 0.0))[0]) for g in gpus], dtype=np.int64
                )
                for k, v in events.items()
            }
            out[node] = replace(
                summary,
                events=GpuEvents(
                    preemptions=counts["preemptions"],
                    online_requests=counts["online_requests"],
                    max_preemptions_per_request=np.zeros(n, dtype=np.int64),
                    reclamations=counts["reclamations"],
                    reclaimed_bytes=counts["reclaimed_bytes"],
                ),
            )
        return out

    def _load_dcgm(self, client: PrometheusClient, skip: Iterable[str]) -> dict[str, NodeSummary]:
        series = [
            s
            for metric in (DCGM_UTIL, DCGM_FREE, DCGM_USED)
            for s in series_from_results(self._query_range(client, metric), metric)
        ]
        try:
            nodes = dcgm_nodes(series, self.step_seconds, on_gap="drop", skip_nodes=skip)
        except TraceFormatError:  # no usable DCGM series in the window
            return {}
        return {
            n.name: NodeSummary.from_samples(
                n.name,
                list(n.gpus),
                n.times,
                n.busy,
                n.free_gib,
                None,
                sample_seconds=self.step_seconds,
                step_gib=self.step_gib,
                max_states=self.max_states,
            )
            for n in nodes
        }
