"""What a scheduling pass and a move check read before they decide: lists into the caches.

Contract. ``prime_caches(ctx)`` lists the OfflineJobs, the offline Pods (label
``gleaner.dev/role=offline``) and the NodeTraces into the operator's watch caches
(``ctx.watched_jobs``, ``ctx.watched_pods``, ``ctx.watched_traces``) when each is due: before
the first pass, after a standby spell and every ``CACHE_RESYNC_SECONDS``
(``gleaner.operator.objectcache``); the lists that are due run at once. ``list_histories(ctx)``
lists the NodeHistories into ``ctx.histories`` once. Both are the I/O shell of the pass
(``handlers.scheduling``) and of the move check (``handlers.move``), which decide from what
these leave in ``ctx``; neither decides anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from gleaner.api.contract import OFFLINE_SELECTOR
from gleaner.clients.kube import (
    KubeError,
    nodehistories_path,
    nodetraces_path,
    offlinejobs_path,
    pods_path,
)
from gleaner.operator.context import CACHE_RESYNC_SECONDS, OperatorContext
from gleaner.operator.objectcache import ObjectCache

logger = logging.getLogger(__name__)

Listed = tuple[list[dict[str, Any]], str | None]
"""The items of a list and its ``resourceVersion`` (None when unknown)."""


async def list_histories(ctx: OperatorContext) -> None:
    """List the NodeHistories once, so the first pass after a start judges nodes by their
    hours even before the NodeHistory watch delivered them; tried again next pass when the
    list fails (a cluster without the NodeHistory CRD: no hours, nothing to wait for)."""
    try:
        ctx.histories.fill(await ctx.client.list(nodehistories_path()))
    except KubeError as exc:
        if exc.status == 404:
            ctx.histories.listed = True
        logger.warning("NodeHistories not listed (hours of the day not used yet): %s", exc)


async def prime_caches(ctx: OperatorContext) -> None:
    """List what a pass reads into its caches when they are due (the module docstring)."""
    now = time.monotonic()
    lists: list[tuple[ObjectCache, Coroutine[Any, Any, Listed]]] = []
    if ctx.watched_jobs.due_for_prime(now, CACHE_RESYNC_SECONDS):
        lists.append((ctx.watched_jobs, _list_everywhere(ctx, offlinejobs_path)))
    if ctx.watched_pods.due_for_prime(now, CACHE_RESYNC_SECONDS):
        lists.append((ctx.watched_pods, _list_everywhere(ctx, pods_path, OFFLINE_SELECTOR)))
    if ctx.watched_traces.due_for_prime(now, CACHE_RESYNC_SECONDS):
        lists.append((ctx.watched_traces, ctx.client.list_versioned(nodetraces_path())))
    if not lists:
        return
    listed = await asyncio.gather(*(work for _, work in lists))
    for (cache, _), (items, version) in zip(lists, listed, strict=True):
        cache.prime(items, version, now)


async def _list_everywhere(
    ctx: OperatorContext, path_of: Callable[[str | None], str], selector: str | None = None
) -> Listed:
    """Every object in the operator's namespaces, and the oldest of the lists' versions."""
    if ctx.config.clusterwide:
        return await ctx.client.list_versioned(path_of(None), label_selector=selector)
    out: list[dict[str, Any]] = []
    versions: list[str | None] = []
    for ns in ctx.config.namespaces:
        items, version = await ctx.client.list_versioned(path_of(ns), label_selector=selector)
        out.extend(items)
        versions.append(version)
    return out, _oldest(versions)


def _oldest(versions: list[str | None]) -> str | None:
    try:
        return str(min(int(v) for v in versions if v is not None)) if all(versions) else None
    except ValueError:
        return None
