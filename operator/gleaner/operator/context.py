"""What every handler shares at run time: config, API client, metrics, locks, the kick.

Contract: one ``OperatorContext`` per operator process, handed to kopf as
``memo=kopf.Memo(ctx=context)`` so every handler reads ``memo.ctx``. It holds no cluster
state of its own: the API server is the only store (what it keeps of jobs, Pods and
NodeTraces are copies from watches and lists, rebuilt on start), so a restarted operator
converges from what it finds. What it does hold:

- ``job_lock(ns, name)``: serializes this process's read-modify-write of one job's status
  (the scheduling pass, the Pod follower and the SLA monitor may race on the same job);
- ``scheduling_lock``: one scheduling pass at a time, so concurrent placements never pick
  the same GPU;
- ``kick()``: asks the scheduling loop for a pass. Only kopf handlers kick, and kopf pauses
  them while a higher-priority peer is active, so a standby replica never schedules;
- ``client`` (the API server) and ``prometheus`` (with ``--prometheus-url``): the
  connections of ``gleaner.clients``, opened once per process;
- ``nodes``: labels and availability of Kubernetes Nodes (``gleaner.operator.nodes``), a
  cache of the API server's Nodes kept current by a kopf watch (rebuilt on restart);
- ``uninstrumented``: the uninstrumented GPUs the last pass reported in Events, so that a
  GPU is reported when it turns uninstrumented, not every pass (a restarted operator
  reports the current ones once more).
- ``traces``: the NodeTraces as the NodeTrace watch delivered them
  (``gleaner.operator.tracecache``), read by the SLA monitor instead of a GET per tick.
- ``bias``: the learned observed/predicted ratios (``gleaner.scheduler.bias``), fed by the
  SLA monitor and read by every scheduling pass; a copy of the ConfigMap ``gleaner-bias``
  (loaded at start and when a standby replica becomes active, written back by
  ``bias_clock``'s rule: ``gleaner.operator.handlers.bias``).
- ``binding``: the jobs whose placement (or Unschedulable reason: ``None``) a pass decided
  and handed to background binding (``handlers.scheduling``), until the placement's Pod
  exists and its status write is done (``unrecorded``: what that write is to record,
  ``handlers.binding``); the next pass may start meanwhile, counts these placements' GPUs
  as taken and leaves these jobs alone. ``bind_slots`` bounds the writes in flight across all
  passes; ``bind_tasks`` are the background bindings, cancelled with the loop.
- ``watched_jobs``, ``watched_pods``, ``watched_traces``: the OfflineJobs, the offline Pods
  and the NodeTraces as the watches last delivered them, and as the operator's own writes
  returned them (``gleaner.operator.objectcache``): what a scheduling pass decides from,
  instead of listing them every pass. The loop lists each once before its first pass, after
  a standby spell and every ``CACHE_RESYNC_SECONDS``, and merges the list in.
- ``running``: the Running jobs as the OfflineJob watch last delivered them (``keep_job``),
  which the SLA monitor and the batch-progress loop tick over (``handlers.running``)
  instead of a kopf timer per job. A copy for choosing whom to observe; every write is
  still judged on the job as the API server holds it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gleaner.api import Placement
from gleaner.clients.kube import KubeClient
from gleaner.clients.prometheus import PrometheusClient
from gleaner.operator.bias import PersistClock
from gleaner.operator.config import OperatorConfig
from gleaner.operator.http import Health
from gleaner.operator.metrics import OperatorMetrics
from gleaner.operator.nodes import NodeCache
from gleaner.operator.objectcache import ObjectCache
from gleaner.operator.tracecache import HistoryCache, TraceCache
from gleaner.operator.traces import HourProfiles
from gleaner.operator.unrecorded import Unrecorded
from gleaner.perfmodel.summary import NodeSummary
from gleaner.scheduler.bias import BiasTable

logger = logging.getLogger("gleaner.operator")

BIND_CONCURRENCY = 32
"""Status writes and Pod creations of placements in flight at once, across all passes."""

CACHE_RESYNC_SECONDS = 300.0
"""Seconds between two full lists merged into the watched jobs, Pods and NodeTraces (what a
watch that re-listed after a 410 did not report as deleted goes then)."""


@dataclass
class OperatorContext:
    config: OperatorConfig
    client: KubeClient
    metrics: OperatorMetrics
    health: Health
    _kick: asyncio.Event = field(default_factory=asyncio.Event)
    _job_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    scheduling_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    loop_task: asyncio.Task[None] | None = None
    side_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    """The loops over Running jobs (SLA monitor, batch progress), cancelled at cleanup."""
    kick_reasons: set[str] = field(default_factory=set)
    binding: dict[tuple[str, str], Placement | None] = field(default_factory=dict)
    unrecorded: dict[tuple[str, str], Unrecorded] = field(default_factory=dict)
    bind_slots: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(BIND_CONCURRENCY)
    )
    bind_tasks: set[asyncio.Task[None]] = field(default_factory=set)
    nodes: NodeCache = field(default_factory=NodeCache)
    uninstrumented: dict[str, dict[int, str]] = field(default_factory=dict)
    traces: TraceCache = field(default_factory=TraceCache)
    histories: HistoryCache = field(default_factory=HistoryCache)
    """Each node's NodeHistory status (hours of the day), as the NodeHistory watch
    delivered it."""
    hours: HourProfiles = field(default_factory=HourProfiles)
    """Each node's parsed hours of the day, kept until they change."""
    judged: tuple[datetime, Mapping[str, NodeSummary]] | None = None
    """When the last scheduling pass ran and the node summaries it judged placements by
    (on a node with hours, its admission bound): the dashboard scores a job's other nodes
    with them. Replaced whole by each pass, never changed in place (the dashboard reads it
    from its own thread)."""
    prometheus: PrometheusClient | None = None
    """The SLA monitor's Prometheus (``--prometheus-url``); None: it reads NodeTraces."""
    bias: BiasTable = field(default_factory=BiasTable)
    bias_clock: PersistClock = field(default_factory=lambda: PersistClock(60.0))
    bias_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while the table is loaded or written (a load must not race a write)."""
    running: dict[str, dict[str, Any]] = field(default_factory=dict)
    """namespace/name -> the body of each Running job, as the watch delivered it."""
    watched_jobs: ObjectCache = field(default_factory=ObjectCache)
    watched_pods: ObjectCache = field(default_factory=ObjectCache)
    """The offline Pods (label ``gleaner.dev/role=offline``)."""
    watched_traces: ObjectCache = field(default_factory=ObjectCache)

    def caches(self) -> tuple[ObjectCache, ObjectCache, ObjectCache]:
        return self.watched_jobs, self.watched_pods, self.watched_traces

    def __post_init__(self) -> None:
        self.bias = BiasTable(self.config.bias)
        self.bias_clock = PersistClock(self.config.bias_persist_interval)

    def job_lock(self, namespace: str, name: str) -> asyncio.Lock:
        key = f"{namespace}/{name}"
        lock = self._job_locks.get(key)
        if lock is None:
            lock = self._job_locks[key] = asyncio.Lock()
        return lock

    def keep_job(self, body: dict[str, Any], *, gone: bool = False) -> None:
        """Keep ``body`` in ``running`` while its phase is Running (``gone``: deleted)."""
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        phase = (body.get("status") or {}).get("phase")
        if gone or meta.get("deletionTimestamp") or phase != "Running":
            self.running.pop(key, None)
        else:
            self.running[key] = body

    def forget_job(self, namespace: str, name: str) -> None:
        if self.unrecorded.pop((namespace, name), None) is not None:
            self.binding.pop((namespace, name), None)
        self.running.pop(f"{namespace}/{name}", None)
        lock = self._job_locks.get(f"{namespace}/{name}")
        if lock is not None and not lock.locked():
            del self._job_locks[f"{namespace}/{name}"]

    def kick(self, reason: str) -> None:
        """Request a scheduling pass (coalesced: many kicks, one pass)."""
        self.kick_reasons.add(reason)
        self._kick.set()

    async def wait_for_kick(self, wait_seconds: float | None) -> set[str]:
        """Reasons of the kicks since the last call; empty when ``wait_seconds`` passed first."""
        try:
            await asyncio.wait_for(self._kick.wait(), wait_seconds)
        except TimeoutError:
            return set()
        self._kick.clear()
        reasons, self.kick_reasons = self.kick_reasons, set()
        return reasons
