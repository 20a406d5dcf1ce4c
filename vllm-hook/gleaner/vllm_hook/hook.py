"""The hook proper: merge agent-invalidated KV blocks into vLLM's recompute path.

Pinned against vLLM's v1 scheduler (``vllm/v1/core/sched/scheduler.py``) in the
one-argument form ``Scheduler._handle_invalid_blocks(self, invalid_block_ids: set[int])
-> set[str]`` (read at vllm-project/vllm commit 00024d31), with
``kv_cache_manager.get_block_ids(req_id) -> tuple[list[int], ...]``, ``requests``,
``block_size`` and ``Request.num_computed_tokens``. :func:`install` refuses any scheduler
whose ``_handle_invalid_blocks`` has another signature (later vLLM releases add an
argument), so a version mismatch disables the hook with a log line instead of corrupting
the engine.

:func:`apply_invalidations` is the whole integration (under 20 lines): vLLM's own path
truncates requests whose externally loaded (prefix-cached) blocks were hit, async loads
included; blocks computed locally after the prefix are outside that path's scan, so the
same truncation rule (back to the first invalid block) is applied to them directly. The
scheduler then re-schedules the truncated tokens: vLLM recomputes them.

Truncation keeps a request's block ids, so it must never run on blocks in a quarantined KV
page (the request would recompute into the quarantine). It therefore runs only for an
engine without the memory path (:mod:`memory`), which reports no OFFLINE_HANDLES, so none of
its pages is reclaimed; with the memory path on, :func:`memory.install` never calls it and
re-reads the shim instead (preemption gives fresh blocks).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)


def apply_invalidations(sched: Any, invalid: Mapping[str, set[int]]) -> set[str]:
    """Truncate each affected request to before its first invalid block; the request ids."""
    if not invalid:
        return set()
    affected: set[str] = set(sched._handle_invalid_blocks(set().union(*invalid.values())))
    for rid, blocks in invalid.items():
        req = sched.requests.get(rid)
        if req is None or req.is_finished():
            continue
        table = sched.kv_cache_manager.get_block_ids(rid)[0]
        hits = [i for i, b in enumerate(table) if b in blocks]
        if hits and hits[0] * sched.block_size < req.num_computed_tokens:
            req.num_computed_tokens = hits[0] * sched.block_size
            affected.add(rid)
    return affected


def signature_matches(scheduler_cls: type) -> bool:
    """True if ``_handle_invalid_blocks`` has the pinned one-argument form."""
    fn = getattr(scheduler_cls, "_handle_invalid_blocks", None)
    if fn is None:
        return False
    params = list(inspect.signature(fn).parameters)
    return params == ["self", "invalid_block_ids"]


def install(scheduler_cls: type, drain: Callable[[], Mapping[str, set[int]]]) -> bool:
    """Wrap ``scheduler_cls.update_from_output`` to apply ``drain()`` after every step."""
    if not signature_matches(scheduler_cls):
        log.warning("gleaner: vLLM scheduler signature differs from the pinned one; hook off")
        return False
    original = scheduler_cls.update_from_output  # type: ignore[attr-defined]
    if getattr(original, "__gleaner_hook__", False):
        return True

    def update_from_output(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        affected = apply_invalidations(self, drain())
        if affected:
            log.info("gleaner: %d request(s) recompute reclaimed KV blocks", len(affected))
        return out

    update_from_output.__gleaner_hook__ = True  # type: ignore[attr-defined]
    scheduler_cls.update_from_output = update_from_output  # type: ignore[attr-defined]
    return True
