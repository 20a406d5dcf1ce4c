"""Reading and writing OfflineJobs through the API server (the shell around ``status``).

Contract: ``update_status(ctx, ns, name, change)`` is the only way the operator writes a
job's status: under the job's lock it GETs the fresh object, calls the pure ``change(job
body, current status)``; a returned status different from the current one is sent as a
JSON merge patch to the ``status`` subresource. It returns the resulting status, or None
when the job is gone, being deleted, or ``change`` had nothing to do. A ``TransitionError``
from the phase machine means the job moved on meanwhile (e.g. it succeeded): the change is
dropped and logged, never retried.

``known=body`` saves the GET when the caller already holds a copy of the job (the
scheduling pass's list, the body of a kopf event, the object a previous write returned):
``change`` is judged on that copy and the patch carries its ``metadata.resourceVersion``
as a precondition, so the API server refuses it (409) if the job changed since; then the
job is read afresh and ``change`` judged again, as without ``known``; so is a change that
finds nothing to do on the copy, or that the phase machine refuses there. No write and no
"nothing to do" is ever based on a stale copy. The object the API server returned after
the write goes into ``ctx.watched_jobs`` (the next pass sees the write before its watch
event comes back), and ``on_written`` receives the object the API
server returned after the write (its new resourceVersion: a later ``known``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from gleaner.api import OfflineJobStatus
from gleaner.clients.kube import (
    ConflictError,
    NotFoundError,
    offlinejob_status_path,
    offlinejobs_path,
)
from gleaner.operator.context import OperatorContext
from gleaner.operator.status import TransitionError, status_patch

logger = logging.getLogger(__name__)

StatusChange = Callable[[dict[str, Any], OfflineJobStatus], OfflineJobStatus | None]
Written = Callable[[dict[str, Any]], None]


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
    ctx: OperatorContext,
    namespace: str,
    name: str,
    change: StatusChange,
    *,
    known: dict[str, Any] | None = None,
    on_written: Written | None = None,
) -> OfflineJobStatus | None:
    async with ctx.job_lock(namespace, name):
        body = known
        version = _version(known)
        if version is None:
            body = await ctx.client.get(offlinejobs_path(namespace, name))
        while True:
            if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
                return None
            current = parse_status(body)
            try:
                new = change(body, current)
            except TransitionError as exc:
                if version is not None:  # judged on a held copy: judge on the job as it is
                    version, body = None, await ctx.client.get(offlinejobs_path(namespace, name))
                    continue
                logger.info("%s/%s: status change dropped: %s", namespace, name, exc)
                return None
            if new is None or new == current:
                if version is not None:  # nothing to do on the copy: is that so on the job?
                    version, body = None, await ctx.client.get(offlinejobs_path(namespace, name))
                    continue
                return None
            patch = status_patch(current, new)
            if version is not None:
                patch["metadata"] = {"resourceVersion": version}
            try:
                written = await ctx.client.patch(offlinejob_status_path(namespace, name), patch)
            except NotFoundError:
                return None
            except ConflictError:
                if version is None:
                    raise
                # The copy was stale: judge the change again on the job as it is now.
                version, body = None, await ctx.client.get(offlinejobs_path(namespace, name))
                continue
            if written:
                ctx.watched_jobs.written(written)
                if on_written is not None:
                    on_written(written)
            return new


def _version(body: dict[str, Any] | None) -> str | None:
    """The resourceVersion of a held copy of a job (None: no usable copy)."""
    if body is None:
        return None
    version = (body.get("metadata") or {}).get("resourceVersion")
    return str(version) if version else None


async def patch_annotations(
    ctx: OperatorContext, namespace: str, name: str, annotations: dict[str, str | None]
) -> None:
    try:
        await ctx.client.patch(
            offlinejobs_path(namespace, name), {"metadata": {"annotations": annotations}}
        )
    except NotFoundError:
        return
