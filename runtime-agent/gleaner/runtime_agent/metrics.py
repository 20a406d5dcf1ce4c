"""Prometheus metrics of the agent: a custom collector over the NodeAgent's state.

Contract. :class:`AgentCollector` yields, at each scrape, the metric families of docs/agent.md
("Metrics") from the cumulative :class:`~gleaner.runtime_agent.policy.Accounting`
totals and the per-GPU policies of a :class:`~gleaner.runtime_agent.core.NodeAgent`. It holds
no counters of its own: the accounting is the single source, so a scrape can never
disagree with a NodeTrace report. ``refresh`` is called first (the daemon brings the
agent's time up to now there).
Per-GPU families carry ``node`` and ``gpu`` labels; pair families ``node, gpu_a, gpu_b``;
the per-job family ``node, namespace, job``. The restore families (memory given back to
offline work, and what is still quarantined) come from the NodeAgent's own restore totals,
which NodeTrace reports do not carry.

One deviation forced by the exposition format: a gauge and a histogram cannot share the name
``gleaner_gpu_harvestable_memory_bytes`` (one ``# TYPE`` per name), so the gauge has that
name and the time-weighted histogram is ``gleaner_gpu_harvestable_memory_histogram_bytes``
(bucket values and ``_count`` in seconds, ``_sum`` in byte-seconds: ``rate(_bucket) /
rate(_count)`` is the fraction of time with at most ``le`` bytes harvestable).

The uninstrumented-process families (:func:`uninstrumented_families`, nvidia backend) come
from the guard's report: per GPU how many processes no connected shim accounts for, and
whether the node enforces the guard or opted out.

Each test builds its own ``CollectorRegistry`` with :func:`build_registry`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gleaner.api.units import GIB
from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.policy import HARVESTABLE_BUCKETS_GIB, Uninstrumented

PREEMPTION_BUCKETS = (0, 1, 2, 3, 5, 10)

HARVESTABLE_HISTOGRAM = "gleaner_gpu_harvestable_memory_histogram_bytes"


class AgentCollector(Collector):
    """Metric families of one node's agent (see the module docstring)."""

    def __init__(
        self,
        refresh: Callable[[], NodeAgent],
        extra: Callable[[], Iterator[Metric]] | None = None,
    ) -> None:
        self._refresh = refresh
        self._extra = extra

    def describe(self) -> list[Metric]:
        # Families are only known at collect time (GPUs, jobs); skip the registry's probe.
        return []

    def collect(self) -> Iterator[Metric]:
        agent = self._refresh()
        node = agent.node
        tot = agent.accounting.totals
        gl = ["node", "gpu"]

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=gl)

        enabled = counter(
            "gleaner_gpu_offline_enabled_seconds", "Seconds offline channels were enabled."
        )
        busy = counter("gleaner_gpu_online_busy_seconds", "Seconds the online side was busy.")
        requests = counter("gleaner_online_requests", "Online requests finished.")
        preempt = counter("gleaner_preemptions", "Offline preemptions (gate closes on busy).")
        reclaims = counter("gleaner_memory_reclaim_events", "Memory reclamations.")
        reclaimed = counter("gleaner_memory_reclaimed_bytes", "Bytes reclaimed from offline.")
        blocks = counter("gleaner_kv_blocks_invalidated", "Offline KV blocks invalidated.")
        restores = counter(
            "gleaner_memory_restore_events", "Reclaimed pages given back to offline work."
        )
        restored = counter(
            "gleaner_memory_restored_bytes", "Bytes given back to offline work (RESTORE)."
        )
        restore_failed = counter(
            "gleaner_memory_restore_failures", "Restores that failed (the page stays reclaimed)."
        )
        restore_deferred = counter(
            "gleaner_memory_restore_deferred",
            "Releases that restored nothing: free memory did not cover the page.",
        )
        quarantined = GaugeMetricFamily(
            "gleaner_memory_quarantined_bytes",
            "Bytes reclaimed from offline work and not given back yet.",
            labels=gl,
        )
        harvest = GaugeMetricFamily(
            "gleaner_gpu_harvestable_memory_bytes",
            "Memory offline work may use now.",
            labels=gl,
        )
        harvest_hist = HistogramMetricFamily(
            HARVESTABLE_HISTOGRAM,
            "Time-weighted distribution of harvestable memory (counts are seconds).",
            labels=gl,
        )
        req_hist = HistogramMetricFamily(
            "gleaner_online_request_preemptions",
            "Preemptions seen per finished online request.",
            labels=gl,
        )
        headroom = GaugeMetricFamily(
            "gleaner_memory_reservation_headroom_bytes",
            "Online memory headroom kept as pre-mapped handles (MIAD).",
            labels=gl,
        )
        interval = GaugeMetricFamily(
            "gleaner_memory_release_interval_seconds",
            "Interval between handle releases (MIAD-controlled).",
            labels=gl,
        )
        gate_open = GaugeMetricFamily(
            "gleaner_gpu_offline_enabled", "1 while offline channels are enabled.", labels=gl
        )
        online_busy = GaugeMetricFamily(
            "gleaner_gpu_online_busy", "1 while the online side is busy.", labels=gl
        )
        cooldown = GaugeMetricFamily(
            "gleaner_gpu_gate_cooldown_seconds", "Current T_cool = 2·G_max (clamped).", labels=gl
        )
        for gpu, t in sorted(tot.gpus.items()):
            lv = [node, str(gpu)]
            enabled.add_metric(lv, t.offline_enabled_s)
            busy.add_metric(lv, t.online_busy_s)
            requests.add_metric(lv, t.online_requests)
            preempt.add_metric(lv, t.preemptions)
            reclaims.add_metric(lv, t.reclamations)
            reclaimed.add_metric(lv, t.reclaimed_bytes)
            blocks.add_metric(lv, t.kv_blocks_invalidated)
            rt = agent.restores[gpu]
            restores.add_metric(lv, rt.events)
            restored.add_metric(lv, rt.restored_bytes)
            restore_failed.add_metric(lv, rt.failures)
            restore_deferred.add_metric(lv, rt.deferred)
            quarantined.add_metric(lv, agent.quarantined_bytes(gpu))
            harvest.add_metric(lv, agent.harvestable_bytes(gpu))
            cum = 0.0
            hb: list[tuple[str, float]] = []
            for le, secs in zip(HARVESTABLE_BUCKETS_GIB, t.harvestable_bucket_s, strict=False):
                cum += secs
                hb.append((repr(float(le * GIB)), cum))
            cum += t.harvestable_bucket_s[-1]
            hb.append(("+Inf", cum))
            harvest_hist.add_metric(lv, hb, t.harvestable_byte_s)
            rb: list[tuple[str, float]] = []
            for le in PREEMPTION_BUCKETS:
                rb.append(
                    (repr(float(le)), sum(c for n, c in t.request_preemptions.items() if n <= le))
                )
            rb.append(("+Inf", sum(t.request_preemptions.values())))
            req_hist.add_metric(lv, rb, sum(n * c for n, c in t.request_preemptions.items()))
            res = agent.memory[gpu]
            headroom.add_metric(lv, res.headroom_bytes)
            interval.add_metric(lv, res.interval_s)
            gate = agent.gates[gpu]
            gate_open.add_metric(lv, 1.0 if gate.enabled else 0.0)
            online_busy.add_metric(lv, 1.0 if agent.is_busy(gpu) else 0.0)
            cooldown.add_metric(lv, gate.cooldown_s)
        overlap = CounterMetricFamily(
            "gleaner_gpu_pair_busy_overlap_seconds",
            "Seconds both GPUs of the pair were busy online.",
            labels=["node", "gpu_a", "gpu_b"],
        )
        union = CounterMetricFamily(
            "gleaner_gpu_pair_busy_union_seconds",
            "Seconds at least one GPU of the pair was busy online.",
            labels=["node", "gpu_a", "gpu_b"],
        )
        for (a, b), p in sorted(tot.pairs.items()):
            overlap.add_metric([node, str(a), str(b)], p.overlap_s)
            union.add_metric([node, str(a), str(b)], p.union_s)
        jobs = CounterMetricFamily(
            "gleaner_offline_job_timeslice_seconds",
            "Seconds the offline job's work could run (all its GPUs enabled).",
            labels=["node", "namespace", "job"],
        )
        for key, secs in sorted(tot.job_timeslice_s.items()):
            ns, _, name = key.partition("/")
            jobs.add_metric([node, ns, name], secs)
        yield from (enabled, busy, overlap, union, requests, preempt, reclaims, reclaimed)
        yield from (blocks, jobs, harvest, harvest_hist, req_hist, headroom, interval)
        yield from (gate_open, online_busy, cooldown)
        yield from (restores, restored, restore_failed, restore_deferred, quarantined)
        if self._extra is not None:
            yield from self._extra()


def build_registry(
    refresh: Callable[[], NodeAgent],
    extra: Callable[[], Iterator[Metric]] | None = None,
) -> CollectorRegistry:
    """A fresh registry holding only the agent's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(refresh, extra))
    return registry


def uninstrumented_families(
    node: str,
    gpus: Iterable[int],
    found: Mapping[int, tuple[Uninstrumented, ...]],
    enforced: bool,
) -> Iterator[Metric]:
    """``gleaner_gpu_uninstrumented_processes{node,gpu}`` (every GPU, 0 when none) and
    ``gleaner_uninstrumented_guard_enforced{node}`` (1: such GPUs are held closed; 0: the
    node opted out and they are only reported)."""
    count = GaugeMetricFamily(
        "gleaner_gpu_uninstrumented_processes",
        "Processes on the GPU that no connected shim accounts for (its offline gate is held "
        "closed unless the node opted out).",
        labels=["node", "gpu"],
    )
    for gpu in gpus:
        count.add_metric([node, str(gpu)], len(found.get(gpu, ())))
    yield count
    guard = GaugeMetricFamily(
        "gleaner_uninstrumented_guard_enforced",
        "1: GPUs with uninstrumented processes are held closed; 0: the node opted out.",
        labels=["node"],
    )
    guard.add_metric([node], 1.0 if enforced else 0.0)
    yield guard
