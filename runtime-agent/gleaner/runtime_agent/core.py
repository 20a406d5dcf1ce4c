"""The node agent's core: per-GPU policies wired to accounting and to a command sink.

Contract. :class:`NodeAgent` owns, for one node, a :class:`ComputeGate` and a
:class:`MemoryReservation` per GPU and the node's :class:`Accounting`. Backends feed it
events with times from one monotonic clock (seconds): online busy/idle edges per *source*
(an online process or a simulated workload; a GPU is busy while any source on it is busy),
decode gaps, online memory use, offline job placement, and :meth:`NodeAgent.tick` at
:meth:`NodeAgent.next_deadline`. It carries out the policies' answers through a
:class:`Sink`: gate commands (``set_gate``) and reclamation plans (``reclaim``), accounting
for each (preemptions, offline-enabled time, reclaimed bytes, invalidated blocks).

Memory given back. Pages a reclamation took stay *quarantined* in the offline process that
held them (the shim mapped them to its quarantine page), tracked here per GPU in reclamation
order with the process that holds them (``owner``, named by the sink in
:meth:`NodeAgent.reclaim_completed`). At each
:class:`~gleaner.runtime_agent.policy.Release` of a GPU with quarantined pages the agent
restores one page, the oldest, to its owner through
``Sink.restore`` — only when free memory covers it, if free memory is known
(``free_bytes``) — one restore at a time per GPU. An ok completion
(:meth:`NodeAgent.restore_completed`) forgets the page (the framework hook reports it again,
empty); a failure keeps it quarantined for a later Release, unless the owner said the page is
not quarantined there (``forget``); :meth:`NodeAgent.drop_quarantine` forgets an owner that
went away; :meth:`NodeAgent.adopt_quarantine` takes back pages a process reports
quarantined that the agent does not know (after an agent restart or a reconnection).
Restores are counted per GPU in :attr:`NodeAgent.restores` (not part of the NodeTrace
accounting). The harvestable memory is the reservation's complement either way: a restore
moves memory from online's released headroom back to offline, which the
reservation already counted as harvestable at the Release.

A command leaves through the sink before its accounting is written (the reaction path is
busy edge → gate → ``set_gate``). The accounting of the online edges and gate commands is
deferred: each is a tuple appended to a log that :attr:`NodeAgent.accounting` replays, in
order, before anyone reads it (and the agent replays it itself every
:data:`ACCOUNTING_BATCH` entries, after an idle edge or a cooldown's end), so the loop
wakeups of the reaction path do not run the accounting code; the totals are the same. A
shell with one timer per GPU uses :meth:`NodeAgent.tick_gate` / :meth:`NodeAgent.tick_memory` and
:meth:`NodeAgent.take_changed` (which policies were touched since it last asked, so only
their deadlines need a look); :meth:`NodeAgent.tick` still does everything at once.

No sockets, no clocks, no Kubernetes here: the daemon, the simulated backend, the simulator
and the tests drive the same object.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gleaner.api import GpuInfo
from gleaner.api.units import GIB
from gleaner.runtime_agent.gatelib import ACCT_BUSY, ACCT_ENABLED, ACCT_PREEMPTION, ACCT_REQUEST
from gleaner.runtime_agent.policy import (
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
from gleaner.runtime_agent.policy.memory_sequence import (
    MemoryView,
    ReclaimHandles,
    RestoreDeferred,
    RestorePage,
    memory_command,
)
from gleaner.runtime_agent.policy.reclaim import Selector

ACCOUNTING_BATCH = 256
"""Deferred accounting entries replayed at once (see the module docstring)."""

_BUSY, _ENABLED, _PREEMPTION, _REQUEST = ACCT_BUSY, ACCT_ENABLED, ACCT_PREEMPTION, ACCT_REQUEST
"""Deferred accounting operations: set_online_busy, set_offline_enabled, add_preemption,
add_online_request (the codes of the native gate loop's log, which is replayed the same way)."""


def replay_accounting(acc: Accounting, entries: Sequence[tuple[int, float, int, float]]) -> None:
    """Apply accounting entries (operation, time, GPU, level or count), in order: the agent's
    deferred ones and the native gate loop's log (:meth:`GateLoop.drain_log
    <gleaner.runtime_agent.gatelib.GateLoop.drain_log>`)."""
    busy, enabled = acc.set_online_busy, acc.set_offline_enabled  # looked up once per batch
    for op, t, gpu, value in entries:
        if op == _BUSY:
            busy(t, gpu, value)
        elif op == _ENABLED:
            enabled(t, gpu, value)
        elif op == _PREEMPTION:
            acc.add_preemption(gpu)
        else:
            acc.add_online_request(gpu, int(value))


class Sink(Protocol):
    """Where the agent's commands go (the shims, or a model of offline work)."""

    def set_gate(self, gpu: int, enable: bool, t: float) -> None:
        """Enable or disable the offline channel groups on ``gpu``."""

    def reclaim(self, plan: ReclaimPlan, t: float) -> bool:
        """Carry out a reclamation plan (after compute was disabled).

        True: done now (the agent counts it). False: the sink finishes it later and calls
        :meth:`NodeAgent.reclaim_completed` once the memory is really released (or never,
        when it could not be).
        """

    def restore(self, gpu: int, owner: str, handles: tuple[int, ...], t: float) -> bool:
        """Back quarantined ``handles`` of ``owner`` on ``gpu`` with memory again.

        True: done now. False: the sink finishes it later and calls
        :meth:`NodeAgent.restore_completed` (ok or not; it may do so before returning).
        """


class NativeGates(Protocol):
    """The native gate loop, as the agent sees it (:class:`ShimServer
    <gleaner.runtime_agent.server.ShimServer>` with ``gate_loop``): it runs the gates on the
    shims' edges; the agent forwards what only it decides."""

    def hold(self, gpu: int, held: bool) -> None:
        """Keep ``gpu``'s loop gate closed (or let go)."""

    def force_disable(self, gpu: int) -> None:
        """Close ``gpu``'s loop gate without a preemption (memory reclamation)."""


class NullSink:
    """A sink that does nothing (metrics-only runs, tests)."""

    def set_gate(self, gpu: int, enable: bool, t: float) -> None:
        return None

    def reclaim(self, plan: ReclaimPlan, t: float) -> bool:
        return True

    def restore(self, gpu: int, owner: str, handles: tuple[int, ...], t: float) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class QuarantinedPage:
    """A page reclaimed from an offline process and not yet given back to it."""

    handle: int
    """The page's handle (its virtual address in the offline process)."""
    owner: str
    """The process holding it, as the sink named it ("" when it named none)."""
    nbytes: int
    since: float
    """When its reclamation completed."""


@dataclass(slots=True)
class RestoreTotals:
    """Restores of one GPU since the agent started."""

    events: int = 0
    """Pages given back (RESTORE acknowledged ok)."""
    restored_bytes: int = 0
    failures: int = 0
    """Restores that failed (the page stays quarantined unless its owner lost it)."""
    deferred: int = 0
    """Releases that restored nothing because free memory did not cover the page."""


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
    native: NativeGates | None = None
    """Set when a native gate loop runs the gates on the shims' edges: its accounting log
    (:meth:`absorb_native`) replaces this agent's own gate and busy accounting, and holds
    and reclamations are forwarded to it (this agent's gates still decide its GATE frames,
    which the offline shims AND with the loop's word)."""
    selector: Selector = select_handles_greedy
    memory_step_gib: float = 0.5
    free_bytes: Callable[[int], int | None] | None = None
    """GPU → bytes neither online nor offline holds now (None: unknown for that GPU); a
    pressure event reclaims only what that free memory cannot cover, a restore waits until
    it covers the page. Unknown: taken as 0 for growth (every growth reclaims) and as enough
    for restores (the owner's allocation fails harmlessly if it is not)."""

    gates: dict[int, ComputeGate] = field(init=False)
    memory: dict[int, MemoryReservation] = field(init=False)
    _accounting: Accounting = field(init=False)
    _deferred: list[tuple[int, float, int, float]] = field(init=False, default_factory=list)
    """Accounting not yet applied: (operation, time, GPU, level or count), in order."""
    memory_model: dict[int, GpuMemoryModel] = field(init=False)
    offline_jobs: dict[int, str] = field(init=False, default_factory=dict)
    """GPU → ``namespace/name`` of the offline job placed on it."""
    gate_commands: int = field(init=False, default=0)
    quarantine: dict[int, list[QuarantinedPage]] = field(init=False)
    """GPU → its quarantined pages, oldest reclamation first."""
    restores: dict[int, RestoreTotals] = field(init=False)
    _restoring: dict[int, QuarantinedPage] = field(init=False, default_factory=dict)
    """GPU → the page whose restore the sink is carrying out."""
    _busy_sources: dict[int, set[str]] = field(init=False)
    _changed: set[int] = field(init=False)
    _memory_changed: bool = field(init=False, default=True)

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
        self._accounting = Accounting(gpus, start=self.start, memory_step_gib=self.memory_step_gib)
        self._busy_sources = {g: set() for g in gpus}
        self.quarantine = {g: [] for g in gpus}
        self.restores = {g: RestoreTotals() for g in gpus}
        self._changed = set(gpus)
        for g in gpus:
            self._refresh_harvestable(self.start, g)

    @property
    def gpus(self) -> list[int]:
        return list(self.gates)

    @property
    def accounting(self) -> Accounting:
        """The node's accounting, with every deferred entry applied."""
        if self._deferred:
            self.flush_accounting()
        return self._accounting

    def flush_accounting(self) -> None:
        """Apply the deferred accounting entries, in order."""
        entries, self._deferred = self._deferred, []
        replay_accounting(self._accounting, entries)

    # -- online events --------------------------------------------------------------------

    def online_busy(self, t: float, gpu: int, source: str, request: str | None = None) -> None:
        sources = self._busy_sources.get(gpu)
        if sources is None:
            raise self._unknown(gpu)
        was_busy = bool(sources)
        sources.add(source)
        if was_busy and request is None:
            return  # already busy; an anonymous edge tells the gate nothing new
        # Not marked changed: a busy gate has no deadline (an armed timer just fires early).
        gate = self.gates[gpu]
        actions = gate.online_busy(t, request)
        if actions:
            self._apply(actions)  # the disable leaves first; accounting after
        if not was_busy and self.native is None:
            self._deferred.append((_BUSY, t, gpu, 1.0))
        if gate.has_finished():
            self._drain(gpu)

    def online_idle(self, t: float, gpu: int, source: str, finished: Sequence[str] = ()) -> None:
        sources = self._busy_sources.get(gpu)
        if sources is None:
            raise self._unknown(gpu)
        sources.discard(source)
        self._changed.add(gpu)
        gate = self.gates[gpu]
        if sources:
            for name in finished:
                self._apply(gate.request_done(t, name))
        else:
            actions = gate.online_idle(t, finished)  # checks t before anything is deferred
            if self.native is None:
                self._deferred.append((_BUSY, t, gpu, 0.0))
            if actions:
                self._apply(actions)
        if gate.has_finished():
            self._drain(gpu)
        if len(self._deferred) >= ACCOUNTING_BATCH:
            self.flush_accounting()

    def drop_source(self, t: float, source: str) -> None:
        """An online source went away: whatever it kept busy is idle now."""
        for gpu, sources in self._busy_sources.items():
            if source in sources:
                self.online_idle(t, gpu, source)

    def decode_gap(self, t: float, gpu: int, gap_s: float) -> None:
        self._apply(self._gate(gpu).decode_gap(gap_s, t))
        self._changed.add(gpu)

    def hold(self, t: float, gpu: int, held: bool) -> None:
        """Keep ``gpu``'s gate closed (a process on it nobody accounts for) or let it go."""
        self._changed.add(gpu)
        self._apply(self._gate(gpu).hold(t, held))
        if self.native is not None:
            self.native.hold(gpu, held)

    def absorb_native(self, entries: Sequence[tuple[int, float, int, float]]) -> None:
        """The native gate loop's accounting entries (a drained batch, in order)."""
        self._deferred.extend(entries)
        if len(self._deferred) >= ACCOUNTING_BATCH:
            self.flush_accounting()

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
        self._memory_changed = True
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
        for gpu in self.gates:
            self.tick_gate(t, gpu)
        self.tick_memory(t)
        self.accounting.advance(t)

    def tick_gate(self, t: float, gpu: int) -> None:
        """Let ``gpu``'s gate act if its deadline has come (a cooldown ended).

        Marks the gate as changed unless it has no deadline now (enabled, or busy): a timer
        that fired early must be re-armed.
        """
        gate = self.gates[gpu]
        if (d := gate.next_deadline()) is not None and d <= t:
            self._apply(gate.tick(t))
            self._drain(gpu)
        if not (gate.enabled or gate.busy):
            self._changed.add(gpu)
        if len(self._deferred) >= ACCOUNTING_BATCH:
            self.flush_accounting()

    def tick_memory(self, t: float) -> None:
        """Let every memory reservation whose deadline has come act (release intervals)."""
        self._memory_changed = True
        for gpu, res in self.memory.items():
            if (d := res.next_deadline()) is not None and d <= t:
                self._apply_memory(t, res.tick(t))
                self._refresh_harvestable(t, gpu)

    def next_deadline(self) -> float | None:
        """The earliest time a :meth:`tick` has something to do."""
        deadlines = [d for g in self.gates.values() if (d := g.next_deadline()) is not None]
        deadlines += [d for m in self.memory.values() if (d := m.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    def gate_deadline(self, gpu: int) -> float | None:
        """When :meth:`tick_gate` has something to do for ``gpu`` (None: only an event can)."""
        return self.gates[gpu].next_deadline()

    def memory_deadline(self) -> float | None:
        """When :meth:`tick_memory` has something to do (None: only an observation can)."""
        deadlines = [d for m in self.memory.values() if (d := m.next_deadline()) is not None]
        return min(deadlines, default=None)

    def take_changed(self) -> tuple[set[int], bool]:
        """GPUs whose gate, and whether any memory reservation, was touched since the last call.

        Only their deadlines can have moved: a shell with one timer per GPU re-arms just those.
        A gate left busy or enabled has no deadline and is not listed (a timer already armed
        for it may fire early; ``tick_gate`` then lists it again).
        """
        changed, memory = self._changed, self._memory_changed
        if changed:
            self._changed = set()
        if memory:
            self._memory_changed = False
        return changed, memory

    # -- internals ------------------------------------------------------------------------

    def _gpu(self, gpu: int) -> int:
        if gpu not in self.gates:
            raise KeyError(f"GPU {gpu} is not on node {self.node}")
        return gpu

    def _gate(self, gpu: int) -> ComputeGate:
        return self.gates[self._gpu(gpu)]

    def _unknown(self, gpu: int) -> KeyError:
        return KeyError(f"GPU {gpu} is not on node {self.node}")

    def _sources(self, gpu: int) -> set[str]:
        sources = self._busy_sources.get(gpu)
        if sources is None:
            raise self._unknown(gpu)
        return sources

    def _apply(self, actions: list[GateAction]) -> None:
        if self.native is not None:  # the loop's log accounts for the gates
            for a in actions:
                self.sink.set_gate(a.gpu, isinstance(a, Enable), a.t)
                self.gate_commands += 1
            return
        for a in actions:
            if isinstance(a, Disable):
                self.sink.set_gate(a.gpu, False, a.t)
                self.gate_commands += 1
                self._deferred.append((_ENABLED, a.t, a.gpu, 0.0))
                if a.preempted:
                    self._deferred.append((_PREEMPTION, a.t, a.gpu, 1.0))
            elif isinstance(a, Enable):
                self.sink.set_gate(a.gpu, True, a.t)
                self.gate_commands += 1
                self._deferred.append((_ENABLED, a.t, a.gpu, 1.0))

    def _drain(self, gpu: int) -> None:
        finished = self.gates[gpu].drain_finished()
        if self.native is None:
            for n in finished:
                self._deferred.append((_REQUEST, 0.0, gpu, n))

    def _apply_memory(self, t: float, actions: list[MemoryAction]) -> None:
        """Carry out the reservation's answers; :func:`memory_command` decides each one."""
        hb = self.memory_config.handle_bytes
        for a in actions:
            table: HandleMap | None = None
            if isinstance(a, Grow):
                if self.offline_handles is None:
                    continue
                table = self.offline_handles(a.gpu)
                view = MemoryView(free_bytes=self._free(a.gpu), reclaimable_handles=len(table))
            else:
                pages = self.quarantine[a.gpu]
                if not pages or a.gpu in self._restoring:
                    continue  # nothing to restore, or one in flight: the next Release tries
                view = MemoryView(
                    free_bytes=self._free(a.gpu),
                    oldest_quarantined_bytes=pages[0].nbytes,
                )
            cmd = memory_command(a, view, hb)
            if isinstance(cmd, ReclaimHandles) and table is not None:
                self._reclaim(t, cmd.gpu, table, cmd.handles)
            elif isinstance(cmd, RestorePage):
                self._restore_oldest(t, cmd.gpu)
            elif isinstance(cmd, RestoreDeferred):
                self.restores[cmd.gpu].deferred += 1

    def _free(self, gpu: int) -> int | None:
        return None if self.free_bytes is None else self.free_bytes(gpu)

    def _reclaim(self, t: float, gpu: int, table: HandleMap, k: int) -> None:
        # Reclamation order (docs/agent.md): compute off first, then remap/release/report.
        self._changed.add(gpu)
        self._apply(self.gates[gpu].force_disable(t))
        if self.native is not None:
            self.native.force_disable(gpu)
        plan = plan_reclamation(
            gpu,
            table,
            k,
            handle_bytes=self.memory_config.handle_bytes,
            selector=self.selector,
        )
        if self.sink.reclaim(plan, t):
            self.reclaim_completed(t, plan)

    def reclaim_completed(
        self, t: float, plan: ReclaimPlan, owners: Mapping[int, str] | None = None
    ) -> None:
        """A reclamation the sink finished: count its bytes and invalidated blocks, and keep
        its pages quarantined (``owners``: page handle → the process holding it)."""
        self.accounting.add_reclamation(plan.gpu, plan.reclaimed_bytes, plan.blocks_invalidated)
        pages = self.quarantine[self._gpu(plan.gpu)]
        for h in plan.handles:
            owner = "" if owners is None else owners.get(h, "")
            pages.append(QuarantinedPage(h, owner, plan.handle_bytes, t))

    # -- memory given back (restore) ------------------------------------------------------

    def quarantined_bytes(self, gpu: int) -> int:
        """Bytes reclaimed from offline on ``gpu`` and not given back yet."""
        return sum(page.nbytes for page in self.quarantine[self._gpu(gpu)])

    def restore_completed(
        self, t: float, gpu: int, handles: Sequence[int], ok: bool, forget: bool = False
    ) -> None:
        """The sink finished a restore of ``handles`` on ``gpu``.

        ok: the pages are backed again (forgotten here, counted). Not ok: they stay
        quarantined for a later Release, unless ``forget`` (the owner holds no such
        quarantined page: retrying could never succeed).
        """
        gpu = self._gpu(gpu)
        wanted = set(handles)
        pending = self._restoring.get(gpu)
        if pending is not None and pending.handle in wanted:
            del self._restoring[gpu]
        totals = self.restores[gpu]
        if not ok:
            totals.failures += 1
            if not forget:
                return
        kept: list[QuarantinedPage] = []
        for page in self.quarantine[gpu]:
            if page.handle not in wanted:
                kept.append(page)
            elif ok:
                totals.events += 1
                totals.restored_bytes += page.nbytes
        self.quarantine[gpu] = kept

    def adopt_quarantine(self, t: float, gpu: int, owner: str, pages: Mapping[int, int]) -> int:
        """Quarantined pages ``owner`` holds that the agent does not know (page handle →
        bytes): it lost them in a restart, or when the owner reconnected. They are kept like
        a reclamation's, after the pages already known, so Releases give them back. Pages
        known already (or being restored) are left as they are. Returns how many were new."""
        gpu = self._gpu(gpu)
        known = {page.handle for page in self.quarantine[gpu]}
        restoring = self._restoring.get(gpu)
        if restoring is not None:
            known.add(restoring.handle)
        new = [
            QuarantinedPage(h, owner, nbytes, t)
            for h, nbytes in sorted(pages.items())
            if h not in known
        ]
        self.quarantine[gpu].extend(new)
        return len(new)

    def drop_quarantine(self, owner: str, gpu: int | None = None) -> int:
        """Forget the pages ``owner`` holds (on ``gpu``, or on every GPU): it went away, and
        its quarantined pages with it. Returns how many were forgotten."""
        dropped = 0
        for g, pages in self.quarantine.items():
            if gpu is not None and g != gpu:
                continue
            kept = [page for page in pages if page.owner != owner]
            dropped += len(pages) - len(kept)
            self.quarantine[g] = kept
            pending = self._restoring.get(g)
            if pending is not None and pending.owner == owner:
                del self._restoring[g]  # its completion, if one comes, finds nothing
        return dropped

    def _restore_oldest(self, t: float, gpu: int) -> None:
        """Give ``gpu``'s oldest quarantined page back (``memory_command`` said so)."""
        page = self.quarantine[gpu][0]
        self._restoring[gpu] = page
        if self.sink.restore(gpu, page.owner, (page.handle,), t):
            self.restore_completed(t, gpu, (page.handle,), ok=True)

    def _refresh_harvestable(self, t: float, gpu: int) -> None:
        m = self.memory_model[gpu]
        reserved = max(self.memory[gpu].headroom_bytes, m.online_dynamic_bytes)
        free = m.total_bytes - m.online_base_bytes - reserved
        self.accounting.set_harvestable(t, gpu, max(0, free))
