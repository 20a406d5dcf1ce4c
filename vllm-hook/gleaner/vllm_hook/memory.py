"""The KV memory adapter: keep vLLM's block pool off reclaimed pages, recompute what was
lost, and publish the page table for OFFLINE_HANDLES.

Pinned to vllm-project/vllm (see docs/vllm-hook.md for the commits read): the scheduler's
``kv_cache_manager.block_pool`` (``blocks``, ``touch``, ``free_blocks``, ``evict_blocks``,
``null_block``), ``kv_cache_manager.get_block_ids``, ``running``, ``requests``,
``_preempt_request(request, timestamp)`` (caller removes it from ``running``),
``update_from_output(scheduler_output, model_runner_output)`` with
``model_runner_output.sampled_token_ids[req_id_to_index[rid]]``.

Contract of :meth:`MemoryHook.before_update` / :meth:`MemoryHook.after_update`, called
around every ``update_from_output`` (the step boundary, on the engine thread):

1. read ``gleaner_kv_generation()``; unchanged → nothing but the snapshot;
2. changed → read the page epochs (per page, how many times the shim reclaimed it) and
   states; plan with :func:`pages.plan_step`. A page is *lost* when it is newly
   quarantined or its epoch moved since the last check — so a page reclaimed *and*
   restored between two checks (same state, fresh memory) is caught, and only its blocks
   recompute. With a shim that has no epochs (older build) the generation rule applies: the
   shim bumps the generation once per operation, so when it moved by more than the visible
   kinds of change explain, every page counts as lost (all running requests recompute,
   every prefix-cache hash is dropped) — safe, rare;
3. before vLLM's update: the sampled tokens of this step are dropped for every request
   that read a lost block (the step straddled the change);
4. after it: hashes of lost blocks evicted; blocks in quarantined pages retired (``touch``:
   one reference of ours, so the pool never hands them out); requests holding a lost block
   preempted (their blocks freed, the retired ones stay out of the free queue; on
   re-schedule the prefix cache gives back the blocks before the first lost one, so about
   ``num_computed_tokens − first lost index × block_size`` tokens recompute); retired blocks
   whose pages are all backed again released (``free_blocks`` of our reference).

Truncating a request in place (the INVALIDATE_BLOCKS rule) is not enough here: the request
would keep the lost block ids in its table and recompute *into the quarantine page*.
Preemption is vLLM's own way to give a request a fresh block table. So with the memory
path on, INVALIDATE_BLOCKS frames are never applied by truncation: the shim's page states
are the authority (the agent sends them only after the shim acknowledged the RECLAIM, so
the pages already read quarantined); their arrival only triggers :meth:`MemoryHook.recheck`
right after the update (preempt now rather than at the next step). Truncation
(:func:`hook.apply_invalidations`) runs only for an engine without the memory path, which
reports no handles, so none of its KV pages can be quarantined.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gleaner.protocol.node import KV_PAGE_QUARANTINED
from gleaner.vllm_hook import pages as pg
from gleaner.vllm_hook.shimapi import KvPages

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the reporter needs, taken at a step boundary (immutable)."""

    table: pg.PageTable
    requests: dict[str, pg.RequestBlocks]
    quarantined: frozenset[int]
    block_size: int


def unsupported(sched: Any) -> str | None:
    """Why this scheduler cannot use the memory path (None: it can)."""
    par = getattr(sched, "parallel_config", None)
    if par is None or getattr(par, "tensor_parallel_size", 1) != 1:
        return "tensor_parallel_size != 1 (scheduler and workers in other processes)"
    if getattr(par, "pipeline_parallel_size", 1) != 1:
        return "pipeline_parallel_size != 1"
    if getattr(getattr(sched, "scheduler_config", None), "async_scheduling", False):
        return "async scheduling is on (a step's output arrives after the next schedule)"
    groups = getattr(getattr(sched, "kv_cache_config", None), "kv_cache_groups", None)
    if groups is None or len(groups) != 1:
        return "not exactly one KV cache group"
    return None


class MemoryHook:
    """One engine's memory path (see the module docstring)."""

    def __init__(
        self,
        shim: KvPages,
        layouts: Sequence[pg.KvLayout],
        publish: Callable[[Snapshot], None] | None = None,
    ) -> None:
        self.shim = shim
        self.layouts = list(layouts)
        self.publish = publish
        self.table: pg.PageTable | None = None
        self.generation = -1
        self.quarantined: frozenset[int] = frozenset()
        self.retired: set[int] = set()
        self.plan = pg.StepPlan()
        self.epochs: dict[int, int] = {}
        """Page VA → its reclaim count at the last check (empty without shim epochs)."""
        self.resets = 0
        self.recomputed = 0
        self.rechecks = 0
        self._lock = threading.Lock()

    def _read_pages(self) -> tuple[list[int] | None, list[tuple[int, int]]]:
        """(epochs or None, page states), consistent in length. Epochs are read first: a
        reclaim between the two reads then shows in the states (retired at once) and again
        as a moved epoch at the next check (a second, harmless recompute); the other order
        would leave a quarantined page unretired for a step."""
        for _ in range(3):
            epochs = self.shim.epochs()
            states = self.shim.pages()
            if epochs is None or len(epochs) == len(states):
                return epochs, states
        return None, states  # pages keep appearing: fall back to the generation rule

    # -- the step boundary ---------------------------------------------------------------

    def before_update(self, sched: Any, runner_output: Any) -> pg.StepPlan:
        gen = self.shim.generation()
        if gen == self.generation and self.table is not None:
            self.plan = pg.StepPlan()
            return self.plan
        epochs, states = self._read_pages()
        vas = [va for va, _ in states]
        now = frozenset(va for va, st in states if st == KV_PAGE_QUARANTINED)
        rebuilt = self.table is None or tuple(vas) != self.table.pages
        if rebuilt:
            self.table = pg.page_table(self.layouts, vas, self.shim.page_bytes())
        assert self.table is not None
        before = self.quarantined
        lost_pages: Sequence[int] = ()
        if epochs is not None:
            # A page whose reclaim count moved lost its content, whatever its state now.
            old = self.epochs
            lost_pages = [va for va, e in zip(vas, epochs, strict=True) if old.get(va, e) != e]
            self.epochs = dict(zip(vas, epochs, strict=True))
        else:  # (stale epochs are kept: comparing against them later only over-reports)
            visible = int(bool(now - before)) + int(bool(before - now))
            if self.generation >= 0 and not rebuilt and gen - self.generation > max(visible, 1):
                lost_pages = self.table.pages  # an operation we cannot see: assume the worst
                self.resets += 1
                log.warning("gleaner: KV pages changed more than once since the last step "
                            "and the shim has no page epochs; every running request "
                            "recomputes")  # fmt: skip
        holders = {
            r.request_id: sched.kv_cache_manager.get_block_ids(r.request_id)[0]
            for r in sched.running
        }
        null = getattr(getattr(sched.kv_cache_manager, "block_pool", None), "null_block", None)
        self.plan = pg.plan_step(
            self.table,
            before,
            now,
            self.retired,
            holders,
            lost_pages=lost_pages,
            null_block=None if null is None else null.block_id,
        )
        self.generation = gen
        self.quarantined = now
        sampled = getattr(runner_output, "sampled_token_ids", None)
        index = getattr(runner_output, "req_id_to_index", {})
        if isinstance(sampled, list):
            for rid in self.plan.recompute:
                i = index.get(rid)
                if i is not None and i < len(sampled):
                    sampled[i] = []
        return self.plan

    def after_update(self, sched: Any) -> set[str]:
        """Apply :attr:`plan` (module docstring, step 4); the requests preempted."""
        plan = self.plan
        preempted: set[str] = set()
        if plan:
            pool = sched.kv_cache_manager.block_pool
            if plan.lost:
                pool.evict_blocks(set(plan.lost))
            retire = [pool.blocks[b] for b in sorted(plan.retire)]
            pool.touch(retire)
            self.retired.update(plan.retire)
            now = time.monotonic()
            for rid in plan.recompute:
                req = sched.requests.get(rid)
                if req is None or req.is_finished() or req not in sched.running:
                    continue
                sched.running.remove(req)
                sched._preempt_request(req, now)
                preempted.add(rid)
            if plan.release:
                pool.free_blocks([pool.blocks[b] for b in sorted(plan.release)])
                self.retired.difference_update(plan.release)
            self.recomputed += len(preempted)
            if preempted:
                log.info("gleaner: %d request(s) recompute KV lost to reclaimed pages",
                         len(preempted))  # fmt: skip
            self.plan = pg.StepPlan()
        if self.publish is not None and self.table is not None:
            self.publish(self.snapshot(sched))
        return preempted

    def recheck(self, sched: Any) -> set[str]:
        """Read the shim now and apply what changed (after vLLM's update: this step's
        tokens stand — with synchronous scheduling its GPU work finished before the update,
        so a reclaim seen only now cannot have touched it); the requests preempted."""
        self.rechecks += 1
        self.before_update(sched, None)
        return self.after_update(sched)

    def snapshot(self, sched: Any) -> Snapshot:
        assert self.table is not None
        reqs = {
            r.request_id: pg.RequestBlocks(
                tuple(sched.kv_cache_manager.get_block_ids(r.request_id)[0]),
                r.num_computed_tokens,
            )
            for r in sched.running
        }
        return Snapshot(self.table, reqs, self.quarantined, sched.block_size)


def install(
    scheduler_cls: type,
    drain: Callable[[], Any],
    memory_for: Callable[[Any], MemoryHook | None],
) -> bool:
    """Wrap ``update_from_output`` for the memory path and the INVALIDATE_BLOCKS feed.

    ``memory_for(sched)`` is asked once per scheduler instance (None: no memory path, e.g.
    unsupported or the KV cache was not allocated through the shim: nothing is reported,
    so nothing of it is reclaimed). Invalidations are then applied as before.
    """
    from gleaner.vllm_hook.hook import apply_invalidations, signature_matches

    if not signature_matches(scheduler_cls):
        log.warning("gleaner: vLLM scheduler signature differs from the pinned one; hook off")
        return False
    original = scheduler_cls.update_from_output  # type: ignore[attr-defined]
    if getattr(original, "__gleaner_hook__", False):
        return True

    def update_from_output(self: Any, scheduler_output: Any, model_runner_output: Any) -> Any:
        mem: MemoryHook | None
        if "_gleaner_memory" not in self.__dict__:
            why = unsupported(self)
            if why is not None:
                log.warning("gleaner: KV memory path off: %s; no handles reported", why)
                mem = None
            else:
                mem = memory_for(self)
            self.__dict__["_gleaner_memory"] = mem
        mem = self.__dict__["_gleaner_memory"]
        if mem is not None:
            mem.before_update(self, model_runner_output)
        out = original(self, scheduler_output, model_runner_output)
        invalid = drain()
        if mem is not None:
            mem.after_update(self)
            if invalid:  # never truncate: the page states decide (module docstring)
                mem.recheck(self)
            return out
        affected = apply_invalidations(self, invalid)
        if affected:
            log.info("gleaner: %d request(s) recompute reclaimed KV blocks", len(affected))
        return out

    update_from_output.__gleaner_hook__ = True  # type: ignore[attr-defined]
    scheduler_cls.update_from_output = update_from_output  # type: ignore[attr-defined]
    return True
