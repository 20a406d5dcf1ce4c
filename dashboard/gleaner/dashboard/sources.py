"""Where the dashboard's data comes from: a snapshot file or a live cluster (thin shells).

Contract. A :class:`DashboardSource` answers ``data()`` with the current
:class:`~gleaner.dashboard.build.DashboardData`; both implementations hand the pure
:func:`~gleaner.dashboard.build.build_dashboard` a :class:`ClusterRecord` and keep the
result until it is stale.

- :class:`SnapshotSource` reads a JSON file: a ``ClusterRecord`` (what ``gleaner simulate``
  writes as ``dashboard.json``) or a ready ``ClusterSnapshot``. It re-reads the file when
  its modification time changes. A missing or malformed file raises :class:`SourceError`
  with one line that names the file.
- :class:`KubeSource` lists NodeTraces, OfflineJobs (all namespaces, or one), the
  ConfigMaps named by ``spec.profileFrom`` and the SLA eviction-report ConfigMaps
  (``EVICTION_REPORT_SELECTOR``, key ``REPORT_KEY``, both of ``gleaner.api.contract``)
  through ``gleaner.clients.kube`` (its synchronous client), at most once per
  ``ttl_seconds``. The cluster keeps no history of the dashboard's series, so the source
  appends one point per refresh to a bounded in-memory history (the plots of a freshly
  started operator are short). Each job's observed windows are kept the same way
  (``merge_job_series``): the operator clears a job's window annotation when it evicts
  it, and the job page still shows the evicted placement's throughput. With a
  ``state_namespace`` it also reads the operator's bias table there (``BIAS_CONFIGMAP``)
  and records its ``admission`` settings, so a job's runner-up nodes are judged as the
  operator's scheduler judges them. In the operator, ``judged`` also hands it the node
  summaries of the operator's last scheduling pass: when that pass is at most
  ``JUDGED_MAX_AGE_S`` old, other nodes are scored on those (on a node that reports its hours
  of the day, its admission bound over the coming hours, not its latest window). A failed
  refresh serves the last good data with a warning; with none, it raises
  :class:`SourceError`.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml
from pydantic import ValidationError

from gleaner.api.contract import (
    BIAS_CONFIGMAP,
    EVICTION_REPORT_SELECTOR,
    REPORT_KEY,
    is_eviction_report,
)
from gleaner.clients.kube import (
    Credentials,
    KubeConfigError,
    KubeError,
    SyncKubeClient,
    configmaps_path,
    nodetraces_path,
    offlinejobs_path,
)
from gleaner.dashboard.build import (
    DashboardData,
    build_dashboard,
    merge_job_series,
    period_figures,
    series_with_point,
)
from gleaner.dashboard.model import (
    AdmissionSettings,
    ClusterRecord,
    ClusterSeries,
    ClusterSnapshot,
    Point,
    RecordedReport,
    SlaMonitorSettings,
)
from gleaner.perfmodel.summary import NodeSummary

JudgedNodes = tuple[datetime, Mapping[str, NodeSummary]]
"""When a scheduling pass ran, and the node summaries it judged placements by."""
JUDGED_MAX_AGE_S = 120.0
"""A scheduling pass older than this is not used: no job has waited since, and the nodes'
latest windows are then the better guide."""


class SourceError(Exception):
    """The source cannot produce data; the message is one line for the user."""


@runtime_checkable
class DashboardSource(Protocol):
    """Anything that yields the dashboard's current data."""

    def data(self) -> DashboardData: ...


class StaticSource:
    """Fixed data (tests, and ``gleaner simulate --serve`` right after a run)."""

    def __init__(self, data: DashboardData) -> None:
        self._data = data

    @classmethod
    def from_record(cls, record: ClusterRecord) -> StaticSource:
        return cls(build_dashboard(record))

    def data(self) -> DashboardData:
        return self._data


def load_document(text: str, where: str = "snapshot") -> DashboardData:
    """Parse a ``ClusterRecord`` or ``ClusterSnapshot`` JSON document."""
    try:
        raw: Any = json.loads(text)
    except ValueError as exc:
        raise SourceError(f"{where}: not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise SourceError(f"{where}: expected a JSON object")
    kind = raw.get("kind")
    try:
        if kind == "ClusterRecord":
            return build_dashboard(ClusterRecord.model_validate(raw))
        if kind == "ClusterSnapshot":
            return DashboardData(snapshot=ClusterSnapshot.model_validate(raw))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise SourceError(f"{where}: {loc}: {err['msg']}") from exc
    raise SourceError(f"{where}: kind must be ClusterRecord or ClusterSnapshot, got {kind!r}")


class SnapshotSource:
    """A JSON file (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._mtime: float | None = None
        self._data: DashboardData | None = None
        self.data()  # fail early, with the file's name

    def data(self) -> DashboardData:
        with self._lock:
            try:
                mtime = self.path.stat().st_mtime
            except OSError as exc:
                if self._data is not None:
                    return self._data
                raise SourceError(f"{self.path}: {exc.strerror or exc}") from exc
            if self._data is None or mtime != self._mtime:
                try:
                    text = self.path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    raise SourceError(f"{self.path}: cannot read ({exc})") from exc
                self._data = load_document(text, str(self.path))
                self._mtime = mtime
            return self._data


def _load_client() -> SyncKubeClient:
    """A client from the in-cluster service account, else KUBECONFIG."""
    return SyncKubeClient(Credentials.load())


class KubeSource:
    """A live cluster through ``gleaner.clients.kube`` (see the module docstring)."""

    def __init__(
        self,
        client: SyncKubeClient | Callable[[], SyncKubeClient] | None = None,
        *,
        namespace: str | None = None,
        ttl_seconds: float = 15.0,
        max_points: int = 2880,
        title: str = "",
        clock: Callable[[], float] = time.time,
        sla_monitor: SlaMonitorSettings | None = None,
        state_namespace: str | None = None,
        admission: AdmissionSettings | None = None,
        judged: Callable[[], JudgedNodes | None] | None = None,
    ) -> None:
        self._client_or_factory = client if client is not None else _load_client
        self._client: SyncKubeClient | None = None
        self.namespace = namespace
        self.ttl_seconds = ttl_seconds
        self.max_points = max_points
        self.title = title
        self.clock = clock
        self.sla_monitor = sla_monitor
        """The operator's SLA monitor settings (None: its defaults): windows are judged so."""
        self.state_namespace = state_namespace
        """Where the operator keeps its bias table (None: not read, no correction shown)."""
        self.admission = admission
        """The operator's admission settings (None: its defaults)."""
        self.judged = judged
        """The operator's last scheduling pass (None: no operator in this process)."""
        self._lock = threading.Lock()
        self._data: DashboardData | None = None
        self._fetched_at = float("-inf")
        self._series = ClusterSeries()
        self._job_series: dict[str, list[Point]] = {}

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: str | None, context: str | None = None, **kwargs: Any
    ) -> KubeSource:
        """Bound to a kubeconfig file (and context); raises SourceError if it is unusable."""
        try:
            client = SyncKubeClient.from_config(kubeconfig, context, in_cluster=False)
        except KubeConfigError as exc:
            raise SourceError(f"kubeconfig {kubeconfig or '(default)'}: {exc}") from exc
        return cls(client, **kwargs)

    def _api(self) -> SyncKubeClient:
        if self._client is None:
            target = self._client_or_factory
            self._client = target if isinstance(target, SyncKubeClient) else target()
        return self._client

    def record(self) -> ClusterRecord:
        """One read of the cluster (no history attached)."""
        client = self._api()
        traces = client.list(nodetraces_path())
        job_items = client.list(offlinejobs_path(self.namespace))
        cms = client.list(configmaps_path(self.namespace), label_selector=EVICTION_REPORT_SELECTOR)
        reports: list[RecordedReport] = []
        for cm in cms:
            meta = cm.get("metadata") or {}
            if not is_eviction_report(meta.get("labels")):
                continue
            raw = str((cm.get("data") or {}).get(REPORT_KEY, ""))
            try:
                report = json.loads(raw)
            except ValueError:
                report = {"unreadable": raw[:80]}
            if not isinstance(report, dict):
                report = {"unreadable": str(report)[:80]}
            reports.append(
                RecordedReport(
                    namespace=meta.get("namespace") or "default",
                    config_map=meta.get("name"),
                    report=report,
                )
            )
        profiles: dict[str, dict[str, Any]] = {}
        for job in job_items:
            meta, spec = job.get("metadata") or {}, job.get("spec") or {}
            ref = spec.get("profileFrom")
            if not isinstance(ref, dict) or spec.get("profile"):
                continue
            ns = meta.get("namespace") or "default"
            try:
                found = client.get(configmaps_path(ns, str(ref.get("name"))))
                if found is None:
                    continue
                data = found.get("data") or {}
                parsed = yaml.safe_load(data.get(ref.get("key") or "profile.yaml", ""))
            except (KubeError, yaml.YAMLError):
                continue
            if isinstance(parsed, dict):
                profiles[f"{ns}/{meta.get('name')}"] = parsed
        bias = None
        if self.state_namespace:
            # Unreadable (not granted, say): other nodes are judged without the corrections.
            with contextlib.suppress(KubeError):
                bias = client.get(configmaps_path(self.state_namespace, BIAS_CONFIGMAP))
        return ClusterRecord(
            generated_at=datetime.fromtimestamp(self.clock(), tz=UTC),
            source="cluster",
            title=self.title,
            node_traces=traces,
            offline_jobs=job_items,
            profiles=profiles,
            eviction_reports=reports,
            sla_monitor=self.sla_monitor,
            bias=bias,
            admission=self.admission,
        )

    def data(self) -> DashboardData:
        with self._lock:
            now = self.clock()
            if self._data is not None and now - self._fetched_at < self.ttl_seconds:
                return self._data
            try:
                record = self.record()
            except Exception as exc:  # API errors, connection errors: keep serving
                line = f"cannot read the cluster: {str(exc).splitlines()[0] if str(exc) else exc!r}"
                if self._data is None:
                    raise SourceError(line) from exc
                snap = self._data.snapshot
                if line not in snap.warnings:
                    snap.warnings.append(line)
                return self._data
            record.series = self._series
            self._job_series = merge_job_series(
                self._job_series, record.offline_jobs, self.max_points
            )
            record.job_series = dict(self._job_series)
            data = build_dashboard(record)
            data.summaries = self._judged_summaries(data.summaries, now)
            self._series = _bounded(
                series_with_point(self._series, now, data.snapshot.summary), self.max_points
            )
            data.snapshot.series = self._series
            data.snapshot.summary.period = period_figures(self._series)
            self._data = data
            self._fetched_at = now
            return data

    def _judged_summaries(
        self, latest: dict[str, NodeSummary], now: float
    ) -> dict[str, NodeSummary]:
        """``latest`` with each node the operator's last scheduling pass judged replaced by
        what it judged by, when that pass is recent (the module docstring)."""
        pass_ = None if self.judged is None else self.judged()
        if pass_ is None:
            return latest
        at, nodes = pass_
        if now - at.timestamp() > JUDGED_MAX_AGE_S:
            return latest
        return {name: nodes.get(name, summary) for name, summary in latest.items()}


def _bounded(series: ClusterSeries, n: int) -> ClusterSeries:
    def tail(points: list[Point]) -> list[Point]:
        return points[-n:]

    return ClusterSeries(
        harvested_utilization=tail(series.harvested_utilization),
        offline_throughput=tail(series.offline_throughput),
        sla_attainment=tail(series.sla_attainment),
        preemptions=tail(series.preemptions),
        reclamations=tail(series.reclamations),
    )
