"""The offline batch job of the node-level simulation: its memory curve and its KV-cache layout.

Contract.

- :func:`memory_curve` derives the job's one-time profile (throughput against memory per GPU)
  from the same engine model as the online engine (``gleaner.perfmodel.engine``: with ``kv``
  GiB of KV cache it keeps ``B = min(max_seqs, kv / (prompt + output/2) tokens)`` requests in
  flight, ``tokens/s = B·output / (output·decode(B) + B·prefill(prompt))``).
- :class:`OfflineKV` tracks *where* the job's KV blocks live: a list of memory handles in
  mapping order (oldest first), each holding blocks of several offline requests. Blocks are
  allocated first-fit in mapping order (what vLLM's free-block queue converges to: recycled
  blocks are handed out before never-used ones). :meth:`OfflineKV.handle_map` exports the
  layout as the agent's ``HandleMap`` (one ``KvSpan`` per request and handle, whose tokens
  are the tokens from the span's first block to the end of the request), so reclamation is
  decided by the agent's own ``plan_reclamation``; :meth:`OfflineKV.remove_handles` applies
  the outcome (lost blocks and everything after them are recomputed).

Everything is deterministic given the generator passed in.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from gleaner.runtime_agent.policy.reclaim import HandleMap, KvSpan
from gleaner.simulator.latency import LLAMA31_8B_H100, LatencyModel
from gleaner.simulator.workload import LengthConfig, lognormal_lengths

BLOCK_TOKENS = LLAMA31_8B_H100.block_tokens
"""Tokens per KV block (the engine model's, vLLM's default block size)."""


class OfflineJobConfig(BaseModel):
    """The offline batch job colocated on the node."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: LengthConfig = Field(
        default_factory=lambda: LengthConfig(mean=1024, sigma=0.6, max=8192)
    )
    output_tokens: LengthConfig = Field(
        default_factory=lambda: LengthConfig(mean=256, sigma=0.6, max=2048)
    )
    max_seqs: int = Field(default=256, ge=1, description="Largest offline batch.")
    weights_gib: float | None = Field(
        default=None, gt=0, description="Resident weights, GiB (default: the latency model's)."
    )
    full_speed_fraction: float = Field(
        default=0.95, gt=0, le=1, description="M_req: memory reaching this share of max speed."
    )


@dataclass(frozen=True)
class MemoryCurve:
    """Throughput (tokens/s) against memory per GPU (GiB, weights included)."""

    memory_gib: tuple[float, ...]
    tokens_per_second: tuple[float, ...]
    required_memory_gib: float
    weights_gib: float

    @property
    def standalone(self) -> float:
        return self.tokens_per_second[-1]

    def rate(self, memory_gib: float) -> float:
        """Linear interpolation, 0 below the first point, flat above the last."""
        if memory_gib < self.memory_gib[0]:
            return 0.0
        return float(np.interp(memory_gib, self.memory_gib, self.tokens_per_second))


def batch_throughput(model: LatencyModel, job: OfflineJobConfig, kv_gib: float) -> float:
    """Steady-state output tokens/s of the job with ``kv_gib`` of KV cache (the engine
    model's :meth:`~gleaner.perfmodel.engine.EngineModel.batch_throughput` at the job's mean
    lengths)."""
    return model.batch_throughput(
        kv_gib, job.prompt_tokens.mean, job.output_tokens.mean, job.max_seqs
    )


def memory_curve(
    model: LatencyModel, job: OfflineJobConfig, max_memory_gib: float, points: int = 24
) -> MemoryCurve:
    """The job's memory curve from ``weights`` up to ``max_memory_gib`` per GPU."""
    weights = job.weights_gib or model.weights_gib
    kv = np.linspace(0.25, max_memory_gib - weights, points)
    tps = np.array([batch_throughput(model, job, float(k)) for k in kv])
    tps = np.maximum.accumulate(tps)
    mem = weights + kv
    target = job.full_speed_fraction * float(tps[-1])
    req = float(mem[int(np.argmax(tps >= target))])
    keep = tps > 0
    return MemoryCurve(
        memory_gib=tuple(float(m) for m in mem[keep]),
        tokens_per_second=tuple(float(t) for t in tps[keep]),
        required_memory_gib=req,
        weights_gib=weights,
    )


@dataclass
class _Req:
    ctx: int
    target: int
    blocks: list[int] = field(default_factory=list)  # handle id of each block, in order
    dropped: bool = False


@dataclass
class OfflineKV:
    """KV-cache layout of the offline job over its memory handles (see module docstring)."""

    handle_tokens: int
    job: OfflineJobConfig
    rng: np.random.Generator
    _order: dict[int, int] = field(default_factory=dict)  # handle id -> mapping sequence
    _free: dict[int, int] = field(default_factory=dict)  # handle id -> free blocks
    _heap: list[tuple[int, int]] = field(default_factory=list)
    _reqs: dict[int, _Req] = field(default_factory=dict)
    _pending: deque[_Req] = field(default_factory=deque)
    _next_handle: int = 0
    _next_req: int = 0
    _seq: int = 0
    finished: int = 0
    recompute_tokens: int = 0
    """Tokens recomputed because requests were preempted for lack of blocks."""

    @property
    def blocks_per_handle(self) -> int:
        return max(1, self.handle_tokens // BLOCK_TOKENS)

    @property
    def handles(self) -> int:
        return len(self._order)

    @property
    def active(self) -> int:
        return len(self._reqs)

    def free_blocks(self) -> int:
        return sum(self._free.values())

    def add_handles(self, n: int) -> None:
        """Map ``n`` new (empty) handles, newest last."""
        for _ in range(n):
            h = self._next_handle
            self._next_handle += 1
            self._seq += 1
            self._order[h] = self._seq
            self._free[h] = self.blocks_per_handle
            heapq.heappush(self._heap, (self._seq, h))
        self._admit()

    def handle_map(self) -> HandleMap:
        """The layout as the agent's HandleMap, handles in mapping order (oldest first)."""
        spans: dict[int, list[KvSpan]] = {
            h: [] for h in sorted(self._order, key=lambda h: self._order[h])
        }
        for rid, req in self._reqs.items():
            first: dict[int, list[int]] = {}
            for i, h in enumerate(req.blocks):
                first.setdefault(h, []).append(i)
            name = str(rid)
            for h, idx in first.items():
                spans[h].append(
                    KvSpan(
                        request=name,
                        blocks=tuple(idx),
                        tokens=max(0, req.ctx - idx[0] * BLOCK_TOKENS),
                    )
                )
        return {h: tuple(s) for h, s in spans.items()}

    def remove_handles(self, chosen: list[int]) -> int:
        """Unmap ``chosen`` handles; affected requests lose those blocks and everything after.

        Returns the tokens to recompute (the earliest lost block to the end, per request).
        Lost tokens are re-allocated at once where free blocks remain; requests that no longer
        fit go back to the pending queue (their whole context to be recomputed later).
        """
        gone = set(chosen)
        recompute = 0
        for h in chosen:
            self._order.pop(h, None)
            self._free.pop(h, None)
        for rid in list(self._reqs):
            req = self._reqs[rid]
            cut = next((i for i, h in enumerate(req.blocks) if h in gone), None)
            if cut is None:
                continue
            recompute += max(0, req.ctx - cut * BLOCK_TOKENS)
            for h in req.blocks[cut:]:
                if h not in gone:
                    self._release_block(h)
            del req.blocks[cut:]
            if not self._grow(req, _blocks_for(req.ctx) - len(req.blocks)):
                self._drop(rid, recompute_later=False)
        self._heap = [(s, h) for s, h in self._heap if h not in gone]
        heapq.heapify(self._heap)
        self._admit()
        return recompute

    def generate(self, tokens: int) -> int:
        """Spread ``tokens`` new output tokens over the active requests; returns tokens made.

        A request that cannot grow (no free block) is preempted to the pending queue, as vLLM
        does; its whole context is added to :attr:`recompute_tokens` when it is readmitted.
        """
        if tokens <= 0 or not self._reqs:
            self._admit()
            return 0
        made = 0
        while tokens > 0 and self._reqs:
            share = max(1, tokens // len(self._reqs))
            for rid in list(self._reqs):
                if tokens <= 0:
                    break
                req = self._reqs[rid]
                n = min(share, req.target - req.ctx, tokens)
                need = _blocks_for(req.ctx + n) - len(req.blocks)
                if need > 0 and not self._grow(req, need):
                    self._drop(rid)
                    continue
                req.ctx += n
                made += n
                tokens -= n
                if req.ctx >= req.target:
                    for h in req.blocks:
                        self._release_block(h)
                    del self._reqs[rid]
                    self.finished += 1
            self._admit()
            if not self._reqs:
                break
        return made

    # -- internals -------------------------------------------------------------------------

    def _admit(self) -> None:
        while len(self._reqs) < self.job.max_seqs:
            if self._pending:
                req = self._pending[0]
            else:
                p = int(lognormal_lengths(self.rng, self.job.prompt_tokens, 1)[0])
                o = int(lognormal_lengths(self.rng, self.job.output_tokens, 1)[0])
                req = _Req(ctx=p, target=p + o)
                self._pending.append(req)
            need = _blocks_for(req.ctx)
            # Keep a small watermark so running requests can grow.
            if need + len(self._reqs) > self.free_blocks():
                return
            self._pending.popleft()
            if req.dropped:
                self.recompute_tokens += req.ctx
                req.dropped = False
            self._grow(req, need)
            self._reqs[self._next_req] = req
            self._next_req += 1

    def _grow(self, req: _Req, n: int) -> bool:
        if n <= 0:
            return True
        if self.free_blocks() < n:
            return False
        for _ in range(n):
            while self._heap:
                seq, h = self._heap[0]
                if self._order.get(h) == seq and self._free.get(h, 0) > 0:
                    break
                heapq.heappop(self._heap)
            seq, h = self._heap[0]
            self._free[h] -= 1
            if self._free[h] == 0:
                heapq.heappop(self._heap)
            req.blocks.append(h)
        return True

    def _release_block(self, h: int) -> None:
        if h not in self._free:
            return
        if self._free[h] == 0:
            heapq.heappush(self._heap, (self._order[h], h))
        self._free[h] += 1

    def _drop(self, rid: int, recompute_later: bool = True) -> None:
        req = self._reqs.pop(rid)
        for h in req.blocks:
            self._release_block(h)
        req.blocks.clear()
        req.dropped = recompute_later
        self._pending.appendleft(req)


def _blocks_for(tokens: int) -> int:
    return -(-tokens // BLOCK_TOKENS)
