"""OfflineJob validation: a bound job's edited spec, a profile ConfigMap change, the pass.

Contract: ``validate_and_queue`` reads the job's profile ConfigMap (``spec.profileFrom``)
and validates with the pure ``validate_job``; ``apply_verdict`` writes the outcome, judged on
the body it was given (kopf's event, the pass's list) with that body's resourceVersion as
a precondition (``update_status(known=...)``: a fresh read only when the job changed
since). Invalid: phase Invalid, ``Valid=False`` whose message names the field (and the ConfigMap as
``<namespace>/<name>``), a Warning Event ``InvalidSpec`` only when the status changed; the
handler returns normally so kopf does not retry. Valid: ``Valid=True``; a new or formerly
invalid job becomes Pending; the scheduling loop is kicked (``valid_status``, which the
pass also folds into a new job's placement write, ``handlers.scheduling``). Needs a profile
(``profileFrom.auto`` and no ConfigMap): valid and Pending too, with ``Profiled=False`` (the
pass measures it, ``handlers.profiling``). Running jobs keep running: a spec change applies
to the job's next attempt.

An invalid job converges without being edited: ``revalidate_profile_users`` runs when a
ConfigMap that some job names in ``spec.profileFrom`` is added, changed or deleted (kopf
filters ConfigMap events through an index of the names jobs reference, so other ConfigMaps
cost nothing) and re-validates those of its jobs that wait for a placement (Invalid,
Pending, Unschedulable, Evicted). It holds the scheduling lock so a pass that read the
ConfigMap before the change cannot overwrite the newer verdict. Each re-validation is one
GET per ConfigMap event and writes only when the verdict changed: no timers, no retry
storm. The scheduling pass uses ``apply_verdict`` too when a queued job's ConfigMap turned
invalid since it was validated.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from gleaner.api import ConditionType, OfflineJobStatus, Phase
from gleaner.clients.kube import configmaps_path, offlinejobs_path
from gleaner.operator import status as st
from gleaner.operator.autoprofile import profiled, profiling, profiling_started
from gleaner.operator.context import OperatorContext
from gleaner.operator.events import post_event
from gleaner.operator.jobs import parse_status, update_status
from gleaner.operator.validation import (
    InvalidJob,
    NeedsProfile,
    ValidJob,
    profile_configmap_name,
    validate_job,
)

WAITING_PHASES = frozenset({Phase.PENDING, Phase.INVALID, Phase.UNSCHEDULABLE, Phase.EVICTED})
"""Phases a (re-)validation may move: bound and finished jobs keep their state."""


def spec_judged(body: dict[str, Any]) -> bool:
    """Whether the job's ``Valid`` condition judged its current spec: the condition's
    ``observedGeneration`` is the job's ``metadata.generation``."""
    generation = (body.get("metadata") or {}).get("generation")
    for cond in (body.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == ConditionType.VALID.value:
            return generation is not None and cond.get("observedGeneration") == generation
    return False


def valid_status(
    cur: OfflineJobStatus, verdict: ValidJob | NeedsProfile, now: datetime, generation: int | None
) -> tuple[OfflineJobStatus, bool]:
    """The status of a job judged valid (``Valid=True`` for ``generation``); the flag says
    that this status starts profiling (the caller posts ``ProfileNeeded``)."""
    new = st.valid(cur, now, generation)
    needs_runs = isinstance(verdict, NeedsProfile) and not profiling_started(new)
    if isinstance(verdict, NeedsProfile) and not profiling_started(new):
        if new.phase in (Phase.UNSCHEDULABLE, Phase.EVICTED):
            # Profiling runs while the job is Pending (docs/profiling.md).
            new = st.transition(new, Phase.PENDING, "waiting for its profile")
        new = profiling(new, verdict.message, now)  # the pass starts the runs
    elif isinstance(verdict, ValidJob) and profiling_started(new):
        # The ConfigMap appeared while profiling (written by the user, or stored by a
        # replica that stopped before it could say so): the profile is there.
        new = profiled(new, "profile read from its ConfigMap", now)
    return new, needs_runs


async def validate_and_queue(ctx: OperatorContext, body: dict[str, Any]) -> str:
    """Validate one job; returns a short outcome for kopf's log."""
    namespace = str((body.get("metadata") or {}).get("namespace") or "default")
    cm_name = profile_configmap_name(body)
    configmap = None
    if cm_name:
        configmap = await ctx.client.get(configmaps_path(namespace, cm_name))
    return await apply_verdict(ctx, body, validate_job(body, configmap))


async def apply_verdict(
    ctx: OperatorContext, body: dict[str, Any], verdict: ValidJob | InvalidJob | NeedsProfile
) -> str:
    """Write a validation outcome to the job's status (see the module docstring)."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    generation = meta.get("generation")
    now = datetime.now(UTC)

    if isinstance(verdict, InvalidJob):
        message = verdict.message

        def mark_invalid(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
            if cur.phase not in WAITING_PHASES:
                return None  # a bound job keeps running; the new spec is refused for later
            return st.invalid(cur, message, now, generation)

        changed = await update_status(ctx, namespace, name, mark_invalid, known=body)
        if changed is not None:
            await post_event(
                ctx.client, namespace, name, meta.get("uid"), "Warning", "InvalidSpec", message
            )
        return f"invalid: {message}"

    needs_runs = False  # this write starts profiling: an Event says why (below)

    def mark_valid(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        nonlocal needs_runs
        new, needs_runs = valid_status(cur, verdict, now, generation)
        return new

    written = await update_status(ctx, namespace, name, mark_valid, known=body)
    if written is not None and needs_runs and isinstance(verdict, NeedsProfile):
        # The condition moves on with the first run; the Event keeps why it is measured.
        await post_event(
            ctx.client, namespace, name, meta.get("uid"), "Normal", "ProfileNeeded", verdict.message
        )
    ctx.kick(f"job {namespace}/{name}")
    return "valid, needs a profile" if isinstance(verdict, NeedsProfile) else "valid"


async def revalidate_profile_users(
    ctx: OperatorContext, namespace: str, configmap: str, jobs: Iterable[str]
) -> dict[str, str]:
    """Re-validate the waiting ``jobs`` (names in ``namespace``) that use ``configmap``.

    Returns job name -> outcome for those re-validated (for kopf's log).
    """
    outcomes: dict[str, str] = {}
    async with ctx.scheduling_lock:
        for name in sorted(set(jobs)):
            body = await ctx.client.get(offlinejobs_path(namespace, name))
            if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if profile_configmap_name(body) != configmap:
                continue  # the index was a moment behind a spec change
            if parse_status(body).phase not in WAITING_PHASES:
                continue
            outcomes[name] = await validate_and_queue(ctx, body)
    return outcomes
