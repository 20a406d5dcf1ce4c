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

Sizes. The default block size (tokens per KV block) and bytes per block are the shared engine
model's (``gleaner.perfmodel.engine.LLAMA31_8B_H100``: the simulator and the agent's simulated
backend run the same one); a test passes its own when it needs a small pool.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gleaner.perfmodel.engine import LLAMA31_8B_H100

ENGINE = LLAMA31_8B_H100
"""The engine model the fake's default sizes come from."""


class RequestStatus(enum.Enum):
    WAITING = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
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

    def __init__(self, block_size: int = ENGINE.block_tokens, recompute: bool = True) -> None:
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


# --- The engine model: block pool, KV cache manager, scheduler, runner -------------------
#
# Modelled on vllm-project/vllm ``vllm/v1/core/block_pool.py`` (commit c59cb794),
# ``vllm/v1/core/sched/scheduler.py`` (commit b4622cf9: ``_preempt_request``,
# ``_update_after_schedule``, ``update_from_output``), ``vllm/v1/outputs.py`` (commit
# 1b55f1e9: ``ModelRunnerOutput.sampled_token_ids`` / ``req_id_to_index``). Our own code:
# - a block's ``ref_cnt``; ``BlockPool.touch`` takes a block out of the free queue when its
#   count was 0 and increments it; ``free_blocks`` decrements and puts blocks that reach 0
#   back (hashless at the front, cached at the back); ``get_new_blocks`` pops from the front
#   and evicts the popped block's prefix-cache hash; ``evict_blocks`` drops hashes only;
#   block 0 is the null block, never in the queue;
# - prefix caching by chained hashes of full blocks; a waiting request with no computed
#   tokens starts from its longest cached prefix (never its last token);
# - ``_preempt_request``: frees the request's blocks (last first), status PREEMPTED,
#   ``num_computed_tokens = 0``, back at the head of ``waiting`` (the caller removed it from
#   ``running``); resumed requests carry their whole new block table to the runner;
# - the runner keeps its own copy of each request's block table (new: whole; running:
#   appended; resumed: replaced) and a KV store per block slot; a slot in a lost block reads
#   as garbage. The sampled token is a function of every token read back, so a request that
#   attended to a lost slot samples a different token than the reference run.


class FreeKVCacheBlockQueue:
    """The free blocks, in eviction order (front first)."""

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self._q: dict[int, KVCacheBlock] = {b.block_id: b for b in blocks}

    @property
    def num_free_blocks(self) -> int:
        return len(self._q)

    def popleft(self) -> KVCacheBlock:
        bid = next(iter(self._q))
        return self._q.pop(bid)

    def remove(self, block: KVCacheBlock) -> None:
        del self._q[block.block_id]

    def append(self, block: KVCacheBlock) -> None:
        self._q[block.block_id] = block

    def prepend(self, blocks: list[KVCacheBlock]) -> None:
        rest = self._q
        self._q = {b.block_id: b for b in blocks}
        self._q.update(rest)

    def __contains__(self, block: KVCacheBlock) -> bool:
        return block.block_id in self._q


@dataclass(eq=False)
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None
    is_null: bool = False


class BlockPool:
    def __init__(self, num_gpu_blocks: int, enable_caching: bool = True) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.cached_block_hash_to_block: dict[int, KVCacheBlock] = {}
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True

    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks

    def get_new_blocks(self, n: int) -> list[KVCacheBlock]:
        if n > self.get_num_free_blocks():
            raise ValueError(f"Cannot get {n} free blocks from the pool")
        out = []
        for _ in range(n):
            b = self.free_block_queue.popleft()
            if self.enable_caching:
                self._maybe_evict_cached_block(b)
            assert b.ref_cnt == 0
            b.ref_cnt += 1
            out.append(b)
        return out

    def _maybe_evict_cached_block(self, block: KVCacheBlock) -> bool:
        h = block.block_hash
        if h is None:
            return False
        if self.cached_block_hash_to_block.get(h) is block:
            del self.cached_block_hash_to_block[h]
        block.block_hash = None
        return True

    def touch(self, blocks: list[KVCacheBlock]) -> None:
        for b in blocks:
            if b.ref_cnt == 0 and not b.is_null:
                self.free_block_queue.remove(b)
            b.ref_cnt += 1

    def free_blocks(self, ordered: list[KVCacheBlock]) -> None:
        for b in ordered:
            b.ref_cnt -= 1
        freeable = [b for b in ordered if b.ref_cnt == 0 and not b.is_null]
        self.free_block_queue.prepend([b for b in freeable if b.block_hash is None])
        for b in freeable:
            if b.block_hash is not None:
                self.free_block_queue.append(b)

    def evict_blocks(self, block_ids: set[int]) -> None:
        for bid in block_ids:
            self._maybe_evict_cached_block(self.blocks[bid])


class PoolKVCacheManager:
    """``kv_cache_manager`` with one KV cache group over a :class:`BlockPool`."""

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True) -> None:
        self.block_size = block_size
        self.block_pool = BlockPool(num_blocks, enable_caching)
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return ([b.block_id for b in self.req_to_blocks.get(request_id, [])],)

    def _hashes(self, req: EngineRequest, nblocks: int) -> list[int]:
        out, h = [], 0
        for i in range(nblocks):
            h = hash((h, tuple(req.all_token_ids[i * self.block_size : (i + 1) * self.block_size])))
            out.append(h)
        return out

    def get_computed_blocks(self, req: EngineRequest) -> tuple[list[KVCacheBlock], int]:
        if not self.block_pool.enable_caching:
            return [], 0
        hits = []
        for h in self._hashes(req, (req.num_tokens - 1) // self.block_size):
            b = self.block_pool.cached_block_hash_to_block.get(h)
            if b is None:
                break
            hits.append(b)
        return hits, len(hits) * self.block_size

    def allocate_slots(
        self, req: EngineRequest, num_new_tokens: int, computed: list[KVCacheBlock] | None = None
    ) -> list[int] | None:
        have = self.req_to_blocks.setdefault(req.request_id, [])
        computed = computed or []
        total = req.num_computed_tokens + len(computed) * self.block_size + num_new_tokens
        need = -(-total // self.block_size) - len(have) - len(computed)
        evictable = sum(1 for b in computed if b.ref_cnt == 0)
        if need > self.block_pool.get_num_free_blocks() - evictable:
            if not have:
                del self.req_to_blocks[req.request_id]
            return None
        self.block_pool.touch(computed)
        have.extend(computed)
        new = self.block_pool.get_new_blocks(max(0, need))
        have.extend(new)
        if self.block_pool.enable_caching:
            full = min(total, req.num_tokens) // self.block_size
            for b, h in zip(have[:full], self._hashes(req, full), strict=True):
                if b.block_hash is None:
                    b.block_hash = h
                    self.block_pool.cached_block_hash_to_block.setdefault(h, b)
        return [b.block_id for b in new]

    def free(self, req: EngineRequest) -> None:
        blocks = self.req_to_blocks.pop(req.request_id, [])
        self.block_pool.free_blocks(list(reversed(blocks)))


@dataclass
class EngineRequest:
    request_id: str
    all_token_ids: list[int]
    max_tokens: int
    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int = -1
    num_external_computed_tokens: int = 0
    num_preemptions: int = 0
    status: RequestStatus = RequestStatus.WAITING
    spec_token_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.num_prompt_tokens = self.num_prompt_tokens or len(self.all_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.all_token_ids[self.num_prompt_tokens :]

    def is_finished(self) -> bool:
        return self.status == RequestStatus.FINISHED_STOPPED


@dataclass
class EngineSchedulerOutput:
    num_scheduled_tokens: dict[str, int]
    new_block_ids: dict[str, list[int]]
    resumed_req_ids: set[str]
    new_req_ids: set[str]


@dataclass
class ModelRunnerOutput:
    req_ids: list[str]
    req_id_to_index: dict[str, int]
    sampled_token_ids: list[list[int]]


@dataclass
class Config:
    async_scheduling: bool = False
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1


@dataclass
class KVCacheTensor:
    size: int
    shared_by: list[str]


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list[KVCacheTensor]
    kv_cache_groups: list[object]


class EngineScheduler(Scheduler):
    """The pinned scheduler's engine loop over a real block pool (see the section header)."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int = ENGINE.block_tokens,
        enable_caching: bool = True,
        bytes_per_block: int = ENGINE.block_bytes,
        token_budget: int = 1 << 20,
    ) -> None:
        super().__init__(block_size=block_size)
        self.kv_cache_manager = PoolKVCacheManager(num_blocks, block_size, enable_caching)  # type: ignore[assignment]
        self.requests: dict[str, EngineRequest] = {}  # type: ignore[assignment]
        self.running: list[EngineRequest] = []  # type: ignore[assignment]
        self.waiting: list[EngineRequest] = []  # type: ignore[assignment]
        self.scheduler_config = Config()
        self.parallel_config = Config()
        self.kv_cache_config = KVCacheConfig(
            num_blocks, [KVCacheTensor(num_blocks * bytes_per_block, ["layer.0"])], [object()]
        )
        self.token_budget = token_budget
        self.preempted = 0

    def add_request(self, req: EngineRequest) -> None:
        self.requests[req.request_id] = req
        self.waiting.append(req)

    def _preempt_request(self, request: EngineRequest, timestamp: float) -> None:
        assert request.status == RequestStatus.RUNNING
        self.kv_cache_manager.free(request)  # type: ignore[attr-defined]
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids = []
        request.num_preemptions += 1
        self.preempted += 1
        self.waiting.insert(0, request)

    def schedule(self) -> EngineSchedulerOutput:  # type: ignore[override]
        kvm: PoolKVCacheManager = self.kv_cache_manager  # type: ignore[assignment]
        out = EngineSchedulerOutput({}, {}, set(), set())
        budget = self.token_budget
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if n <= 0:
                i += 1
                continue
            while (new := kvm.allocate_slots(req, n)) is None:
                victim = self.running.pop()
                self._preempt_request(victim, 0.0)
                out.num_scheduled_tokens.pop(victim.request_id, None)
                preempted = True
                if victim is req:
                    break
            if new is None:
                break
            out.num_scheduled_tokens[req.request_id] = n
            out.new_block_ids[req.request_id] = new
            budget -= n
            i += 1
        while not preempted and self.waiting and budget > 0:
            req = self.waiting[0]
            computed: list[KVCacheBlock] = []
            if req.num_computed_tokens == 0:
                computed, _ = kvm.get_computed_blocks(req)
            n = min(req.num_tokens - len(computed) * self.block_size, budget)
            if kvm.allocate_slots(req, n, computed) is None:
                break
            self.waiting.pop(0)
            (out.resumed_req_ids if req.status == RequestStatus.PREEMPTED else out.new_req_ids).add(
                req.request_id
            )
            req.status = RequestStatus.RUNNING
            req.num_computed_tokens = len(computed) * self.block_size
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = req.num_computed_tokens
            self.running.append(req)
            out.num_scheduled_tokens[req.request_id] = n
            out.new_block_ids[req.request_id] = kvm.get_block_ids(req.request_id)[0]
            budget -= n
        for rid, n in out.num_scheduled_tokens.items():  # _update_after_schedule
            self.requests[rid].num_computed_tokens += n
        return out

    def update_from_output(  # type: ignore[override]
        self, scheduler_output: EngineSchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[str, list[int]]:
        self.steps += 1
        emitted: dict[str, list[int]] = {}
        for rid in scheduler_output.num_scheduled_tokens:
            req = self.requests.get(rid)
            if req is None or req.is_finished():
                continue
            idx = model_runner_output.req_id_to_index[rid]
            new = model_runner_output.sampled_token_ids[idx]
            if not new:
                continue
            req.all_token_ids.extend(new)
            emitted[rid] = list(new)
            if len(req.output_token_ids) >= req.max_tokens:
                req.status = RequestStatus.FINISHED_STOPPED
                self.kv_cache_manager.free(req)  # type: ignore[attr-defined]
                self.running.remove(req)
        return emitted


GARBAGE = -1
"""What a slot of a lost block reads as."""


class FakeRunner:
    """The worker: its own block tables, a KV store per slot, deterministic sampling."""

    def __init__(self, block_size: int, lost: Callable[[int], bool] = lambda b: False) -> None:
        self.block_size = block_size
        self.lost = lost
        self.tables: dict[str, list[int]] = {}
        self.kv: dict[tuple[int, int], int] = {}

    def forget(self, blocks: Iterable[int]) -> None:
        """Memory behind these blocks was replaced (restored pages come back zeroed)."""
        gone = set(blocks)
        for key in [k for k in self.kv if k[0] in gone]:
            del self.kv[key]

    def execute_model(
        self, out: EngineSchedulerOutput, requests: dict[str, EngineRequest]
    ) -> ModelRunnerOutput:
        ids = list(out.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in ids:
            if rid in out.new_req_ids or rid in out.resumed_req_ids:
                self.tables[rid] = list(out.new_block_ids[rid])
            else:
                self.tables[rid].extend(out.new_block_ids.get(rid, []))
            req = requests[rid]
            end = req.num_computed_tokens  # already advanced by the scheduler
            start = end - out.num_scheduled_tokens[rid]
            table = self.tables[rid]
            for pos in range(start, end):
                blk = table[pos // self.block_size]
                if not self.lost(blk):
                    self.kv[(blk, pos % self.block_size)] = req.all_token_ids[pos]
            if end < req.num_tokens:
                sampled.append([])  # a partial prefill samples nothing
                continue
            seen = []
            for pos in range(end):
                blk = table[pos // self.block_size]
                slot = (blk, pos % self.block_size)
                seen.append(GARBAGE if self.lost(blk) else self.kv.get(slot, GARBAGE))
            sampled.append([reference_token(seen)])
        return ModelRunnerOutput(ids, {r: i for i, r in enumerate(ids)}, sampled)


def reference_token(tokens: list[int]) -> int:
    """The token a correct forward pass samples after ``tokens``."""
    acc = 7
    for t in tokens:
        acc = (acc * 31 + t) % 50021
    return acc


class FakeKvPages:
    """The shim's page API over one KV allocation (``shimapi.KvPages``): every page backed
    at first; :meth:`reclaim` / :meth:`restore` change states and bump the generation once
    per call, as the shim does per RECLAIM / RESTORE; a reclaim bumps each page's epoch.
    ``with_epochs=False`` models a shim without ``gleaner_kv_page_epochs``."""

    def __init__(self, base: int, nbytes: int, page: int, with_epochs: bool = True) -> None:
        self.base, self.page = base, page
        self.state = {base + i * page: 0 for i in range(-(-nbytes // page))}
        self.epoch = dict.fromkeys(self.state, 0)
        self.with_epochs = with_epochs
        self.gen = 1
        self.on_restore: Callable[[list[int]], None] = lambda vas: None

    def page_bytes(self) -> int:
        return self.page

    def generation(self) -> int:
        return self.gen

    def pages(self) -> list[tuple[int, int]]:
        return sorted(self.state.items())

    def epochs(self) -> list[int] | None:
        return [self.epoch[va] for va in sorted(self.state)] if self.with_epochs else None

    def reclaim(self, vas: Iterable[int]) -> None:
        for va in vas:
            self.state[va] = 1
            self.epoch[va] += 1
        self.gen += 1

    def restore(self, vas: Iterable[int]) -> None:
        got = list(vas)
        for va in got:
            self.state[va] = 0
        self.on_restore(got)
        self.gen += 1

    def quarantined(self, lo: int, hi: int) -> bool:
        """Whether any page under [lo, hi) is quarantined."""
        first = self.base + (lo - self.base) // self.page * self.page
        return any(self.state.get(va) == 1 for va in range(first, hi, self.page))
