"""Which GPU processes the agent cannot account for (docs/agent.md, "Uninstrumented processes").

Contract. An :class:`Instrumentation` (one per node) is fed, in non-decreasing time order:

- :meth:`Instrumentation.connected` — a shim said HELLO on a connection (its pid, role and
  GPUs, and the pid the socket's peer credentials give in the agent's pid namespace, when
  known: a shim in another pid namespace reports its own); only ``online`` and ``offline``
  shims account for their pids (a framework hook gates nothing, so its pid alone does not
  count);
- :meth:`Instrumentation.heard` — any frame from that connection;
- :meth:`Instrumentation.disconnected` — the connection closed;
- :meth:`Instrumentation.set_processes` — the processes the driver lists on a GPU now
  (None: unknown, e.g. no NVML);
- :meth:`Instrumentation.set_holders` — the pods the kubelet says hold a GPU now (its
  PodResources API; None: unknown, e.g. no kubelet socket).

It answers, per GPU, :meth:`Instrumentation.uninstrumented`: the processes nobody accounts
for, each with why —

1. ``unknown``: a process the driver lists whose pid is no connected, live ``online`` or
   ``offline`` shim's (a shim loaded but told to stand aside never connects, so it lands
   here too). With ``match="count"`` (the agent does not share the workloads' pid
   namespace, so no pid can be matched) processes are counted instead: a GPU whose driver
   lists more processes than live ``online`` and ``offline`` shims name it has that many
   ``unknown`` ones (reported under the highest pids no live shim's pid matches);
2. ``silent``: a connected online shim on the GPU that sent nothing for ``silence_s``
   (from ``last frame + silence_s`` on; it is heard again with its next frame);
3. ``disconnected``: an online shim on the GPU whose connection closed, until a shim with
   its pid connects again or the driver's list for that GPU is known and no longer holds
   the pid (the process ended);
4. ``unshimmed``: a pod the kubelet says holds the GPU (the device plugin gave it to the
   pod) while fewer live online shims name the GPU than pods hold it: every holder is
   reported (which of them lacks the shim cannot be told), pid 0. A pod that holds a GPU
   can start using it at any moment, so it holds the gate before its first process shows.

:meth:`Instrumentation.held` is whether the GPU's offline gate must stay closed: some process
is uninstrumented and the node does not opt out (``enforce``). The guarantee, property-tested
together with the gate (``tests/runtime-agent/test_instrumented.py``): whatever the order of
connects, disconnects, frames, busy edges and process lists, a gate driven by ``held`` never
enables while an uninstrumented process is on its GPU. :meth:`Instrumentation.next_deadline`
is when a live online shim turns silent (``held`` can change then with no event).

No I/O, no clocks: times are arguments; the shell (``gleaner.runtime_agent.instrumented``)
reads the driver's process lists and maps pids to pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

Role = Literal["online", "offline", "framework"]
Why = Literal["unknown", "silent", "disconnected", "unshimmed"]
Match = Literal["pids", "count"]


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process the driver lists on a GPU."""

    pid: int
    pod: str = ""
    """``namespace/name`` of its pod when known ("" otherwise)."""


@dataclass(frozen=True, slots=True, order=True)
class Uninstrumented:
    """A process on a GPU that no connected shim accounts for."""

    pid: int
    why: Why
    pod: str = ""


@dataclass(frozen=True, slots=True)
class InstrumentationConfig:
    """Tuning of the uninstrumented-process guard."""

    enforce: bool = True
    """False: the node opts out; uninstrumented processes are still reported, never held."""
    silence_s: float | None = 5.0
    """An online shim silent this long no longer accounts for its GPUs (None: never). The
    shim sends a HEARTBEAT every second (docs/protocol.md), so 5 s is several missed beats."""

    match: Match = "pids"
    """How the driver's processes are matched with shims: ``pids`` (the agent sees the
    workloads' pids: the host's pid namespace) or ``count`` (it does not: rule 1 counts)."""

    peer_pids: bool = True
    """Count the pid from the socket's peer credentials as the shim's too (False: the HELLO
    pid only, for tests that play several processes from one)."""

    def __post_init__(self) -> None:
        if self.match not in ("pids", "count"):
            raise ValueError(f"match must be pids or count, not {self.match!r}")
        if self.silence_s is not None and self.silence_s <= 0:
            raise ValueError("silence_s must be positive")


@dataclass(slots=True)
class _Shim:
    pid: int
    peer: int | None
    """The pid the socket's peer credentials gave (the agent's pid namespace), if any."""
    role: Role
    gpus: tuple[int, ...]
    last_heard: float


@dataclass(slots=True)
class Instrumentation:
    """See the module docstring."""

    gpus: Sequence[int]
    config: InstrumentationConfig = field(default_factory=InstrumentationConfig)
    _shims: dict[str, _Shim] = field(init=False, default_factory=dict)
    _processes: dict[int, tuple[GpuProcess, ...] | None] = field(init=False)
    _lost: dict[int, set[tuple[int, int | None]]] = field(init=False)
    """GPU → (HELLO pid, peer pid) of online shims whose connection closed (rule 3)."""
    _holders: dict[int, tuple[str, ...] | None] = field(init=False)
    """GPU → the pods the kubelet says hold it (rule 4; None: unknown)."""

    def __post_init__(self) -> None:
        self._processes = {g: None for g in self.gpus}
        self._lost = {g: set() for g in self.gpus}
        self._holders = {g: None for g in self.gpus}

    # -- events ---------------------------------------------------------------------------

    def connected(
        self,
        t: float,
        key: str,
        pid: int,
        role: Role,
        gpus: Iterable[int],
        peer_pid: int | None = None,
    ) -> None:
        """Connection ``key`` said HELLO (again: the last HELLO counts)."""
        mine = tuple(g for g in gpus if g in self._lost)
        use_peer = self.config.peer_pids and peer_pid and peer_pid != pid
        peer = peer_pid if use_peer else None
        self._shims[key] = _Shim(pid, peer, role, mine, t)
        if role in ("online", "offline"):
            pids = _pids(pid, peer)
            for lost in self._lost.values():
                lost -= {gone for gone in lost if _pids(*gone) & pids}

    def heard(self, t: float, key: str) -> None:
        """A frame arrived on connection ``key``."""
        shim = self._shims.get(key)
        if shim is not None and t > shim.last_heard:
            shim.last_heard = t

    def disconnected(self, t: float, key: str) -> None:
        """Connection ``key`` closed."""
        shim = self._shims.pop(key, None)
        if shim is None or shim.role != "online":
            return
        if _pids(shim.pid, shim.peer) & self._live_pids(t):
            return  # another connection of the same process still accounts for it
        for g in shim.gpus:
            self._lost[g].add((shim.pid, shim.peer))

    def set_processes(self, t: float, gpu: int, processes: Sequence[GpuProcess] | None) -> None:
        """The processes the driver lists on ``gpu`` now (None: unknown)."""
        if gpu not in self._processes:
            raise KeyError(f"unknown GPU {gpu}")
        if processes is None:
            self._processes[gpu] = None
            return
        listed = tuple(processes)
        self._processes[gpu] = listed
        pids = {proc.pid for proc in listed}
        # A lost online process that ended is gone for good.
        self._lost[gpu] = {gone for gone in self._lost[gpu] if _pids(*gone) & pids}

    def set_holders(self, t: float, gpu: int, pods: Iterable[str] | None) -> None:
        """The pods (``namespace/name``) the kubelet says hold ``gpu`` now (None: unknown)."""
        if gpu not in self._holders:
            raise KeyError(f"unknown GPU {gpu}")
        self._holders[gpu] = None if pods is None else tuple(sorted(set(pods)))

    # -- answers --------------------------------------------------------------------------

    def uninstrumented(self, gpu: int, t: float) -> tuple[Uninstrumented, ...]:
        """The processes on ``gpu`` no connected shim accounts for at ``t``, by pid."""
        live = self._live_pids(t)
        out: dict[int, Uninstrumented] = {}
        listed = self._processes[gpu]
        pods = {proc.pid: proc.pod for proc in listed} if listed is not None else {}
        covered: set[int] = set()

        def add(hello: int, peer: int | None, why: Why) -> None:
            # One entry per process, under the pid the driver lists when it lists one.
            pid = peer if peer is not None and peer in pods else hello
            out[pid] = Uninstrumented(pid, why, pods.get(pid, ""))
            covered.update((hello, peer) if peer is not None else (hello,))

        for hello, peer in sorted(self._lost[gpu], key=str):
            if not _pids(hello, peer) & live:
                add(hello, peer, "disconnected")
        for shim in self._shims.values():
            online = shim.role == "online" and gpu in shim.gpus
            if online and not _pids(shim.pid, shim.peer) & live and not self._alive(shim, t):
                add(shim.pid, shim.peer, "silent")
        unknown = [p for p in listed or () if p.pid not in live and p.pid not in covered]
        if self.config.match == "count":
            # Pids say nothing here: the GPU has as many instrumented processes as live
            # shims name it, and the rest of the driver's list is unknown (the highest pids,
            # preferring ones no live shim's pid matches).
            shims: int = sum(
                1
                for s in self._shims.values()
                if s.role in ("online", "offline") and gpu in s.gpus and self._alive(s, t)
            )
            extra = max(0, len(listed or ()) - shims)
            ranked = sorted(listed or (), key=lambda p: (p.pid not in live, p.pid))
            unknown = [p for p in ranked[len(ranked) - extra :] if p.pid not in covered]
        for proc in unknown:
            out[proc.pid] = Uninstrumented(proc.pid, "unknown", proc.pod)
        found = sorted(out.values())
        holders = self._holders[gpu]
        if holders:
            serving: int = sum(
                1
                for s in self._shims.values()
                if s.role == "online" and gpu in s.gpus and self._alive(s, t)
            )
            if serving < len(holders):
                found += [Uninstrumented(0, "unshimmed", pod) for pod in holders]
        return tuple(found)

    def held(self, gpu: int, t: float) -> bool:
        """Whether ``gpu``'s offline gate must stay closed at ``t``."""
        return self.config.enforce and bool(self.uninstrumented(gpu, t))

    def next_deadline(self, t: float) -> float | None:
        """The earliest time after ``t`` a connected online shim turns silent (None: none)."""
        silence = self.config.silence_s
        if silence is None:
            return None
        times = [
            s.last_heard + silence
            for s in self._shims.values()
            if s.role == "online" and s.last_heard + silence > t
        ]
        return min(times, default=None)

    # -- internals ------------------------------------------------------------------------

    def _alive(self, shim: _Shim, t: float) -> bool:
        silence = self.config.silence_s
        if shim.role != "online" or silence is None:
            return True
        return t - shim.last_heard < silence

    def _live_pids(self, t: float) -> set[int]:
        live: set[int] = set()
        for s in self._shims.values():
            if s.role in ("online", "offline") and self._alive(s, t):
                live.add(s.pid)
                if s.peer is not None:
                    live.add(s.peer)
        return live


def _pids(pid: int, peer: int | None) -> set[int]:
    return {pid} if peer is None else {pid, peer}
