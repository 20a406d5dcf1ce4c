"""The node agent's core: per-GPU policies wired to accounting and to a command sink.

Contract. :class:`NodeAgent` owns, for one node, a :class:`ComputeGate` and a
:class:`MemoryReservation` per GPU and the node's :class:`Accounting`. Backends feed it
events with times from one monotonic clock (seconds): online busy/idle edges per *source*
(an online process or a simulated workload; a GPU is busy while any source on it is busy),
decode gaps, online memory use, offline job placement, and :meth:`NodeAgent.tick` at
:meth:`NodeAgent.next_deadline`. It carries out the policies' answers through a
:class:`Sink`: gate commands (``set_gate``) and reclamation plans (``reclaim``), accounting
for each (preemptions, offline-enabled time, reclaimed bytes, invalidated blocks).

No sockets, no clocks, no Kubernetes here: the daemon, the simulated backend, the simulator
and the tests drive the same object.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gleaner.agent.policy import (
    Accounting,
    ComputeGate,
    Disable,
    Enable,
    GateAction,
    GateConfig,
    Grow,
    HandleMap,
    MemoryAction,
    MemoryConfig,
    MemoryReservation,
    ReclaimPlan,
    plan_reclamation,
    select_handles_greedy,
)
from gleaner.agent.policy.reclaim import Selector
from gleaner.api import GpuInfo

GIB = 1 << 30


class Sink(Protocol):
    """Where the agent's commands go (the shims, or a model of offline work)."""

    def set_gate(self, gpu: int, enable: bool, t: float) -> None:
        """Enable or disable the offline channel groups on ``gpu``."""

    def reclaim(self, plan: ReclaimPlan, t: float) -> None:
        """Carry out a reclamation plan (after compute was disabled)."""


class NullSink:
    """A sink that does nothing (metrics-only runs, tests)."""

    def set_gate(self, gpu: int, enable: bool, t: float) -> None:
        return None

    def reclaim(self, plan: ReclaimPlan, t: float) -> None:
        return None


@dataclass(slots=True)
class GpuMemoryModel:
    """Online memory of one GPU: fixed base (weights) plus dynamic use (KV cache)."""

    total_bytes: int
    online_base_bytes: int = 0
    online_dynamic_bytes: int = 0


@dataclass
class NodeAgent:
    """See the module docstring."""

    node: str
    inventory: Sequence[GpuInfo]
    start: float
    gate_config: GateConfig = field(default_factory=GateConfig)
    memory_config: MemoryConfig = field(default_factory=MemoryConfig)
    sink: Sink = field(default_factory=NullSink)
    offline_handles: Callable[[int], HandleMap] | None = None
    """GPU → the offline handle table (for reclamation); None: nothing reclaimable."""
    selector: Selector = select_handles_greedy
    memory_step_gib: float = 0.5

    gates: dict[int, ComputeGate] = field(init=False)
    memory: dict[int, MemoryReservation] = field(init=False)
    accounting: Accounting = field(init=False)
    memory_model: dict[int, GpuMemoryModel] = field(init=False)
    offline_jobs: dict[int, str] = field(init=False, default_factory=dict)
    """GPU → ``namespace/name`` of the offline job placed on it."""
    gate_commands: int = field(init=False, default=0)
    _busy_sources: dict[int, set[str]] = field(init=False)

    def __post_init__(self) -> None:
        gpus = [g.index for g in self.inventory]
        if len(set(gpus)) != len(gpus):
            raise ValueError("GPU indices must be unique")
        hb = self.memory_config.handle_bytes
        self.gates = {g: ComputeGate(g, self.gate_config, start=self.start) for g in gpus}
        self.memory_model = {
            g.index: GpuMemoryModel(total_bytes=int(g.memory_gi_b * GIB)) for g in self.inventory
        }
        self.memory = {
            g: MemoryReservation(
                g,
                self.memory_config,
                capacity=max(self.memory_config.min_handles, m.total_bytes // hb),
                start=self.start,
            )
            for g, m in self.memory_model.items()
        }
        self.accounting = Accounting(gpus, start=self.start, memory_step_gib=self.memory_step_gib)
        self._busy_sources = {g: set() for g in gpus}
        for g in gpus:
            self._refresh_harvestable(self.start, g)

    @property
    def gpus(self) -> list[int]:
        return list(self.gates)

    # -- online events --------------------------------------------------------------------

    def online_busy(self, t: float, gpu: int, source: str, request: str | None = None) -> None:
        gate = self._gate(gpu)
        sources = self._busy_sources[gpu]
        was_busy = bool(sources)
        sources.add(source)
        if not was_busy:
            self.accounting.set_online_busy(t, gpu, 1.0)
        if request is not None or not was_busy:
            self._apply(gate.online_busy(t, request))
        self._drain(gpu)

    def online_idle(self, t: float, gpu: int, source: str, finished: Sequence[str] = ()) -> None:
        gate = self._gate(gpu)
        sources = self._busy_sources[gpu]
        sources.discard(source)
        if sources:
            for name in finished:
                self._apply(gate.request_done(t, name))
        else:
            self.accounting.set_online_busy(t, gpu, 0.0)
            self._apply(gate.online_idle(t, finished))
        self._drain(gpu)

    def drop_source(self, t: float, source: str) -> None:
        """An online source went away: whatever it kept busy is idle now."""
        for gpu, sources in self._busy_sources.items():
            if source in sources:
                self.online_idle(t, gpu, source)

    def decode_gap(self, t: float, gpu: int, gap_s: float) -> None:
        self._apply(self._gate(gpu).decode_gap(gap_s, t))

    def is_busy(self, gpu: int) -> bool:
        return bool(self._busy_sources[gpu])

    # -- memory ---------------------------------------------------------------------------

    def set_online_memory(
        self, t: float, gpu: int, base_bytes: int | None = None, dynamic_bytes: int = 0
    ) -> None:
        """Online memory use now: base (weights, fixed) and dynamic (KV cache) bytes."""
        model = self.memory_model[self._gpu(gpu)]
        if base_bytes is not None:
            model.online_base_bytes = max(0, base_bytes)
        model.online_dynamic_bytes = max(0, dynamic_bytes)
        used = math.ceil(model.online_dynamic_bytes / self.memory_config.handle_bytes)
        self._apply_memory(t, self.memory[gpu].observe(t, used))
        self._refresh_harvestable(t, gpu)

    def set_harvestable(self, t: float, gpu: int, free_bytes: int) -> None:
        """Harvestable memory measured directly (a backend without an online memory model)."""
        self.accounting.set_harvestable(t, self._gpu(gpu), free_bytes)

    def harvestable_bytes(self, gpu: int) -> int:
        return self.accounting.harvestable_bytes(gpu)

    # -- offline placement ----------------------------------------------------------------

    def set_offline_jobs(self, t: float, jobs_by_gpu: Mapping[int, str]) -> None:
        """The offline jobs placed on this node now (GPU → ``namespace/name``)."""
        self.offline_jobs = {g: j for g, j in jobs_by_gpu.items() if g in self.gates}
        by_job: dict[str, list[int]] = {}
        for g, j in self.offline_jobs.items():
            by_job.setdefault(j, []).append(g)
        self.accounting.set_offline_jobs(t, by_job)

    # -- time -----------------------------------------------------------------------------

    def tick(self, t: float) -> None:
        for gpu, gate in self.gates.items():
            if (d := gate.next_deadline()) is not None and d <= t:
                self._apply(gate.tick(t))
                self._drain(gpu)
        for gpu, res in self.memory.items():
            if res.next_deadline() <= t:
                self._apply_memory(t, res.tick(t))
                self._refresh_harvestable(t, gpu)
        self.accounting.advance(t)

    def next_deadline(self) -> float | None:
        """The earliest time a :meth:`tick` has something to do."""
        deadlines = [d for g in self.gates.values() if (d := g.next_deadline()) is not None]
        deadlines += [m.next_deadline() for m in self.memory.values()]
        return min(deadlines) if deadlines else None

    # -- internals ------------------------------------------------------------------------

    def _gpu(self, gpu: int) -> int:
        if gpu not in self.gates:
            raise KeyError(f"GPU {gpu} is not on node {self.node}")
        return gpu

    def _gate(self, gpu: int) -> ComputeGate:
        return self.gates[self._gpu(gpu)]

    def _apply(self, actions: list[GateAction]) -> None:
        for a in actions:
            if isinstance(a, Disable):
                self.accounting.set_offline_enabled(a.t, a.gpu, 0.0)
                if a.preempted:
                    self.accounting.add_preemption(a.gpu)
                self.gate_commands += 1
                self.sink.set_gate(a.gpu, False, a.t)
            elif isinstance(a, Enable):
                self.accounting.set_offline_enabled(a.t, a.gpu, 1.0)
                self.gate_commands += 1
                self.sink.set_gate(a.gpu, True, a.t)

    def _drain(self, gpu: int) -> None:
        for n in self.gates[gpu].drain_finished():
            self.accounting.add_online_request(gpu, n)

    def _apply_memory(self, t: float, actions: list[MemoryAction]) -> None:
        for a in actions:
            if not isinstance(a, Grow) or self.offline_handles is None:
                continue
            table = self.offline_handles(a.gpu)
            k = min(a.handles, len(table))
            if k == 0:
                continue
            # Reclamation order (DESIGN.md): compute off first, then remap/release/report.
            self._apply(self.gates[a.gpu].force_disable(t))
            plan = plan_reclamation(
                a.gpu,
                table,
                k,
                handle_bytes=self.memory_config.handle_bytes,
                selector=self.selector,
            )
            self.sink.reclaim(plan, t)
            self.accounting.add_reclamation(a.gpu, plan.reclaimed_bytes, plan.blocks_invalidated)

    def _refresh_harvestable(self, t: float, gpu: int) -> None:
        m = self.memory_model[gpu]
        reserved = max(self.memory[gpu].headroom_bytes, m.online_dynamic_bytes)
        free = m.total_bytes - m.online_base_bytes - reserved
        self.accounting.set_harvestable(t, gpu, max(0, free))
