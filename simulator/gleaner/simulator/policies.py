"""Compute and memory policies of the node-level simulation.

Contract. The online engine (``gleaner.simulator.node``) drives one *compute* policy and one
*memory* policy per GPU through the small protocols below. Gleaner's own policies are thin
adapters over the agent's real classes (``ComputeGate``, ``MemoryReservation``,
``plan_reclamation`` with ``select_handles_greedy`` / ``select_handles_fifo``); nothing of
their logic is re-implemented here. The baselines are the simulator's own:

Compute (when may the offline job run, and what does an online launch pay):
- ``online-only``: no offline job (the reference).
- ``gleaner``: the agent's ``ComputeGate`` — disable at once on online busy (fast preemption
  latency), re-enable after T_cool = 2·G_max of online idleness, ≤ 1 preemption per request.
- ``gpreempt``: GPreempt-style timeslicing — the offline job wakes in *every* gap between
  online iterations (after a wake latency) and is preempted with the same fast latency at the
  next launch: low latency, unbounded rate.
- ``iteration``: iteration-level scheduling with kernel-boundary preemption — the offline job
  runs whenever no online iteration is in flight, and an online launch waits for the offline
  kernel in flight to finish (residual of a lognormal kernel duration): unbounded rate and
  latency.

Memory (how the GPU's memory is split; who pays when online grows):
- ``gleaner``: MIAD headroom (``MemoryReservation``); each of its answers goes through the
  agent's ``memory_command``, so a pressure event reclaims, with ``plan_reclamation``
  (selective, Algorithm 1, or FIFO for ``gleaner-fifo``), only the handles free memory cannot
  cover, and a release gives the oldest reclaimed (quarantined) page back to the offline job
  when free memory covers it — exactly what the agent does; online stalls only when it
  outgrows its headroom before the reclamation.
- ``uvm``: oversubscription — the offline job fills all memory online does not touch; online
  growth faults offline pages out to host at ``uvm_bandwidth`` (online stalls), and the
  offline job pays the same bandwidth to fault them back.
- ``prism``: shared pool without reclamation — the offline job grows into free memory and only
  gives it back as its own requests finish (exponential with ``offline_release_s``); online
  requests that do not fit wait (or are preempted by the engine, vLLM-style).
- ``static``: a fixed offline share = the minimum free memory over a warm-up window of the
  online-only trace (``static_window_s`` before the run); online is capped to the rest.
- ``none`` (with ``online-only``) and the ``gate + no reclamation`` bound (computed in every
  run as a shadow: the offline job keeping its initial memory, never reclaimed).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gleaner.api.units import GIB
from gleaner.runtime_agent.policy.gate import ComputeGate, Disable, Enable, GateConfig
from gleaner.runtime_agent.policy.memory import Grow, MemoryConfig, MemoryReservation, Release
from gleaner.runtime_agent.policy.memory_sequence import (
    MemoryCommand,
    MemoryView,
    ReclaimHandles,
    RestoreDeferred,
    RestorePage,
    memory_command,
)
from gleaner.runtime_agent.policy.reclaim import (
    Selector,
    plan_reclamation,
    select_handles_fifo,
    select_handles_greedy,
)
from gleaner.simulator.latency import LatencyModel
from gleaner.simulator.offline import BLOCK_TOKENS, MemoryCurve, OfflineKV

BLOCK_TOKENS_F = float(BLOCK_TOKENS)

# -- compute ------------------------------------------------------------------------------


class ComputePolicy(Protocol):
    name: str
    preemptions: int

    def idle(self, t0: float, t1: float) -> float:
        """The online side is idle over [t0, t1): seconds the offline job runs in it."""
        ...

    def launch(self, t: float, requests: Sequence[str]) -> tuple[float, bool, float]:
        """Online launches an iteration at ``t`` for ``requests``.

        Returns (launch delay s, whether it preempted offline work, extra offline seconds).
        """
        ...

    def done(self, t: float, finished: Sequence[str]) -> None:
        """The iteration ended at ``t``; ``finished`` requests completed in it."""
        ...

    def force_disable(self, t: float) -> None:
        """Memory reclamation turns offline compute off first."""
        ...


class _Ungated:
    """The baselines keep no gate: an iteration's end and a reclamation's forced disable
    change nothing for them (``gleaner`` is the one policy that acts on both)."""

    def done(self, t: float, finished: Sequence[str]) -> None:
        return None

    def force_disable(self, t: float) -> None:
        return None


@dataclass
class OnlineOnly(_Ungated):
    name: str = "online-only"
    preemptions: int = 0

    def idle(self, t0: float, t1: float) -> float:
        return 0.0

    def launch(self, t: float, requests: Sequence[str]) -> tuple[float, bool, float]:
        return 0.0, False, 0.0


@dataclass
class GleanerGate:
    """Adapter over the agent's ``ComputeGate`` (one GPU)."""

    preempt_latency_s: float
    config: GateConfig = field(default_factory=GateConfig)
    name: str = "gleaner"
    preemptions: int = 0
    gate: ComputeGate = field(init=False)

    def __post_init__(self) -> None:
        self.gate = ComputeGate(gpu=0, config=self.config)

    def idle(self, t0: float, t1: float) -> float:
        if self.gate.enabled:
            return max(0.0, t1 - t0)
        deadline = self.gate.next_deadline()
        while deadline is not None and deadline < t1:
            if any(isinstance(a, Enable) for a in self.gate.tick(deadline)):
                return t1 - max(t0, deadline)
            nxt = self.gate.next_deadline()
            if nxt is None or nxt <= deadline:
                break
            deadline = nxt
        return 0.0

    def launch(self, t: float, requests: Sequence[str]) -> tuple[float, bool, float]:
        preempted = False
        for r in requests:
            for action in self.gate.online_busy(t, r):
                if isinstance(action, Disable) and action.preempted:
                    preempted = True
        if preempted:
            self.preemptions += 1
            return self.preempt_latency_s, True, 0.0
        return 0.0, False, 0.0

    def done(self, t: float, finished: Sequence[str]) -> None:
        self.gate.online_idle(t, finished)

    def force_disable(self, t: float) -> None:
        self.gate.force_disable(t)


@dataclass
class GPreempt(_Ungated):
    """Offline wakes in every online gap; fast preemption at the next launch."""

    preempt_latency_s: float
    wake_latency_s: float
    name: str = "gpreempt"
    preemptions: int = 0
    _ran: bool = False

    def idle(self, t0: float, t1: float) -> float:
        run = max(0.0, t1 - t0 - self.wake_latency_s)
        self._ran = self._ran or run > 0
        return run

    def launch(self, t: float, requests: Sequence[str]) -> tuple[float, bool, float]:
        if self._ran:
            self._ran = False
            self.preemptions += 1
            return self.preempt_latency_s, True, 0.0
        return 0.0, False, 0.0


@dataclass
class IterationLevel(_Ungated):
    """Offline runs whenever no online iteration is in flight; kernel-boundary preemption."""

    rng: np.random.Generator
    kernel_mean_s: float
    kernel_sigma: float
    name: str = "iteration"
    preemptions: int = 0
    _ran: bool = False

    def idle(self, t0: float, t1: float) -> float:
        run = max(0.0, t1 - t0)
        self._ran = self._ran or run > 0
        return run

    def launch(self, t: float, requests: Sequence[str]) -> tuple[float, bool, float]:
        if not self._ran:
            return 0.0, False, 0.0
        self._ran = False
        self.preemptions += 1
        # Residual life of a renewal process of lognormal kernels: uniform share of a
        # length-biased draw (lognormal with mu + sigma^2).
        mu = math.log(self.kernel_mean_s) - 0.5 * self.kernel_sigma**2
        biased = float(self.rng.lognormal(mu + self.kernel_sigma**2, self.kernel_sigma))
        wait = biased * float(self.rng.random())
        return wait, True, wait


# -- memory -------------------------------------------------------------------------------


class MemoryPolicy(Protocol):
    name: str
    reclamations: int
    reclaimed_bytes: int
    recompute_tokens: int

    def capacity_blocks(self, t: float, used_blocks: int, waiting_blocks: int) -> int:
        """KV blocks online may hold now (it holds ``used_blocks``; the head of its queue
        and the next decode step of its running requests need ``waiting_blocks`` more)."""
        ...

    def ceiling_blocks(self) -> int:
        """The most KV blocks online could ever hold under this policy: what vLLM sizes its
        cache to. A request that needs more is refused, never admitted."""
        ...

    def observe(self, t: float, used_blocks: int, compute: ComputePolicy) -> float:
        """Online will hold ``used_blocks`` KV blocks in the iteration starting at ``t``.

        Returns the stall (s) the iteration pays before it can start.
        """
        ...

    def advance(self, t0: float, t1: float, run_s: float) -> float:
        """Time passes over [t0, t1) with ``run_s`` offline run seconds: tokens produced."""
        ...

    def offline_memory_gib(self) -> float:
        """Memory the offline job holds now (weights included)."""
        ...


@dataclass
class MemoryEnv:
    """What every memory policy needs to know about the GPU and the two workloads."""

    block_bytes: int
    pool_bytes: int
    """Memory for online KV + offline job (GPU usable − online weights/activations)."""
    online_alone_blocks: int
    """Online KV capacity without colocation (the online-only reference)."""
    curve: MemoryCurve
    offline: LatencyModel
    recompute_s_per_token: float

    @property
    def offline_weights_bytes(self) -> int:
        return int(self.curve.weights_gib * GIB)

    def offline_rate(self, offline_kv_bytes: float) -> float:
        return self.curve.rate(self.curve.weights_gib + offline_kv_bytes / GIB)


@dataclass
class _OfflineLedger:
    """Offline tokens after paying recomputation debt first."""

    env: MemoryEnv
    debt_s: float = 0.0
    tokens: float = 0.0

    def run(self, run_s: float, rate: float) -> float:
        pay = min(self.debt_s, run_s)
        self.debt_s -= pay
        made = rate * (run_s - pay)
        self.tokens += made
        return made

    def owe(self, tokens: int) -> None:
        self.debt_s += tokens * self.env.recompute_s_per_token


@dataclass
class NoOffline:
    env: MemoryEnv
    name: str = "none"
    reclamations: int = 0
    reclaimed_bytes: int = 0
    recompute_tokens: int = 0

    def capacity_blocks(self, t: float, used_blocks: int, waiting_blocks: int) -> int:
        return self.ceiling_blocks()

    def ceiling_blocks(self) -> int:
        return self.env.online_alone_blocks

    def observe(self, t: float, used_blocks: int, compute: ComputePolicy) -> float:
        return 0.0

    def advance(self, t0: float, t1: float, run_s: float) -> float:
        return 0.0

    def offline_memory_gib(self) -> float:
        return 0.0


@dataclass
class GleanerMemory:
    """Adapter over the agent's ``MemoryReservation`` and ``plan_reclamation``."""

    env: MemoryEnv
    config: MemoryConfig
    kv: OfflineKV
    selector: Selector = select_handles_greedy
    reclaim_latency_s: float = 0.001
    name: str = "gleaner"
    reclamations: int = 0
    reclaimed_bytes: int = 0
    recompute_tokens: int = 0
    invalidated_blocks: int = 0
    restores: int = 0
    restores_deferred: int = 0
    commands: list[MemoryCommand] = field(default_factory=list)
    """Every command carried out, in order (what the agent would have sent)."""
    quarantine: deque[int] = field(default_factory=deque)
    """Bytes of each page reclaimed and not given back yet, oldest first."""
    reservation: MemoryReservation = field(init=False)
    ledger: _OfflineLedger = field(init=False)
    _pending_tokens: float = 0.0

    def __post_init__(self) -> None:
        hb = self.config.handle_bytes
        capacity = (self.env.pool_bytes - self.env.offline_weights_bytes) // hb
        self.reservation = MemoryReservation(gpu=0, config=self.config, capacity=int(capacity))
        self.capacity_handles = int(capacity)
        self.kv.add_handles(self.capacity_handles - self.reservation.headroom)
        self.ledger = _OfflineLedger(self.env)

    def capacity_blocks(self, t: float, used_blocks: int, waiting_blocks: int) -> int:
        return self.ceiling_blocks()

    def ceiling_blocks(self) -> int:
        return self.capacity_handles * self.config.handle_bytes // self.env.block_bytes

    def _used_handles(self, used_blocks: int) -> int:
        return -(-used_blocks * self.env.block_bytes // self.config.handle_bytes)

    def observe(self, t: float, used_blocks: int, compute: ComputePolicy) -> float:
        used = self._used_handles(used_blocks)
        stall = self.reclaim_latency_s if used > self.reservation.headroom else 0.0
        self._apply(t, self.reservation.observe(t, used), compute)
        return stall

    def free_bytes(self) -> int:
        """Memory neither online (its headroom, or more while it outgrows it) nor the
        offline job holds — what the agent reads from NVML."""
        res = self.reservation
        held = max(res.headroom, res.used) + self.kv.handles
        return (self.capacity_handles - held) * self.config.handle_bytes

    def _apply(self, t: float, actions: Sequence[Grow | Release], compute: ComputePolicy) -> None:
        # The agent's own decision (memory_command): reclaim only what free memory cannot
        # cover; on a Release give the oldest quarantined page back when free memory covers it.
        hb = self.config.handle_bytes
        for a in actions:
            oldest = self.quarantine[0] if self.quarantine else None
            view = MemoryView(
                free_bytes=self.free_bytes(),
                reclaimable_handles=self.kv.handles,
                oldest_quarantined_bytes=oldest,
            )
            cmd = memory_command(a, view, hb)
            if cmd is not None:
                self.commands.append(cmd)
            if isinstance(cmd, ReclaimHandles):
                compute.force_disable(t)
                plan = plan_reclamation(
                    0, self.kv.handle_map(), cmd.handles, handle_bytes=hb, selector=self.selector
                )
                self.kv.remove_handles(list(plan.handles))
                self.quarantine.extend([plan.handle_bytes] * len(plan.handles))
                self.reclamations += 1
                self.reclaimed_bytes += plan.reclaimed_bytes
                self.invalidated_blocks += plan.blocks_invalidated
                self.recompute_tokens += plan.tokens_to_recompute
                self.ledger.owe(plan.tokens_to_recompute)
            elif isinstance(cmd, RestorePage):
                self.quarantine.popleft()
                self.kv.add_handles(1)  # the page comes back empty
                self.restores += 1
            elif isinstance(cmd, RestoreDeferred):
                self.restores_deferred += 1

    def advance(self, t0: float, t1: float, run_s: float) -> float:
        res = self.reservation
        while (due := res.next_deadline()) is not None and due <= t1:
            before = res.releases
            deadline = max(due, t0)
            self._apply(deadline, res.tick(deadline), OnlineOnly())
            after = res.next_deadline()
            if res.releases == before and after is not None and after <= deadline:
                break
        if run_s <= 0:
            return 0.0
        made = self.ledger.run(run_s, self.env.offline_rate(self._kv_bytes()))
        self._pending_tokens += made
        if self._pending_tokens >= 256:
            before = self.kv.recompute_tokens
            self.kv.generate(int(self._pending_tokens))
            self._pending_tokens -= int(self._pending_tokens)
            extra = self.kv.recompute_tokens - before
            self.recompute_tokens += extra
            self.ledger.owe(extra)
        return made

    def _kv_bytes(self) -> float:
        return float(self.kv.handles * self.config.handle_bytes)

    def offline_memory_gib(self) -> float:
        return self.env.curve.weights_gib + self._kv_bytes() / GIB


@dataclass
class UvmMemory:
    env: MemoryEnv
    bandwidth_bytes_per_s: float
    name: str = "uvm"
    reclamations: int = 0
    reclaimed_bytes: int = 0
    recompute_tokens: int = 0
    ledger: _OfflineLedger = field(init=False)
    _online_resident: int = 0

    def __post_init__(self) -> None:
        self.ledger = _OfflineLedger(self.env)

    def _kv_pool(self) -> int:
        return self.env.pool_bytes - self.env.offline_weights_bytes

    def capacity_blocks(self, t: float, used_blocks: int, waiting_blocks: int) -> int:
        return self.ceiling_blocks()

    def ceiling_blocks(self) -> int:
        return self._kv_pool() // self.env.block_bytes

    def observe(self, t: float, used_blocks: int, compute: ComputePolicy) -> float:
        used = used_blocks * self.env.block_bytes
        if used > self._online_resident:
            grown = used - self._online_resident
            self._online_resident = used
            self.reclamations += 1
            self.reclaimed_bytes += grown
            return grown / self.bandwidth_bytes_per_s
        if used < self._online_resident:
            # Offline pages come back on fault: the offline job pays the migration.
            self.ledger.debt_s += (self._online_resident - used) / self.bandwidth_bytes_per_s
            self._online_resident = used
        return 0.0

    def advance(self, t0: float, t1: float, run_s: float) -> float:
        if run_s <= 0:
            return 0.0
        return self.ledger.run(
            run_s, self.env.offline_rate(self._kv_pool() - self._online_resident)
        )

    def offline_memory_gib(self) -> float:
        return self.env.curve.weights_gib + (self._kv_pool() - self._online_resident) / GIB


@dataclass
class PrismMemory:
    """Shared pool, no reclamation: the offline job allocates KV as it runs and frees it only
    as its requests finish — while online is short of memory, exponentially with time
    constant ``release_s`` (wall time: the offline job keeps finishing requests)."""

    env: MemoryEnv
    release_s: float
    name: str = "prism"
    reclamations: int = 0
    reclaimed_bytes: int = 0
    recompute_tokens: int = 0
    ledger: _OfflineLedger = field(init=False)
    offline_kv: float = 0.0
    _online_used: int = 0
    _blocked: bool = False
    _last_t: float = 0.0

    def __post_init__(self) -> None:
        self.ledger = _OfflineLedger(self.env)
        self.offline_kv = float(self._kv_pool())

    def _kv_pool(self) -> int:
        return self.env.pool_bytes - self.env.offline_weights_bytes

    def capacity_blocks(self, t: float, used_blocks: int, waiting_blocks: int) -> int:
        if self._blocked and t > self._last_t:
            self.offline_kv *= math.exp(-(t - self._last_t) / self.release_s)
        self._last_t = max(self._last_t, t)
        cap = int((self._kv_pool() - self.offline_kv) // self.env.block_bytes)
        self._online_used = used_blocks * self.env.block_bytes
        self._blocked = waiting_blocks > 0 and used_blocks + waiting_blocks > cap
        return cap

    def ceiling_blocks(self) -> int:
        return self._kv_pool() // self.env.block_bytes  # once offline has freed it all

    def observe(self, t: float, used_blocks: int, compute: ComputePolicy) -> float:
        self._online_used = used_blocks * self.env.block_bytes
        return 0.0

    def advance(self, t0: float, t1: float, run_s: float) -> float:
        if run_s <= 0:
            return 0.0
        rate = self.env.offline_rate(self.offline_kv)
        if not self._blocked:
            grow = run_s * rate * self.env.block_bytes / BLOCK_TOKENS_F
            free = self._kv_pool() - self._online_used
            self.offline_kv = max(self.offline_kv, min(float(free), self.offline_kv + grow))
        return self.ledger.run(run_s, rate)

    def offline_memory_gib(self) -> float:
        return self.env.curve.weights_gib + self.offline_kv / GIB


@dataclass
class StaticMemory:
    env: MemoryEnv
    offline_kv_bytes: int
    name: str = "static"
    reclamations: int = 0
    reclaimed_bytes: int = 0
    recompute_tokens: int = 0
    ledger: _OfflineLedger = field(init=False)

    def __post_init__(self) -> None:
        self.ledger = _OfflineLedger(self.env)

    def capacity_blocks(self, t: float, used_blocks: int, waiting_blocks: int) -> int:
        return self.ceiling_blocks()

    def ceiling_blocks(self) -> int:
        pool = self.env.pool_bytes - self.env.offline_weights_bytes - self.offline_kv_bytes
        return max(0, pool // self.env.block_bytes)

    def observe(self, t: float, used_blocks: int, compute: ComputePolicy) -> float:
        return 0.0

    def advance(self, t0: float, t1: float, run_s: float) -> float:
        if run_s <= 0:
            return 0.0
        return self.ledger.run(run_s, self.env.offline_rate(self.offline_kv_bytes))

    def offline_memory_gib(self) -> float:
        return self.env.curve.weights_gib + self.offline_kv_bytes / GIB


SELECTORS: dict[str, Selector] = {"greedy": select_handles_greedy, "fifo": select_handles_fifo}
