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

``occupied_gpus`` builds the snapshot's occupied GPUs from the same reads, for the
scheduling pass and for the move check alike.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from gleaner.api import OfflineJob, OfflineJobStatus, Placement, Profile
from gleaner.api.contract import LABEL_JOB
from gleaner.operator.builders import gpus_of_pod
from gleaner.operator.status import BOUND_PHASES
from gleaner.perfmodel import JobProfile, NodeSummary
from gleaner.perfmodel.admission import ADMISSION_HORIZON_H
from gleaner.scheduler import (
    BiasTable,
    JobRequest,
    NodeExplanation,
    SchedulerConfig,
    SchedulingSnapshot,
    decide,
    explain_runner_ups,
)
from gleaner.scheduler.lifecycle import PlannedExitRule

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
    planned_exit: PlannedExitRule | None = None,
    short_nodes: Mapping[str, NodeSummary] | None = None,
    horizon_s: float = ADMISSION_HORIZON_H * 3600.0,
    exit_candidates: Collection[str] | None = None,
) -> PlacementPlan:
    """One scheduling decision for the whole queue (see the module docstring).

    ``node_labels`` are the Kubernetes Node labels (for ``gpuSelector.nodeSelector``);
    ``unavailable`` names nodes that must not receive Pods (cordoned, not ready) with a
    class-level reason, on top of the nodes whose trace is stale; ``uninstrumented`` the
    GPUs whose agent reports a process no shim accounts for (nothing is placed there);
    ``bias`` the learned observed/predicted ratios every prediction is corrected by;
    ``explained`` how many placements, the queue's first, get runner-up reasons (the
    operator's pass: ``explained_placements``).

    With ``planned_exit``, the jobs the decision left unplaced that the rule gives a second
    pass (large enough, and ``planned_exit.admission_horizon_s`` shorter than
    ``horizon_s``, the one ``nodes`` were judged over) are decided again on
    ``short_nodes`` (the nodes judged over the shorter horizon), with the first
    decision's placements occupied; what that pass places carries ``plannedExit``.
    ``exit_candidates`` names the jobs that may get that pass (None: every job).
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
    misses = {miss.job: miss.message for miss in result.unschedulable}
    if planned_exit is not None and short_nodes is not None:
        second = [
            r
            for r in snapshot.jobs
            if r.key in misses
            and planned_exit.second_pass(r.gpus, horizon_s)
            and (exit_candidates is None or r.key in exit_candidates)
        ]
        if second:
            taken = {n: dict(held) for n, held in occupied.items()}
            for decision in result.placements:
                taken.setdefault(decision.node, {}).update(
                    dict.fromkeys(decision.gpus, decision.job)
                )
            short = replace(snapshot, jobs=second, nodes=short_nodes, occupied=taken)
            for decision in decide(short, cfg).placements:
                placement = decision.to_placement(now).model_copy(update={"planned_exit": True})
                plan.placements.append((by_key[decision.job], placement))
                if decision.explanation is not None:
                    plan.explanations[decision.job] = decision.explanation
                del misses[decision.job]
    for key, message in misses.items():
        plan.unschedulable.append((by_key[key], message))
    return plan


TERMINAL_POD_PHASES = ("Succeeded", "Failed")
"""Pod phases in which a Pod holds no GPU any more."""


def object_meta(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ``metadata`` of an object's body (empty when it has none or it is not a map)."""
    meta = body.get("metadata")
    return meta if isinstance(meta, dict) else {}


def object_key(body: Mapping[str, Any]) -> tuple[str, str]:
    """``(namespace, name)`` of a namespaced object's body; no namespace reads ``default``."""
    meta = object_meta(body)
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def occupied_gpus(
    pods: Iterable[dict[str, Any]],
    statuses: Mapping[tuple[str, str], OfflineJobStatus],
    in_flight: Mapping[tuple[str, str], Placement | None] | None = None,
) -> dict[str, dict[int, str]]:
    """GPU index -> ``ns/job`` per node: the live offline Pods', the placements recorded in
    bound jobs' status, and ``in_flight``, the placements of an earlier pass still being written
    (decided, maybe not recorded yet: the lists cannot show them). A Pod that finished holds
    nothing; one with no node or GPU annotation is not counted."""
    occupied: dict[str, dict[int, str]] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES:
            continue
        held = gpus_of_pod(pod)
        if held is None:
            continue
        node, gpus = held
        ns, _ = object_key(pod)
        job = str((object_meta(pod).get("labels") or {}).get(LABEL_JOB, "?"))
        for gpu in gpus:
            occupied.setdefault(node, {})[gpu] = f"{ns}/{job}"
    for (ns, name), status in statuses.items():
        if status.phase in BOUND_PHASES and status.placement is not None:
            for gpu in status.placement.gpu_indices:
                occupied.setdefault(status.placement.node, {})[gpu] = f"{ns}/{name}"
    for (ns, name), taken in (in_flight or {}).items():
        if taken is not None:
            for gpu in taken.gpu_indices:
                occupied.setdefault(taken.node, {})[gpu] = f"{ns}/{name}"
    return occupied
