"""The compute gate of one GPU: when offline channels may run (docs/agent.md, "Policies").

Contract. A :class:`ComputeGate` is an event-driven state machine fed, in non-decreasing
time order, by

- :meth:`ComputeGate.online_busy` — the online side started executing (optionally for a
  named online request);
- :meth:`ComputeGate.online_idle` — the online side has nothing running (optionally naming
  the requests that just finished);
- :meth:`ComputeGate.request_done` — an online request finished;
- :meth:`ComputeGate.decode_gap` — a measured gap between two decode iterations online;
- :meth:`ComputeGate.tick` — time passed (the shell calls it at :meth:`next_deadline`);
- :meth:`ComputeGate.hold` — keep the gate closed whatever the online side does (a process
  on the GPU the agent cannot account for, docs/agent.md "Uninstrumented processes"), or
  let it go; released, the gate reopens by the usual rule, one cooldown after the release.

Each returns the commands to carry out, in order: :class:`Disable` (stop every offline
channel group on the GPU now) or :class:`Enable` (let them run again). The guarantees,
checked by property tests:

1. Offline work is never enabled while the online side is busy: ``online_busy`` disables at
   once, and ``Enable`` is only ever returned while the online side is idle.
2. Enable happens only after the online side stayed idle for ``T_cool = 2 · G_max``
   (clamped to ``[cool_floor_s, cool_ceiling_s]``), G_max being the largest decode gap seen
   (reported, or measured as the idle time between two busy periods of one request).
3. At most one preemption per online request: a preemption (a Disable while offline ran) is
   charged to every request in flight, and the gate does not re-enable while any request in
   flight has already been preempted. Requests are named by the caller; a busy event without a
   name is an anonymous request that lasts one busy period. A request silent for longer than
   ``request_timeout_s`` is presumed lost (its end event never came) and forgotten.
4. Never enabled while held (:meth:`ComputeGate.hold`).

No I/O, no clocks: times are arguments (seconds, any monotonic origin).

One rule: the state machine is native code (``runtime-agent/shim/src/gate.c``, contract in
``include/gleaner_gate.h``), so that the agent, the simulator, the property tests and a native
gate loop all run the very same transitions; this class is its typed face through the ctypes
binding :mod:`gleaner.runtime_agent.gatelib`. The library is loaded at the first gate.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Iterable
from dataclasses import dataclass

from gleaner.runtime_agent import gatelib


@dataclass(frozen=True, slots=True)
class GateConfig:
    """Tuning of the compute gate."""

    cool_floor_s: float = 0.002
    """Smallest cooldown, seconds (also the cooldown before any decode gap is measured)."""
    cool_ceiling_s: float = 0.5
    """Largest cooldown, seconds: one pathological gap cannot starve offline work forever."""
    cool_factor: float = 2.0
    """T_cool = cool_factor · G_max (the paper uses 2)."""
    request_timeout_s: float | None = 300.0
    """Forget a named request not heard of for this long (its end event was lost)."""

    def __post_init__(self) -> None:
        error = gatelib.gate_library().gl_gate_config_error(ctypes.byref(self.native()))
        if error is not None:
            raise ValueError(error.decode())

    def native(self) -> gatelib.GateConfigC:
        """The native library's form (no timeout: infinity)."""
        timeout = self.request_timeout_s
        return gatelib.GateConfigC(
            self.cool_floor_s,
            self.cool_ceiling_s,
            self.cool_factor,
            math.inf if timeout is None else timeout,
        )


@dataclass(frozen=True, slots=True)
class Disable:
    """Stop every offline channel group on ``gpu`` now (a preemption when ``preempted``)."""

    gpu: int
    t: float
    preempted: bool = True


@dataclass(frozen=True, slots=True)
class Enable:
    """Let the offline channel groups on ``gpu`` run again."""

    gpu: int
    t: float


GateAction = Disable | Enable


_BAD_TIME = "event time must be finite"


class ComputeGate:
    """Compute gate of one GPU; see the module docstring for the contract.

    It starts closed (``enabled`` False) and opens after one cooldown.
    """

    __slots__ = ("_b", "_buf", "_d", "_g", "_lib", "_q", "_v", "config", "gpu", "start")

    def __init__(self, gpu: int, config: GateConfig | None = None, start: float = 0.0) -> None:
        self.gpu = gpu
        self.config = config if config is not None else GateConfig()
        self.start = start
        if not math.isfinite(start):
            raise ValueError("start must be finite")
        lib = gatelib.gate_library()
        self._lib = lib
        handle = lib.gl_gate_new(gpu, ctypes.byref(self.config.native()), start)
        if not handle:
            raise MemoryError("cannot create a compute gate")
        self._g: ctypes.c_void_p | None = ctypes.c_void_p(handle)  # no conversion per call
        self._v: gatelib.GateView = lib.gl_gate_state(self._g).contents
        self._b, self._d, self._q = gatelib.view_memory(self._v)
        self._buf = (ctypes.c_uint32 * 64)()

    def __del__(self) -> None:
        g, self._g = getattr(self, "_g", None), None
        if g is not None:
            self._lib.gl_gate_free(g)

    def __repr__(self) -> str:
        return (
            f"ComputeGate(gpu={self.gpu}, enabled={self.enabled}, busy={self.busy}, "
            f"held={self.held}, now={self.now})"
        )

    # -- state ----------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """Whether offline channels are enabled now."""
        return bool(self._b[gatelib.B_ENABLED])

    @property
    def busy(self) -> bool:
        return bool(self._b[gatelib.B_BUSY])

    @property
    def held(self) -> bool:
        """Whether :meth:`hold` keeps the gate closed."""
        return bool(self._b[gatelib.B_HELD])

    @property
    def g_max_s(self) -> float:
        """The largest decode gap seen, seconds."""
        return float(self._d[gatelib.D_G_MAX])

    @property
    def preemptions(self) -> int:
        return int(self._q[gatelib.Q_PREEMPTIONS])

    @property
    def online_requests(self) -> int:
        return int(self._q[gatelib.Q_ONLINE_REQUESTS])

    @property
    def max_preemptions_per_request(self) -> int:
        return int(self._q[gatelib.Q_MAX_PREEMPTIONS])

    @property
    def cooldown_s(self) -> float:
        """T_cool now: cool_factor · G_max clamped to the configured floor and ceiling."""
        return float(self._lib.gl_gate_cooldown(self._g))

    @property
    def now(self) -> float:
        return float(self._d[gatelib.D_NOW])

    def enabled_seconds(self, t: float | None = None) -> float:
        """Seconds offline channels were enabled since ``start``, up to ``t`` (default: now)."""
        return float(self._lib.gl_gate_enabled_seconds(self._g, self.now if t is None else t))

    def busy_seconds(self, t: float | None = None) -> float:
        """Seconds the online side was busy since ``start``, up to ``t`` (default: now)."""
        return float(self._lib.gl_gate_busy_seconds(self._g, self.now if t is None else t))

    def inflight(self) -> dict[str, int]:
        """Requests in flight and the preemptions each has seen."""
        out: dict[str, int] = {}
        name = ctypes.c_void_p()
        size = ctypes.c_size_t()
        count = ctypes.c_uint32()
        i = 0
        refs = (ctypes.byref(name), ctypes.byref(size), ctypes.byref(count))
        while self._lib.gl_gate_inflight_at(self._g, i, *refs):
            raw = ctypes.string_at(name.value or 0, size.value)
            out[raw.decode(errors="replace")] = count.value
            i += 1
        return out

    def next_deadline(self) -> float | None:
        """When a :meth:`tick` may next change something (None: only an event can)."""
        d: float = self._lib.gl_gate_next_deadline(self._g)
        return None if d == math.inf else d

    def has_finished(self) -> bool:
        """Whether requests finished since the last :meth:`drain_finished` (cheap to ask)."""
        return bool(self._q[gatelib.Q_FINISHED])

    def drain_finished(self) -> list[int]:
        """Preemption counts of the requests finished since the last call (for a histogram)."""
        out: list[int] = []
        buf = self._buf
        while self._q[gatelib.Q_FINISHED]:
            n = self._lib.gl_gate_drain_finished(self._g, buf, len(buf))
            out.extend(buf[:n])
        return out

    # -- events ---------------------------------------------------------------------------

    def online_busy(self, t: float, request: str | None = None) -> list[GateAction]:
        """The online side started executing (for ``request``, if named)."""
        if request is None:
            return self._act(self._lib.gl_gate_online_busy(self._g, t, None, 0))
        raw = request.encode()
        return self._act(self._lib.gl_gate_online_busy(self._g, t, raw, len(raw)))

    def online_idle(self, t: float, finished: Iterable[str] = ()) -> list[GateAction]:
        """The online side went idle; ``finished`` names the requests that just completed."""
        lib, g = self._lib, self._g
        for name in finished:
            raw = name.encode()
            self._check(lib.gl_gate_finish(g, t, raw, len(raw)))
        return self._act(lib.gl_gate_online_idle(g, t))

    def request_done(self, t: float, request: str) -> list[GateAction]:
        """Online request ``request`` finished (the online side may still be busy)."""
        raw = request.encode()
        return self._act(self._lib.gl_gate_request_done(self._g, t, raw, len(raw)))

    def decode_gap(self, gap_s: float, t: float | None = None) -> list[GateAction]:
        """A measured gap between two decode iterations online (raises G_max if larger)."""
        rc = self._lib.gl_gate_decode_gap(self._g, gap_s, 0.0 if t is None else t, t is not None)
        return self._act(rc)

    def tick(self, t: float) -> list[GateAction]:
        """Time passed: re-enable when the cooldown has elapsed."""
        return self._act(self._lib.gl_gate_tick(self._g, t))

    def force_disable(self, t: float) -> list[GateAction]:
        """Disable without an online request (memory reclamation turns compute off first).

        Not a preemption of any online request; the gate re-enables by the usual rule.
        """
        return self._act(self._lib.gl_gate_force_disable(self._g, t))

    def hold(self, t: float, held: bool) -> list[GateAction]:
        """Keep the gate closed (``held``) or let it go (not a preemption either way).

        Held, it disables at once if enabled and never enables; let go, it reopens after a
        whole cooldown counted from the release, by the usual rule.
        """
        return self._act(self._lib.gl_gate_hold(self._g, t, held))

    # -- internals ------------------------------------------------------------------------

    def _act(self, rc: int) -> list[GateAction]:
        if rc == gatelib.NONE:
            return []
        if rc == gatelib.ENABLE:
            return [Enable(self.gpu, self._d[gatelib.D_NOW])]
        if rc > 0:
            return [Disable(self.gpu, self._d[gatelib.D_NOW], preempted=rc == gatelib.DISABLE)]
        self._check(rc)
        return []

    @staticmethod
    def _check(rc: int) -> None:
        if rc == gatelib.BAD_TIME:
            raise ValueError(_BAD_TIME)
        if rc == gatelib.NO_MEMORY:
            raise MemoryError("the compute gate ran out of memory")
