"""Binding a placement: the Pod first, then one status write when it runs.

Contract. A pass that places a queued job creates its Pod at once
(``<job>-<attempt>``, made by ``build_offline_pod`` with the placement in the Pod's
``gleaner.dev/placement`` annotation). The Pod's name is the claim: the API server refuses
a second Pod of the same attempt (409), so a restarted or second replica adopts the Pod that
exists instead of making another. The job's status records the placement (phase
``Scheduled``) afterwards, in one write, at the first of:

- the Pod reports a phase (``Running``, or it already ended): the same write records it
  (``Scheduled`` then ``Running`` in one status), so a Pod that starts quickly costs the
  job one status write instead of two (:func:`record`, from the Pod watch);
- ``record_delay`` seconds after the Pod was made (``OperatorConfig.record_delay``): the
  placement alone (``Scheduled``), for a Pod that waits for its image (:func:`_timer`).

Until then the job stays in ``ctx.binding`` (no pass places it again, its GPUs count as
held) and in ``ctx.unrecorded`` (what to write). A status write that finds the job no
longer the one placed (replaced, deleted, its spec changed since the pass judged it, or
moved on) writes nothing and deletes the Pod, which no status would ever own. After a
restart ``ctx.unrecorded`` is empty: the pass finds a queued job whose current attempt's
Pod exists and adopts that Pod's placement from its annotation (:func:`adopt`), or
deletes a Pod that cannot be adopted (made for another spec or another job).
The test-only ``bind_delay`` holds the status write back (the window a crash can hit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gleaner.api import OfflineJobStatus
from gleaner.clients.kube import NotFoundError, pods_path
from gleaner.operator import status as st
from gleaner.operator.builders import PodPlacement, placement_of_pod
from gleaner.operator.context import OperatorContext
from gleaner.operator.handlers.validate import valid_status
from gleaner.operator.jobs import StatusChange, update_status
from gleaner.operator.placement import object_meta
from gleaner.operator.unrecorded import JudgeValid, Unrecorded
from gleaner.operator.validation import ValidJob

logger = logging.getLogger(__name__)

Key = tuple[str, str]


@dataclass(frozen=True)
class Judged:
    """A job this pass validated (its spec was not judged yet): the verdict is written with
    the job's placement or Unschedulable reason, in the same status write."""

    verdict: ValidJob
    generation: int | None

    def apply(
        self, body: dict[str, Any], cur: OfflineJobStatus, now: datetime
    ) -> OfflineJobStatus | None:
        """``cur`` judged valid; None when the spec changed since it was judged."""
        if object_meta(body).get("generation") != self.generation:
            return None
        return valid_status(cur, self.verdict, now, self.generation)[0]


def recorded_change(
    pod_name: str, made: PodPlacement, judged: JudgeValid | None, pod: dict[str, Any] | None
) -> StatusChange:
    """The status change that records ``made`` (and the Pod's phase, from ``pod``)."""
    phase = str(((pod or {}).get("status") or {}).get("phase") or "")
    detail = failure_detail(pod) if pod is not None and phase == "Failed" else ""

    def change(body: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        meta = object_meta(body)
        if made.job_uid is not None and meta.get("uid") != made.job_uid:
            return None
        if made.generation is not None and meta.get("generation") != made.generation:
            return None
        now = datetime.now(UTC)
        if cur.phase not in st.QUEUED_PHASES:
            # Recorded meanwhile (the timer and the Pod watch race): the Pod's phase alone.
            new = st.from_pod_phase(cur, pod_name, phase, now, detail)
        else:
            if judged is not None:
                valid = judged(body, cur, now)
                if valid is None:
                    return None
                cur = valid
            new = st.recorded(
                cur, made.placement, pod_name, made.attempt, phase, now, made.why, detail
            )
        return new

    return change


def failure_detail(pod: dict[str, Any]) -> str:
    """Why a Pod failed, from its status (first terminated container), or its reason."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term:
            reason = term.get("reason") or "Error"
            return f"container {cs.get('name')} {reason} (exit code {term.get('exitCode', '?')})"
    return str(status.get("reason") or status.get("message") or "")


def hold(
    ctx: OperatorContext,
    key: Key,
    pod: dict[str, Any],
    made: PodPlacement,
    judged: Judged | None,
    known: dict[str, Any] | None,
) -> None:
    """Keep the job held until its placement is recorded, and start the record timer."""
    name = str(object_meta(pod).get("name"))
    delay = max(ctx.config.record_delay, ctx.config.bind_delay)
    ctx.unrecorded[key] = Unrecorded(
        name,
        made,
        None if judged is None else judged.apply,
        known,
        time.monotonic() + ctx.config.bind_delay,
    )
    ctx.binding[key] = made.placement
    _arm(ctx, key, delay)


def _arm(ctx: OperatorContext, key: Key, delay: float) -> None:
    loop = asyncio.get_running_loop()

    def fire() -> None:
        if key not in ctx.unrecorded:
            return
        task = loop.create_task(_timer(ctx, key), name=f"gleaner-record-{key[0]}/{key[1]}")
        ctx.bind_tasks.add(task)
        task.add_done_callback(ctx.bind_tasks.discard)

    loop.call_later(max(0.0, delay), fire)


async def _timer(ctx: OperatorContext, key: Key) -> None:
    rec = ctx.unrecorded.get(key)
    if rec is None:
        return
    try:
        await record(ctx, key, ctx.watched_pods.get(key[0], rec.pod))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the API server may be away: try again later
        logger.warning("%s/%s: recording the placement failed: %s", *key, exc)
        _arm(ctx, key, max(1.0, ctx.config.record_delay))


async def record(
    ctx: OperatorContext, key: Key, pod: dict[str, Any] | None
) -> OfflineJobStatus | None:
    """Write the held placement of ``key`` (with ``pod``'s phase) unless it is written
    already; the job is released either way, and a Pod no status will own is deleted."""
    rec = ctx.unrecorded.get(key)
    if rec is None:
        return None
    if time.monotonic() < rec.not_before:
        return None  # held back (bind_delay): the timer writes it
    # Claimed: one writer records it (the job stays held in ``binding`` until written); a
    # later Pod event finds it recorded and follows the Pod as usual.
    del ctx.unrecorded[key]
    return await _write(ctx, key, rec, pod)


async def _write(
    ctx: OperatorContext, key: Key, rec: Unrecorded, pod: dict[str, Any] | None
) -> OfflineJobStatus | None:
    """The status write of ``record`` (``rec`` claimed, the job held in ``binding``)."""
    change = recorded_change(rec.pod, rec.made, rec.judged, pod)
    judged_on: list[OfflineJobStatus] = []

    def judge(body: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        judged_on.append(cur)
        return change(body, cur)

    try:
        new = await update_status(ctx, key[0], key[1], judge, known=rec.known)
    except BaseException:
        ctx.unrecorded.setdefault(key, rec)  # not written: still to record
        raise
    if key not in ctx.unrecorded:
        ctx.binding.pop(key, None)
    if new is None and judged_on and not _owns(judged_on[-1], rec.pod):
        await _delete_pod(ctx, key[0], rec.pod)
        ctx.kick(f"pod {key[0]}/{rec.pod} made for an older spec")
    return new


def _owns(status: OfflineJobStatus, pod: str) -> bool:
    """Whether ``status`` records ``pod`` as the job's current Pod."""
    return status.phase not in st.QUEUED_PHASES and bool(status.pods) and status.pods[-1] == pod


async def _delete_pod(ctx: OperatorContext, namespace: str, name: str) -> None:
    with contextlib.suppress(NotFoundError):
        await ctx.client.delete(pods_path(namespace, name))


def unrecorded_pod(ctx: OperatorContext, namespace: str, job: str, pod: str) -> bool:
    """Whether ``pod`` is the Pod of ``job``'s placement still to be recorded (the Pod
    watch then records it with the Pod's phase: :func:`record`)."""
    rec = ctx.unrecorded.get((namespace, job))
    return rec is not None and rec.pod == pod


def dropped(ctx: OperatorContext, namespace: str, job: str, pod: str) -> None:
    """The Pod of a placement not recorded yet was deleted: nothing is to be recorded, and
    the job is free for the next pass (the caller kicks it)."""
    if unrecorded_pod(ctx, namespace, job, pod):
        del ctx.unrecorded[(namespace, job)]
        ctx.binding.pop((namespace, job), None)


async def adopt(
    ctx: OperatorContext, key: Key, status: OfflineJobStatus, pod: dict[str, Any]
) -> None:
    """A queued job whose current attempt's Pod exists with no held placement (a restart
    between the Pod and the status write): record the Pod's placement, or delete a Pod that
    cannot be this job's. Either way the job is not to be placed in this pass."""
    meta = object_meta(pod)
    if meta.get("deletionTimestamp"):
        return  # going away: the job is placed again once it is gone
    made = placement_of_pod(pod)
    if made is None or made.attempt != status.attempt:
        await _delete_pod(ctx, key[0], str(meta.get("name")))
        return
    ctx.binding[key] = made.placement
    await _write(ctx, key, Unrecorded(str(meta.get("name")), made, None, None, 0.0), pod)
