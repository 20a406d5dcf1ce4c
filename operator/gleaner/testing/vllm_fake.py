"""A minimal stand-in for vLLM's v1 scheduler surface that the Gleaner KV hook touches.

vLLM is not installed in the test environment (its CPU wheels pull in torch), so the hook
is tested against this model of the pinned scheduler (vllm-project/vllm commit 00024d31,
``vllm/v1/core/sched/scheduler.py``). It reproduces, in our own code, the behaviour the
hook relies on:

- ``requests`` (id → request), ``running``, ``waiting``, ``block_size``,
  ``recompute_kv_load_failures``, ``failed_recving_kv_req_ids``;
- ``kv_cache_manager.get_block_ids(req_id)`` returning one block list per KV group;
- ``_handle_invalid_blocks(invalid_block_ids) -> set[str]`` with vLLM's rules: running
  requests are scanned over their externally computed (cached) blocks only, async loads
  (WAITING_FOR_REMOTE_KVS) over all their blocks; an affected request is truncated to the
  start of its first invalid block; a block shared with an earlier request is recomputed
  by that request only; async-affected ids go to ``failed_recving_kv_req_ids``; the sync
  ids are returned;
- ``schedule()`` schedules every running request from ``num_computed_tokens`` to
  ``num_tokens`` (so a truncated request recomputes), ``update_from_output`` advances the
  computed count and appends one sampled token per request that reached its end.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field


class RequestStatus(enum.Enum):
    WAITING = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    RUNNING = enum.auto()
    FINISHED_STOPPED = enum.auto()


@dataclass
class Request:
    request_id: str
    num_tokens: int
    num_computed_tokens: int
    num_cached_tokens: int = 0
    num_external_computed_tokens: int = 0
    status: RequestStatus = RequestStatus.RUNNING

    def is_finished(self) -> bool:
        return self.status == RequestStatus.FINISHED_STOPPED


@dataclass
class KVCacheManager:
    tables: dict[str, list[int]] = field(default_factory=dict)
    evicted: set[int] = field(default_factory=set)

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return (self.tables[request_id],)

    def evict_blocks(self, block_ids: set[int]) -> None:
        self.evicted |= block_ids


@dataclass
class SchedulerOutput:
    num_scheduled_tokens: dict[str, int]


class Scheduler:
    """The surface of ``vllm.v1.core.sched.scheduler.Scheduler`` the hook uses."""

    def __init__(self, block_size: int = 16, recompute: bool = True) -> None:
        self.block_size = block_size
        self.recompute_kv_load_failures = recompute
        self.requests: dict[str, Request] = {}
        self.running: list[Request] = []
        self.waiting: list[Request] = []
        self.kv_cache_manager = KVCacheManager()
        self.failed_recving_kv_req_ids: set[str] = set()
        self.steps = 0

    def add(self, req: Request, blocks: list[int]) -> Request:
        self.requests[req.request_id] = req
        self.kv_cache_manager.tables[req.request_id] = blocks
        (
            self.waiting if req.status == RequestStatus.WAITING_FOR_REMOTE_KVS else self.running
        ).append(req)
        return req

    def schedule(self) -> SchedulerOutput:
        return SchedulerOutput(
            {
                r.request_id: r.num_tokens - r.num_computed_tokens
                for r in self.running
                if r.num_tokens > r.num_computed_tokens
            }
        )

    def update_from_output(
        self, out: SchedulerOutput, runner_output: object = None
    ) -> dict[str, int]:
        self.steps += 1
        for rid, n in out.num_scheduled_tokens.items():
            req = self.requests[rid]
            req.num_computed_tokens += n
            if req.num_computed_tokens == req.num_tokens:
                req.num_tokens += 1  # one sampled token
        return dict(out.num_scheduled_tokens)

    def _update_requests_with_invalid_blocks(
        self, requests: Iterable[Request], invalid: set[int], evict_blocks: bool = True
    ) -> tuple[set[str], int, set[int]]:
        affected: set[str] = set()
        tokens = 0
        evict: set[int] = set()
        marked: set[int] = set()
        for req in requests:
            table = self.kv_cache_manager.get_block_ids(req.request_id)[0]
            if req.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                computed = (
                    req.num_computed_tokens
                    if req.request_id in self.failed_recving_kv_req_ids
                    else len(table) * self.block_size
                )
            else:
                computed = req.num_cached_tokens
            nblocks = (computed + self.block_size - 1) // self.block_size
            hit = truncated = False
            for idx, block in list(enumerate(table))[:nblocks]:
                if block not in invalid:
                    continue
                hit = True
                if block in marked:
                    continue
                marked.add(block)
                if truncated:
                    continue
                truncated = True
                req.num_computed_tokens = idx * self.block_size
                tokens += computed - req.num_computed_tokens
                req.num_external_computed_tokens -= computed - req.num_computed_tokens
                if evict_blocks:
                    evict.update(table[idx:])
            if hit:
                if not truncated:
                    tokens += req.num_computed_tokens - req.num_cached_tokens
                    req.num_computed_tokens = req.num_cached_tokens
                affected.add(req.request_id)
        return affected, tokens, evict

    def _handle_invalid_blocks(self, invalid_block_ids: set[int]) -> set[str]:
        waiting = (r for r in self.waiting if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS)
        async_ids, _, _ = self._update_requests_with_invalid_blocks(
            waiting, invalid_block_ids, evict_blocks=False
        )
        sync_ids, _, evict = self._update_requests_with_invalid_blocks(
            self.running, invalid_block_ids, evict_blocks=True
        )
        if not async_ids and not sync_ids:
            return set()
        if evict and not self.recompute_kv_load_failures:
            self.kv_cache_manager.evict_blocks(evict)
        if not self.recompute_kv_load_failures:
            return async_ids | sync_ids
        self.failed_recving_kv_req_ids |= async_ids
        return sync_ids


class SchedulerTwoArg(Scheduler):
    """A later vLLM's shape: ``_handle_invalid_blocks`` takes ``num_scheduled_tokens`` too."""

    def _handle_invalid_blocks(  # type: ignore[override]
        self, invalid_block_ids: set[int], num_scheduled_tokens: dict[str, int]
    ) -> set[str]:
        return super()._handle_invalid_blocks(invalid_block_ids)
