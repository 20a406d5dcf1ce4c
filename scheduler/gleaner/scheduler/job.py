"""What the scheduler needs to know about one pending OfflineJob, and the queue order.

Contract. :class:`JobRequest` is an immutable, already-validated view of an OfflineJob:
its key (``namespace/name``), the profile as the performance model's ``JobProfile``,
GPU count, throughput SLA, priority, gpuSelector (node labels and GPU products), the
nodes it must avoid (where it missed its SLA), arrival time, and its backoff deadline.
:meth:`JobRequest.from_offlinejob` builds one from the API object; the profile is
passed in because it may come from a ConfigMap the caller resolved.

:func:`queue_order` is the order in which one scheduling cycle considers jobs, chosen
so that a queue that can all fit does fit: first the jobs with the most GPUs (their
aligned GPU sets are the scarcest), then the hardest (highest SLA, bucketed by
``sla_step`` so that priority still decides among jobs of similar difficulty), then
higher ``priority``, then earlier arrival, then key (a total, deterministic order).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gleaner.api.contract import LABEL_JOB_CLASS
from gleaner.perfmodel.profile import JobProfile

if TYPE_CHECKING:
    from gleaner.api import OfflineJob

JOB_CLASS_LABEL = LABEL_JOB_CLASS
"""OfflineJob label naming the job's class for bias correction (default: no class)."""


@dataclass(frozen=True)
class JobRequest:
    """One job waiting for a placement (see the module docstring)."""

    key: str
    """``namespace/name``."""
    profile: JobProfile
    gpus: int
    """GPUs in lockstep, 1-8 (at most the node's GPU count to fit anywhere)."""
    sla: float
    """Required fraction (0, 1] of standalone throughput."""
    priority: int = 0
    node_selector: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Node labels that must all match (gpuSelector.nodeSelector)."""
    products: tuple[str, ...] = ()
    """Allowed GPU products (gpuSelector.products); empty: any."""
    excluded_nodes: frozenset[str] = frozenset()
    """Nodes the job must not use (it missed its SLA there)."""
    arrival: float = 0.0
    """Arrival time (seconds) or sequence number: earlier is placed first among equals."""
    job_class: str = ""
    """Class for per-class bias correction ('' = node-level only)."""
    not_before: float | None = None
    """Backoff: no placement before this time (checked when ``schedule`` gets ``now``)."""
    max_evictions: int = 3
    eviction_count: int = 0

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"job {self.key}: gpus must be >= 1")
        if not 0.0 < self.sla <= 1.0:
            raise ValueError(f"job {self.key}: throughput SLA must be within (0, 1]")

    @classmethod
    def from_offlinejob(
        cls, job: OfflineJob, profile: JobProfile, arrival: float | None = None
    ) -> JobRequest:
        """From the API object; ``arrival`` defaults to its creation time (or 0)."""
        meta, spec, status = job.metadata, job.spec, job.status
        key = f"{meta.namespace or 'default'}/{meta.name}"
        if arrival is None:
            created = meta.creation_timestamp
            arrival = created.timestamp() if created is not None else 0.0
        selector = spec.gpu_selector
        not_before = status.next_attempt_after
        return cls(
            key=key,
            profile=profile,
            gpus=spec.gpus,
            sla=job.effective_throughput_sla,  # a batch deadline may raise it
            priority=spec.priority,
            node_selector=dict(selector.node_selector) if selector else {},
            products=tuple(selector.products) if selector else (),
            excluded_nodes=frozenset(status.excluded_nodes),
            arrival=arrival,
            job_class=meta.labels.get(JOB_CLASS_LABEL, ""),
            not_before=None if not_before is None else not_before.timestamp(),
            max_evictions=spec.max_evictions,
            eviction_count=status.eviction_count,
        )

    @property
    def selector_key(self) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
        """Hashable form of the gpuSelector (caches per selector)."""
        return tuple(sorted(self.node_selector.items())), tuple(sorted(set(self.products)))


def order_key(job: JobRequest, sla_step: float = 0.1) -> tuple[int, int, int, float, str]:
    """Sort key of :func:`queue_order` (smaller first)."""
    bucket = math.floor(job.sla / sla_step + 1e-9) if sla_step > 0 else 0
    return (-job.gpus, -bucket, -job.priority, job.arrival, job.key)


def queue_order(jobs: Iterable[JobRequest], sla_step: float = 0.1) -> list[JobRequest]:
    """Jobs in the order one scheduling cycle considers them (see the module docstring)."""
    return sorted(jobs, key=lambda j: order_key(j, sla_step))
