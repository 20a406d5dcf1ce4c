"""One loop per periodic duty over all Running jobs: the SLA monitor, batch progress.

Contract. ``running_loop(ctx, interval, wanted, tick, label)`` wakes every ``interval``
seconds and runs ``tick(ctx, body)`` for each Running job (``ctx.running``, kept current
by the OfflineJob watch, ``handlers.jobs``) that ``wanted(body)`` selects, at most
``TICK_CONCURRENCY`` at a time. It replaces a kopf timer per Running job (one asyncio task
per job and kopf's processing of each). With peering on, a tick runs only on the active
replica (the scheduling loop's ``replica_verdict``). A tick that fails is logged and tried
again at the next interval; the loop itself never stops until cancelled at cleanup.

A job's first tick comes within one interval after it turned Running (a kopf timer waited
one full interval): the SLA monitor skips windows from before the placement, so this
changes no observation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gleaner.operator.context import OperatorContext
from gleaner.operator.handlers.scheduling import replica_verdict

logger = logging.getLogger(__name__)

TICK_CONCURRENCY = 16

Tick = Callable[[OperatorContext, dict[str, Any]], Awaitable[str]]
Wanted = Callable[[dict[str, Any]], bool]


async def tick_running(ctx: OperatorContext, wanted: Wanted, tick: Tick, label: str) -> int:
    """One round of ``tick`` over the wanted Running jobs; returns how many ticked."""
    bodies = [b for b in list(ctx.running.values()) if wanted(b)]
    sem = asyncio.Semaphore(TICK_CONCURRENCY)

    async def one(body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        async with sem:
            try:
                outcome = await tick(ctx, body)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one job's failure must not stop the others
                logger.exception(
                    "%s of %s/%s failed: %s", label, meta.get("namespace"), meta.get("name"), exc
                )
                return
        logger.debug("%s of %s/%s: %s", label, meta.get("namespace"), meta.get("name"), outcome)

    await asyncio.gather(*(one(b) for b in bodies))
    return len(bodies)


async def running_loop(
    ctx: OperatorContext, interval: float, wanted: Wanted, tick: Tick, label: str
) -> None:
    """Tick the wanted Running jobs every ``interval`` seconds, forever (see above)."""
    while True:
        await asyncio.sleep(interval)
        if not ctx.running:
            continue
        verdict = await replica_verdict(ctx)
        if not verdict.active:
            continue
        await tick_running(ctx, wanted, tick, label)
