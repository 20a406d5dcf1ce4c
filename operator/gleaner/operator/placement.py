"""The operator's thin adapter to ``gleaner.scheduler`` (pure).

Contract: ``plan_placements`` turns what a scheduling pass read from the API server (the
queued jobs with their resolved profiles, node summaries from NodeTraces or Prometheus,
the GPUs offline Pods already hold, the Kubernetes Nodes' labels and availability, the
staleness limit) into one ``SchedulingSnapshot``, calls ``gleaner.scheduler.decide`` once for
the whole queue, and turns the answer back into API ``Placement`` objects, per-job reasons
and each placement's explanation and runner-up reasons (``explain_runner_ups``, the same
call ``gleaner place --explain`` makes: "why not node X" for up to :data:`RUNNER_UPS`
other nodes, judged on the pass's snapshot, for the first :data:`EXPLAINED` placements of
a pass that is not part of a burst, ``explained_placements``). It decides nothing itself:
filters, scores, explanations and the model are the scheduler's and perfmodel's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gleaner.api import OfflineJob, Placement, Profile
from gleaner.perfmodel import JobProfile, NodeSummary
from gleaner.scheduler import (
    BiasTable,
    JobRequest,
    NodeExplanation,
    SchedulerConfig,
    SchedulingSnapshot,
    decide,
    explain_runner_ups,
)

RUNNER_UPS = 5
"""Other nodes named in a placement's ``NotChosen`` Event (closest first)."""
EXPLAINED = 4
"""Placements per pass that get their runner-up reasons (the first ones of the queue)."""
BURST = 16
"""A pass with more queued jobs than this is deciding a burst of submissions."""


def explained_placements(queued: int) -> int:
    """How many of a pass's placements get runner-up reasons: the first :data:`EXPLAINED`
    in a pass of at most :data:`BURST` queued jobs, none in a burst: a burst is decided in
    many passes (each deciding the jobs that arrived while the last one's writes went on),
    and explaining a few per pass would slow every one of them."""
    return EXPLAINED if queued <= BURST else 0


@dataclass(frozen=True)
class QueuedJob:
    """A validated job waiting for a placement, with its resolved profile."""

    job: OfflineJob
    profile: Profile

    @property
    def key(self) -> str:
        return f"{self.job.metadata.namespace or 'default'}/{self.job.metadata.name}"


@dataclass
class PlacementPlan:
    placements: list[tuple[QueuedJob, Placement]] = field(default_factory=list)
    unschedulable: list[tuple[QueuedJob, str]] = field(default_factory=list)
    explanations: dict[str, NodeExplanation] = field(default_factory=dict)
    """job key -> why its placement's node and GPUs (every factor, the bias, every rule)."""
    runner_ups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """job key -> ``node: why not`` for the closest other nodes."""


def plan_placements(
    queue: Sequence[QueuedJob],
    nodes: Mapping[str, NodeSummary],
    occupied: Mapping[str, Mapping[int, str]],
    now: datetime,
    *,
    config: SchedulerConfig | None = None,
    stale_after_seconds: float = 600.0,
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
    unavailable: Mapping[str, str] | None = None,
    uninstrumented: Mapping[str, Mapping[int, str]] | None = None,
    bias: BiasTable | None = None,
    explained: int = EXPLAINED,
) -> PlacementPlan:
    """One scheduling decision for the whole queue (see the module docstring).

    ``node_labels`` are the Kubernetes Node labels (for ``gpuSelector.nodeSelector``);
    ``unavailable`` names nodes that must not receive Pods (cordoned, not ready) with a
    class-level reason, on top of the nodes whose trace is stale; ``uninstrumented`` the
    GPUs whose agent reports a process no shim accounts for (nothing is placed there);
    ``bias`` the learned observed/predicted ratios every prediction is corrected by;
    ``explained`` how many placements, the queue's first, get runner-up reasons (the
    operator's pass: ``explained_placements``).
    """
    plan = PlacementPlan()
    if not queue:
        return plan
    by_key = {q.key: q for q in queue}
    snapshot = SchedulingSnapshot(
        jobs=[JobRequest.from_offlinejob(q.job, JobProfile.from_api(q.profile)) for q in queue],
        nodes=nodes,
        now=now,
        node_labels=node_labels or {},
        occupied=occupied,
        unavailable=unavailable or {},
        stale_after_seconds=stale_after_seconds,
        uninstrumented=uninstrumented or {},
        bias=bias if bias is not None else BiasTable(),
    )
    cfg = config or SchedulerConfig()
    result = decide(snapshot, cfg)
    requests = {r.key: r for r in snapshot.jobs}
    for decision in result.placements:
        plan.placements.append((by_key[decision.job], decision.to_placement(now)))
        if decision.explanation is not None:
            plan.explanations[decision.job] = decision.explanation
    # The first ``explained`` placements (the queue's front) get runner-ups, the rest no
    # NotChosen Event, so a large burst of jobs is not slowed down.
    front = list(plan.explanations.items())[: max(0, explained)]
    why_not = explain_runner_ups(
        snapshot, [(requests[key], ex) for key, ex in front], cfg, RUNNER_UPS
    )
    plan.runner_ups = {key: lines for (key, _), lines in zip(front, why_not, strict=True)}
    for miss in result.unschedulable:
        plan.unschedulable.append((by_key[miss.job], miss.message))
    return plan
