"""Whether a Running job moves off its node before a forecast peak (pure).

Contract. :func:`check_move` asks the two questions of a proactive move, through
:func:`~gleaner.scheduler.schedule.decide`, and lets
:func:`~gleaner.scheduler.lifecycle.should_move` decide:

1. does the job's own node still admit it over the coming horizon (``coming``: the node's
   summary as admission judges a run of that horizon), with the job's own GPUs counted
   free?
2. if not, does another node admit it by the placement rule (the snapshot's own summaries,
   the job's node excluded)?

A job whose placement carries a planned exit (a large job placed over the shorter
horizon of :class:`~gleaner.scheduler.lifecycle.PlannedExitRule`) and for which no other
node admits it leaves its node for the queue when :func:`check_exit` says so: its node no
longer admits it over the exit horizon either.

The simulator (``move_before_peak``) and the operator (``handlers.move``) both build a
:class:`~gleaner.scheduler.cluster.SchedulingSnapshot` of their cluster and call it, so
they take the same decision for the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gleaner.perfmodel import NodeSummary
from gleaner.scheduler.cluster import SchedulingSnapshot
from gleaner.scheduler.config import SchedulerConfig
from gleaner.scheduler.job import JobRequest
from gleaner.scheduler.lifecycle import DEFAULT_MIN_STAY_SECONDS, should_exit, should_move
from gleaner.scheduler.result import PlacementDecision
from gleaner.scheduler.schedule import decide


@dataclass(frozen=True)
class MoveCheck:
    """The answer for one Running job."""

    move: bool
    admitted_here: bool | None
    """Whether its node still admits it over the horizon (None: not asked, too early)."""
    destination: PlacementDecision | None = None
    """Where the placement rule would put it instead (None: nowhere, or not asked)."""

    @property
    def reason(self) -> str:
        """Why it moves (or stays), in words."""
        if self.admitted_here is None:
            return "placed too recently to move"
        if self.admitted_here:
            return "its node still admits it over the coming hours"
        if self.destination is None:
            return "its node no longer admits it over the coming hours, but no other node does"
        return (
            "its node no longer admits it over the coming hours (forecast peak); "
            f"{self.destination.node} does"
        )


def admits_here(
    snapshot: SchedulingSnapshot,
    job: JobRequest,
    node: str,
    coming: NodeSummary,
    config: SchedulerConfig | None = None,
) -> bool:
    """Whether ``node``, judged by ``coming`` (its summary over some coming horizon), still
    admits ``job`` with the job's own GPUs counted free."""
    free_own = {
        n: ({g: k for g, k in held.items() if k != job.key} if n == node else held)
        for n, held in snapshot.occupied.items()
    }
    here_snapshot = replace(snapshot, jobs=[job], nodes={node: coming}, occupied=free_own)
    return bool(decide(here_snapshot, config).placements)


def check_move(
    snapshot: SchedulingSnapshot,
    job: JobRequest,
    node: str,
    coming: NodeSummary,
    placed_at: float,
    now: float,
    config: SchedulerConfig | None = None,
    min_stay_seconds: float = DEFAULT_MIN_STAY_SECONDS,
) -> MoveCheck:
    """Whether ``job``, running on ``node`` since ``placed_at`` (seconds), moves at ``now``.

    ``snapshot`` is the cluster as placement sees it (its ``jobs`` are ignored; its
    ``occupied`` holds the job's own GPUs under ``job.key``); ``coming`` is ``node``'s
    summary over the move horizon.
    """
    if not should_move(placed_at, now, False, True, min_stay_seconds):
        return MoveCheck(False, None)
    here = admits_here(snapshot, job, node, coming, config)
    if here:
        return MoveCheck(False, True)
    probe = replace(job, excluded_nodes=job.excluded_nodes | {node})
    found = decide(replace(snapshot, jobs=[probe]), config).placements
    destination = found[0] if found else None
    move = should_move(placed_at, now, here, destination is not None, min_stay_seconds)
    return MoveCheck(move, here, destination)


def exit_open(check: MoveCheck, planned_exit: bool) -> bool:
    """Whether the move check ``check`` leaves a planned exit open: the placement carries
    one, its node no longer admits the job over the move horizon and no other node does.
    Only then is the exit horizon asked (:func:`check_exit`)."""
    return should_exit(planned_exit, check.admitted_here, check.destination is not None, False)


def check_exit(
    check: MoveCheck,
    snapshot: SchedulingSnapshot,
    job: JobRequest,
    node: str,
    soon: NodeSummary,
    planned_exit: bool,
    config: SchedulerConfig | None = None,
) -> bool:
    """Whether ``job``, whose move check on ``node`` is ``check``, leaves its node for the
    queue by its planned exit (:func:`~gleaner.scheduler.lifecycle.should_exit`): the
    placement carries one, the check found no node that admits it, and ``soon`` (the node's
    summary over the exit horizon) no longer admits it either. The exit horizon is asked
    only when the rest already says leave."""
    if not exit_open(check, planned_exit):
        return False
    soon_here = admits_here(snapshot, job, node, soon, config)
    return should_exit(planned_exit, check.admitted_here, check.destination is not None, soon_here)


__all__ = ["MoveCheck", "admits_here", "check_exit", "check_move", "exit_open"]
