"""MIAD online memory headroom of one GPU (docs/agent.md, "Policies").

Contract. The online workload keeps a headroom of ``H`` pre-mapped memory handles (units of
``handle_bytes``, 2 MiB by default) that it can grow into without waiting for offline work to
give memory back. A :class:`MemoryReservation` is fed, in non-decreasing time order,

- :meth:`MemoryReservation.observe` — how many headroom handles online uses now;
- :meth:`MemoryReservation.tick` — time passed (call it at :meth:`next_deadline`; None
  there: at ``min_handles``, only an observation can change anything),

and answers with commands: :class:`Grow` (take that many handles from offline work — the
shell runs a reclamation, see :mod:`gleaner.runtime_agent.policy.reclaim` — and map them to online)
or :class:`Release` (give one handle back to offline work).

Rules:

- Pressure event: online uses ``>= pressure_threshold`` (90%) of H → H grows
  multiplicatively, ``H ← max(H + 1, ⌈α·H⌉, ⌈used / threshold⌉)``, capped at ``capacity``.
- Without pressure, one handle is released every interval T (never below ``min_handles``,
  never a release that would itself cause a pressure event).
- T is MIAD-controlled toward ``target_pressure_rate_per_s`` (events per second over the last
  ``rate_window_s``): at a pressure event while the rate is above target, ``T ← β·T``; at a
  release while the rate is below target, ``T ← T − δ``; always within ``[min, max]``.

No I/O, no clocks: times are arguments.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """Tuning of the MIAD memory reservation."""

    handle_bytes: int = 2 * MIB
    """Bytes per handle (the mapping granularity)."""
    pressure_threshold: float = 0.9
    """Fraction of the headroom in use that counts as a pressure event."""
    alpha: float = 2.0
    """Multiplicative growth of the headroom on a pressure event."""
    initial_handles: int = 64
    """Headroom at start, handles."""
    min_handles: int = 1
    """Never release below this many handles."""
    initial_interval_s: float = 1.0
    """Release interval T at start, seconds."""
    min_interval_s: float = 0.05
    max_interval_s: float = 60.0
    interval_increase: float = 2.0
    """β: T ← β·T at a pressure event while the pressure rate is above target."""
    interval_decrease_s: float = 0.05
    """δ: T ← T − δ at a release while the pressure rate is below target."""
    target_pressure_rate_per_s: float = 1.0 / 60.0
    """Pressure events per second T is steered toward."""
    rate_window_s: float = 300.0
    """Window over which the pressure-event rate is measured."""

    def __post_init__(self) -> None:
        if self.handle_bytes <= 0:
            raise ValueError("handle_bytes must be positive")
        if not 0 < self.pressure_threshold <= 1:
            raise ValueError("pressure_threshold must be in (0, 1]")
        if self.alpha <= 1:
            raise ValueError("alpha must be > 1")
        if self.min_handles < 1 or self.initial_handles < self.min_handles:
            raise ValueError("need 1 <= min_handles <= initial_handles")
        if not 0 < self.min_interval_s <= self.initial_interval_s <= self.max_interval_s:
            raise ValueError("need 0 < min_interval_s <= initial_interval_s <= max_interval_s")
        if self.interval_increase <= 1 or self.interval_decrease_s < 0:
            raise ValueError("need interval_increase > 1 and interval_decrease_s >= 0")
        if self.target_pressure_rate_per_s <= 0 or self.rate_window_s <= 0:
            raise ValueError("target rate and rate window must be positive")


@dataclass(frozen=True, slots=True)
class Grow:
    """A pressure event: take ``handles`` more handles from offline work for online."""

    gpu: int
    t: float
    handles: int


@dataclass(frozen=True, slots=True)
class Release:
    """Give ``handles`` (one) headroom handles back to offline work."""

    gpu: int
    t: float
    handles: int = 1


MemoryAction = Grow | Release


@dataclass(slots=True)
class MemoryReservation:
    """MIAD headroom of one GPU; see the module docstring for the contract."""

    gpu: int
    config: MemoryConfig = field(default_factory=MemoryConfig)
    capacity: int | None = None
    """Most handles the headroom may hold (the GPU's memory not pinned by online)."""
    start: float = 0.0
    headroom: int = 0
    used: int = 0
    interval_s: float = 0.0
    pressure_events: int = 0
    releases: int = 0
    _now: float = 0.0
    _last_release: float = 0.0
    _events: deque[float] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if self.capacity is not None and self.capacity < self.config.min_handles:
            raise ValueError("capacity is smaller than min_handles")
        self.headroom = self._cap(self.config.initial_handles)
        self.interval_s = self.config.initial_interval_s
        self._now = self.start
        self._last_release = self.start

    @property
    def headroom_bytes(self) -> int:
        return self.headroom * self.config.handle_bytes

    def pressure_rate(self) -> float:
        """Pressure events per second over the rate window ending now."""
        self._trim(self._now)
        return len(self._events) / self.config.rate_window_s

    def next_deadline(self) -> float | None:
        """When :meth:`tick` may next release a handle (None: only :meth:`observe` can
        change anything, because the headroom is at ``min_handles``, where a tick releases
        nothing and only a pressure event grows it; an idle GPU's shell sleeps)."""
        if self.headroom <= self.config.min_handles:
            return None
        return self._last_release + self.interval_s

    def observe(self, t: float, used: int) -> list[MemoryAction]:
        """Online uses ``used`` handles of its headroom now."""
        t = self._advance(t)
        if used < 0:
            raise ValueError("used must be >= 0")
        self.used = used
        c = self.config
        if used < c.pressure_threshold * self.headroom:
            return self.tick(t)
        # Pressure: grow the headroom multiplicatively and slow the releases down if the
        # pressure-event rate is above its target.
        self.pressure_events += 1
        self._events.append(t)
        if self.pressure_rate() > c.target_pressure_rate_per_s:
            self.interval_s = min(c.max_interval_s, self.interval_s * c.interval_increase)
        want = max(
            self.headroom + 1,
            math.ceil(self.headroom * c.alpha),
            math.ceil(used / c.pressure_threshold),
        )
        new = self._cap(want)
        grown = new - self.headroom
        self.headroom = new
        # A release interval starts afresh after a pressure event.
        self._last_release = t
        return [Grow(self.gpu, t, grown)] if grown > 0 else []

    def tick(self, t: float) -> list[MemoryAction]:
        """Time passed: release one handle when the interval has elapsed without pressure."""
        t = self._advance(t)
        c = self.config
        if t < self._last_release + self.interval_s:
            return []
        if self.headroom <= c.min_handles:
            self._last_release = t
            return []
        if self.used >= c.pressure_threshold * (self.headroom - 1):
            # Releasing now would itself be a pressure event: wait another interval.
            self._last_release = t
            return []
        self.headroom -= 1
        self.releases += 1
        self._last_release = t
        if self.pressure_rate() < c.target_pressure_rate_per_s:
            self.interval_s = max(c.min_interval_s, self.interval_s - c.interval_decrease_s)
        return [Release(self.gpu, t)]

    def _advance(self, t: float) -> float:
        if not math.isfinite(t):
            raise ValueError("event time must be finite")
        self._now = max(self._now, t)
        return self._now

    def _trim(self, t: float) -> None:
        horizon = t - self.config.rate_window_s
        while self._events and self._events[0] <= horizon:
            self._events.popleft()

    def _cap(self, handles: int) -> int:
        if self.capacity is not None:
            handles = min(handles, self.capacity)
        return max(handles, self.config.min_handles)
