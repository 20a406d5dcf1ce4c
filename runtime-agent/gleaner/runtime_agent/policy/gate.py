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
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field


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
        if not (0 <= self.cool_floor_s <= self.cool_ceiling_s):
            raise ValueError("need 0 <= cool_floor_s <= cool_ceiling_s")
        if self.cool_factor <= 0:
            raise ValueError("cool_factor must be positive")
        if self.request_timeout_s is not None and self.request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be positive")


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


@dataclass(slots=True)
class _Request:
    preemptions: int = 0
    last_seen: float = 0.0
    last_idle_at: float | None = None
    anonymous: bool = False


@dataclass(slots=True)
class ComputeGate:
    """Compute gate of one GPU; see the module docstring for the contract."""

    gpu: int
    config: GateConfig = field(default_factory=GateConfig)
    start: float = 0.0
    enabled: bool = False
    """Whether offline channels are enabled now (starts closed; opens after one cooldown)."""

    busy: bool = False
    held: bool = False
    """Whether :meth:`hold` keeps the gate closed."""
    g_max_s: float = 0.0
    preemptions: int = 0
    online_requests: int = 0
    max_preemptions_per_request: int = 0
    _now: float = 0.0
    _idle_since: float = 0.0
    _enabled_s: float = 0.0
    _busy_s: float = 0.0
    _inflight: dict[str, _Request] = field(default_factory=dict)
    _anon_seq: int = 0
    _finished: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._now = self.start
        self._idle_since = self.start

    # -- derived values -------------------------------------------------------------------

    @property
    def cooldown_s(self) -> float:
        """T_cool now: cool_factor · G_max clamped to the configured floor and ceiling."""
        c = self.config
        return min(c.cool_ceiling_s, max(c.cool_floor_s, c.cool_factor * self.g_max_s))

    @property
    def now(self) -> float:
        return self._now

    def enabled_seconds(self, t: float | None = None) -> float:
        """Seconds offline channels were enabled since ``start``, up to ``t`` (default: now)."""
        extra = max(0.0, (t if t is not None else self._now) - self._now)
        return self._enabled_s + (extra if self.enabled else 0.0)

    def busy_seconds(self, t: float | None = None) -> float:
        """Seconds the online side was busy since ``start``, up to ``t`` (default: now)."""
        extra = max(0.0, (t if t is not None else self._now) - self._now)
        return self._busy_s + (extra if self.busy else 0.0)

    def inflight(self) -> dict[str, int]:
        """Requests in flight and the preemptions each has seen."""
        return {k: r.preemptions for k, r in self._inflight.items()}

    def next_deadline(self) -> float | None:
        """When a :meth:`tick` may next change something (None: only an event can)."""
        if self.enabled or self.busy or self.held:
            return None
        c = self.config  # the cooldown, as cooldown_s (inline: this runs after every event)
        cool = min(c.cool_ceiling_s, max(c.cool_floor_s, c.cool_factor * self.g_max_s))
        if self._inflight and any(r.preemptions for r in self._inflight.values()):
            timeout = c.request_timeout_s
            if timeout is None:
                return None
            return max(
                self._idle_since + cool,
                min(r.last_seen for r in self._inflight.values() if r.preemptions) + timeout,
            )
        return self._idle_since + cool

    def has_finished(self) -> bool:
        """Whether requests finished since the last :meth:`drain_finished` (cheap to ask)."""
        return bool(self._finished)

    def drain_finished(self) -> list[int]:
        """Preemption counts of the requests finished since the last call (for a histogram)."""
        out, self._finished = self._finished, []
        return out

    # -- events ---------------------------------------------------------------------------

    def online_busy(self, t: float, request: str | None = None) -> list[GateAction]:
        """The online side started executing (for ``request``, if named)."""
        t = self._advance(t)
        if request is None:
            self._anon_seq += 1
            request = f"\0anon-{self._anon_seq}"
            req = _Request(last_seen=t, anonymous=True)
            self._inflight[request] = req
            self.online_requests += 1
        else:
            found = self._inflight.get(request)
            if found is None:
                req = _Request(last_seen=t)
                self._inflight[request] = req
                self.online_requests += 1
            else:
                req = found
                if req.last_idle_at is not None and not self.busy:
                    # The idle time between two busy periods of one request is a decode gap.
                    self._observe_gap(t - req.last_idle_at)
                req.last_seen = t
                req.last_idle_at = None
        self.busy = True
        if not self.enabled:
            return []
        self.enabled = False
        self.preemptions += 1
        most = self.max_preemptions_per_request
        for r in self._inflight.values():
            r.preemptions += 1
            if r.preemptions > most:
                most = r.preemptions
        self.max_preemptions_per_request = most
        return [Disable(self.gpu, t)]

    def online_idle(self, t: float, finished: Iterable[str] = ()) -> list[GateAction]:
        """The online side went idle; ``finished`` names the requests that just completed."""
        t = self._advance(t)
        for name in finished:
            self._finish(name)
        inflight = self._inflight
        if inflight:
            for name in [k for k, r in inflight.items() if r.anonymous]:
                self._finish(name)
        if self.busy:
            self.busy = False
            self._idle_since = t
            for r in inflight.values():
                r.last_idle_at = t
                r.last_seen = t
        return self._maybe_enable(t)

    def request_done(self, t: float, request: str) -> list[GateAction]:
        """Online request ``request`` finished (the online side may still be busy)."""
        t = self._advance(t)
        self._finish(request)
        return self._maybe_enable(t)

    def decode_gap(self, gap_s: float, t: float | None = None) -> list[GateAction]:
        """A measured gap between two decode iterations online (raises G_max if larger)."""
        if t is not None:
            t = self._advance(t)
        self._observe_gap(gap_s)
        return []

    def tick(self, t: float) -> list[GateAction]:
        """Time passed: re-enable when the cooldown has elapsed."""
        t = self._advance(t)
        return self._maybe_enable(t)

    def force_disable(self, t: float) -> list[GateAction]:
        """Disable without an online request (memory reclamation turns compute off first).

        Not a preemption of any online request; the gate re-enables by the usual rule.
        """
        t = self._advance(t)
        self._idle_since = max(self._idle_since, t)
        if not self.enabled:
            return []
        self.enabled = False
        return [Disable(self.gpu, t, preempted=False)]

    def hold(self, t: float, held: bool) -> list[GateAction]:
        """Keep the gate closed (``held``) or let it go (not a preemption either way).

        Held, it disables at once if enabled and never enables; let go, it reopens after a
        whole cooldown counted from the release, by the usual rule.
        """
        t = self._advance(t)
        if held == self.held:
            return []
        self.held = held
        if held:
            if not self.enabled:
                return []
            self.enabled = False
            return [Disable(self.gpu, t, preempted=False)]
        self._idle_since = max(self._idle_since, t)
        return self._maybe_enable(t)

    # -- internals ------------------------------------------------------------------------

    def _advance(self, t: float) -> float:
        now = self._now
        if not now <= t < math.inf:  # earlier, or not finite
            if not math.isfinite(t):
                raise ValueError("event time must be finite")
            return now
        dt = t - now
        if self.enabled:
            self._enabled_s += dt
        if self.busy:
            self._busy_s += dt
        self._now = t
        if self._inflight and self.config.request_timeout_s is not None:
            self._expire(t)
        return t

    def _expire(self, t: float) -> None:
        timeout = self.config.request_timeout_s
        if timeout is None or not self._inflight:
            return
        for name in [
            k for k, r in self._inflight.items() if not r.anonymous and t - r.last_seen > timeout
        ]:
            self._finish(name)

    def _finish(self, name: str) -> None:
        req = self._inflight.pop(name, None)
        if req is not None:
            self._finished.append(req.preemptions)

    def _observe_gap(self, gap_s: float) -> None:
        if gap_s > self.g_max_s and math.isfinite(gap_s):
            self.g_max_s = gap_s

    def _maybe_enable(self, t: float) -> list[GateAction]:
        if self.enabled or self.busy or self.held:
            return []
        c = self.config
        if t < self._idle_since + min(
            c.cool_ceiling_s, max(c.cool_floor_s, c.cool_factor * self.g_max_s)
        ):
            return []
        if self._inflight and any(r.preemptions for r in self._inflight.values()):
            return []
        self.enabled = True
        return [Enable(self.gpu, t)]
