"""Reading and writing OfflineJobs through the API server (the shell around ``status``).

Contract: ``update_status(ctx, ns, name, change)`` is the only way the operator writes a
job's status: under the job's lock it GETs the fresh object, calls the pure ``change(job
body, current status)``; a returned status different from the current one is sent as a
JSON merge patch to the ``status`` subresource. It returns the resulting status, or None
when the job is gone, being deleted, or ``change`` had nothing to do. A ``TransitionError``
from the phase machine means the job moved on meanwhile (e.g. it succeeded): the change is
dropped and logged, never retried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from gleaner.api import OfflineJobStatus
from gleaner.clients.kube import NotFoundError, offlinejob_status_path, offlinejobs_path
from gleaner.operator.context import OperatorContext
from gleaner.operator.status import TransitionError, status_patch

logger = logging.getLogger(__name__)

StatusChange = Callable[[dict[str, Any], OfflineJobStatus], OfflineJobStatus | None]


def parse_status(body: dict[str, Any]) -> OfflineJobStatus:
    """The stored status (a default one when absent or unreadable)."""
    try:
        return OfflineJobStatus.model_validate(body.get("status") or {})
    except ValidationError:
        logger.warning("unreadable status of %s; starting afresh", _key(body))
        return OfflineJobStatus()


def _key(body: dict[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


async def update_status(
    ctx: OperatorContext, namespace: str, name: str, change: StatusChange
) -> OfflineJobStatus | None:
    async with ctx.job_lock(namespace, name):
        body = await ctx.client.get(offlinejobs_path(namespace, name))
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            return None
        current = parse_status(body)
        try:
            new = change(body, current)
        except TransitionError as exc:
            logger.info("%s/%s: status change dropped: %s", namespace, name, exc)
            return None
        if new is None or new == current:
            return None
        try:
            await ctx.client.patch(
                offlinejob_status_path(namespace, name), status_patch(current, new)
            )
        except NotFoundError:
            return None
        return new


async def patch_annotations(
    ctx: OperatorContext, namespace: str, name: str, annotations: dict[str, str | None]
) -> None:
    try:
        await ctx.client.patch(
            offlinejobs_path(namespace, name), {"metadata": {"annotations": annotations}}
        )
    except NotFoundError:
        return
