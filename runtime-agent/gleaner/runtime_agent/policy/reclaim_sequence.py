"""The reclamation and restore sequences of the nvidia backend, as one pure state machine.

Contract. A :class:`ReclaimSequence` (one per node) decides which RECLAIM and RESTORE frames
go to which offline process, and when a reclamation or a restore is over. The socket server
(:mod:`gleaner.runtime_agent.server`) is its shell: it feeds it, in non-decreasing time order,

- :meth:`~ReclaimSequence.offline_joined` / :meth:`~ReclaimSequence.left` — an offline
  process said HELLO (its GPUs, whether its gate starts open) / a connection went away;
- :meth:`~ReclaimSequence.gate_sent` / :meth:`~ReclaimSequence.gate_acked` — a GATE went to
  an offline process / its GATE_ACK came back;
- :meth:`~ReclaimSequence.reclaim` — the agent's plan, with the offline processes
  (:func:`reclaim_targets`) that are to release its pages, after the agent's forced disable;
- :meth:`~ReclaimSequence.reclaim_acked` / :meth:`~ReclaimSequence.restore_acked` — a
  RECLAIM_ACK / RESTORE_ACK;
- :meth:`~ReclaimSequence.restore` — the agent wants quarantined pages back;
- :meth:`~ReclaimSequence.adopt` — quarantined pages a process reported that the agent
  takes back (after an agent restart or a reconnect);
- :meth:`~ReclaimSequence.tick` — time passed (the shell calls it at :meth:`next_deadline`),

and carries out the commands each call returns, in order: :class:`SendReclaim` and
:class:`SendRestore` (a frame to one connection), :class:`ReclaimCompleted` (the shell sends
INVALIDATE_BLOCKS, drops the pages from its tables and tells the agent),
:class:`ReclaimAbandoned`, :class:`HoldEnded` (send an enable the gate wants now) and
:class:`RestoreFinished` (tell the agent). The order is the one of docs/agent.md ("Limits")
and docs/protocol.md (RECLAIM, RESTORE):

1. Reclamations run one at a time per GPU, in arrival order. From its acceptance until it
   ends, :meth:`~ReclaimSequence.holding` is true for its GPU: the shell sends no enable to
   an offline process using that GPU (compute stays off while memory is taken from it).
2. The running one waits until every offline process on its GPU acknowledged a disable
   (GATE_ACK ``enabled=0``, ``ok=1``, for the last GATE it was sent; a process that was never
   sent a GATE counts when its gate started closed). An ack that says enabled or not ok
   abandons it (``not-disabled``).
3. Then RECLAIM goes to each target with that target's pages, and it waits for every
   RECLAIM_ACK of that ``reclaim_seq``.
4. Every ack ok: :class:`ReclaimCompleted`, naming per page the process that released it
   (it keeps the page quarantined). One refusal: abandoned (``refused``).

A target that goes away abandons it (``gone``; at its start when the target left while it
was queued: no RECLAIM goes to anyone); so does running ``reclaim_timeout_s`` without
an end (``timed-out``); a plan no offline process owns is refused at once (``no-owner``, no
hold). Each end of a held reclamation is followed by :class:`HoldEnded` and the start of the
GPU's next one.

Restores: RESTORE goes to the process that holds the pages quarantined — those a completed
reclamation left with it, or that it was given by :meth:`~ReclaimSequence.adopt` — and its
RESTORE_ACK (matched by ``restore_seq`` and connection) finishes it: ok when ``ok`` and every
page restored; ``forget`` when refused with ``ENOENT`` (the process holds no such page). No
ack within ``restore_timeout_s`` is a failure (a late ack is ignored). A restore of pages that
process does not hold quarantined fails at once with ``forget``, no frame sent. A process that
goes away takes its quarantined pages and its restores with it (they end silently: the agent
drops its pages itself).

Guarantees, property-tested (tests/runtime-agent/test_reclaim_sequence.py):

1. No RECLAIM before every offline process on the GPU acknowledged a disable, hence no
   completion (and no INVALIDATE_BLOCKS) before it either; a completion only after every
   target acknowledged ``ok`` that very RECLAIM.
2. Every accepted reclamation ends exactly once: completed, or abandoned (refused, gone,
   not disabled, timed out).
3. RESTORE only of pages a completed reclamation (or an adoption) left quarantined in that
   very process and not restored, forgotten or gone since.
4. Nothing pends forever: whatever is under way has a deadline at most one timeout ahead,
   and :meth:`~ReclaimSequence.tick` at it ends it or moves it on.

No I/O, no clocks: times are arguments (seconds, any monotonic origin).
"""

from __future__ import annotations

import errno
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gleaner.runtime_agent.policy.reclaim import ReclaimPlan


class Abandon(StrEnum):
    """Why a reclamation ended without releasing anything the agent counts."""

    NO_OWNER = "no-owner"
    """No offline process owns its pages: refused at once."""
    NOT_DISABLED = "not-disabled"
    """An offline process on the GPU acknowledged its GATE as enabled, or not ok."""
    GONE = "gone"
    """A target went away."""
    REFUSED = "refused"
    """A target answered RECLAIM_ACK ``ok=0``."""
    TIMED_OUT = "timed-out"
    """No end within ``reclaim_timeout_s`` of its start."""


class RestoreEnd(StrEnum):
    """How a restore ended."""

    RESTORED = "restored"
    REFUSED = "refused"
    TIMED_OUT = "timed-out"
    NOT_QUARANTINED = "not-quarantined"
    """The process named does not hold those pages quarantined (or there is none)."""


@dataclass(frozen=True, slots=True)
class SendReclaim:
    """Send RECLAIM(``reclaim_seq``, ``gpu``, ``handles``) to connection ``conn``."""

    conn: int
    reclaim_seq: int
    gpu: int
    handles: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SendRestore:
    """Send RESTORE(``restore_seq``, ``gpu``, ``handles``) to connection ``conn``."""

    conn: int
    restore_seq: int
    gpu: int
    handles: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReclaimCompleted:
    """Every target released its pages: report the plan's invalidated blocks and count it."""

    gpu: int
    plan: ReclaimPlan
    owners: Mapping[int, int]
    """Page handle → the connection that released it (and holds it quarantined)."""


@dataclass(frozen=True, slots=True)
class ReclaimAbandoned:
    """The reclamation ended without a release to count; nothing is invalidated."""

    gpu: int
    plan: ReclaimPlan
    reason: Abandon
    conn: int | None = None
    """The connection the reason names (gone, not disabled, refused)."""
    err: int = 0
    """RECLAIM_ACK's ``err`` (refused)."""

    def describe(self) -> str:
        """The reason in words, for the log."""
        if self.reason is Abandon.NO_OWNER:
            return "no offline process owns its handles"
        if self.reason is Abandon.NOT_DISABLED:
            return f"process {self.conn} did not disable"
        if self.reason is Abandon.GONE:
            return f"process {self.conn} went away"
        if self.reason is Abandon.REFUSED:
            return f"RECLAIM refused (err {self.err})"
        return "timed out"


@dataclass(frozen=True, slots=True)
class HoldEnded:
    """A reclamation on ``gpu`` that held enables back ended: send an enable the gate wants
    now (to processes none of whose GPUs is still :meth:`ReclaimSequence.holding`)."""

    gpu: int


@dataclass(frozen=True, slots=True)
class RestoreFinished:
    """A restore ended: tell the agent (ok: the pages are backed again; forget: the process
    holds no such quarantined page, retrying could never succeed)."""

    gpu: int
    handles: tuple[int, ...]
    ok: bool
    forget: bool
    reason: RestoreEnd
    err: int = 0
    """RESTORE_ACK's ``err`` (refused)."""


ReclaimCommand = (
    SendReclaim | SendRestore | ReclaimCompleted | ReclaimAbandoned | HoldEnded | RestoreFinished
)


def reclaim_targets(
    handles: Iterable[int],
    reporters: Mapping[int, tuple[int, str]],
    offline: Sequence[tuple[int, int, str]],
) -> dict[int, tuple[int, ...]]:
    """Which offline process is to release which page: connection → its pages, in order.

    ``reporters``: page → (pid, job) of the framework hook that reported it; ``offline``:
    (connection, pid, job) of the offline processes on the plan's GPU. A page goes to the
    offline processes with its hook's pid (the hook and the shim share the process), else
    to those of its job; a page no hook reported goes nowhere.
    """
    targets: dict[int, list[int]] = {}
    for h in handles:
        reporter = reporters.get(h)
        if reporter is None:
            continue
        pid, job = reporter
        chosen = [c for c, p, _ in offline if p == pid] or [c for c, _, j in offline if j == job]
        for conn in chosen:
            targets.setdefault(conn, []).append(h)
    return {conn: tuple(hs) for conn, hs in targets.items()}


@dataclass(slots=True)
class _Gate:
    """One offline process's gate, as sent and as acknowledged."""

    gpus: tuple[int, ...]
    open: bool
    sent_seq: int = 0
    """gate_seq of the last GATE sent (0: none yet)."""
    ack_seq: int = 0
    ack_enabled: bool = False
    ack_ok: bool = True


@dataclass(slots=True)
class _Reclaim:
    plan: ReclaimPlan
    targets: dict[int, tuple[int, ...]]
    deadline: float | None = None
    """Set when it starts (first in its GPU's queue)."""
    reclaim_seq: int = 0
    """0 until RECLAIM went out."""
    acks: dict[int, tuple[bool, int]] = field(default_factory=dict)
    """Target → (ok, err) of its RECLAIM_ACK, in arrival order."""


@dataclass(frozen=True, slots=True)
class _Restore:
    restore_seq: int
    gpu: int
    conn: int
    handles: tuple[int, ...]
    deadline: float


class ReclaimSequence:
    """See the module docstring."""

    def __init__(self, reclaim_timeout_s: float = 5.0, restore_timeout_s: float = 5.0) -> None:
        if not (reclaim_timeout_s > 0 and restore_timeout_s > 0):
            raise ValueError("timeouts must be positive")
        self.reclaim_timeout_s = reclaim_timeout_s
        self.restore_timeout_s = restore_timeout_s
        self.reclaims_done = 0
        self.reclaims_failed = 0
        self.restores_done = 0
        self.restores_failed = 0
        self._gates: dict[int, _Gate] = {}
        """Offline connection → its gate, in HELLO order."""
        self._queues: dict[int, list[_Reclaim]] = {}
        """GPU → reclamations accepted and not ended (the first one runs); no empty lists."""
        self._restores: dict[int, _Restore] = {}
        """restore_seq → a RESTORE waiting for its ack."""
        self._quarantine: dict[int, dict[int, int]] = {}
        """GPU → page → the connection holding it quarantined."""
        self._reclaim_seq = 0
        self._restore_seq = 0
        self._now = -math.inf

    # -- queries ----------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether a reclamation is under way on any GPU (one test on the gate's hot path)."""
        return bool(self._queues)

    def holding(self, gpu: int) -> bool:
        """Whether enables of ``gpu``'s offline processes are held back now."""
        return gpu in self._queues

    def reclaiming(self, gpu: int) -> set[int]:
        """The pages of the reclamations under way on ``gpu`` (not reclaimable again)."""
        return {h for r in self._queues.get(gpu, ()) for h in r.plan.handles}

    def pending_reclaims(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def pending_restores(self) -> int:
        return len(self._restores)

    def quarantined(self, gpu: int) -> dict[int, int]:
        """Page → the connection holding it quarantined on ``gpu`` (a copy)."""
        return dict(self._quarantine.get(gpu, {}))

    def next_deadline(self) -> float | None:
        """When :meth:`tick` may end something (None: nothing is under way)."""
        if not self._queues and not self._restores:
            return None
        times = [q[0].deadline for q in self._queues.values() if q[0].deadline is not None]
        times.extend(r.deadline for r in self._restores.values())
        return min(times) if times else None

    # -- offline processes and their gates --------------------------------------------------

    def offline_joined(self, conn: int, gpus: Iterable[int], gate_open: bool) -> None:
        """``conn``'s HELLO as an offline process on ``gpus`` (none: it is not, or no longer,
        one); its gate starts open or closed as the HELLO_ACK said."""
        self._gates.pop(conn, None)  # a second HELLO counts from its own place in the order
        gpus = tuple(gpus)
        if gpus:
            self._gates[conn] = _Gate(gpus, gate_open)

    def gate_sent(self, conn: int, gate_seq: int, enable: bool) -> None:
        """A GATE went to ``conn`` (no time needed: nothing can end on it)."""
        gate = self._gates.get(conn)
        if gate is not None:
            gate.open = enable
            gate.sent_seq = gate_seq

    def gate_acked(
        self, t: float, conn: int, gate_seq: int, enabled: bool, ok: bool
    ) -> list[ReclaimCommand]:
        """``conn``'s GATE_ACK: a reclamation waiting for it may go on."""
        gate = self._gates.get(conn)
        if gate is None:
            return []
        gate.ack_seq = gate_seq
        gate.ack_enabled = enabled
        gate.ack_ok = ok
        if not self._queues:
            return []
        t = self._advance(t)
        out: list[ReclaimCommand] = []
        for gpu in gate.gpus:
            self._step(t, gpu, out)
        return out

    def left(self, t: float, conn: int) -> list[ReclaimCommand]:
        """Connection ``conn`` went away (any role)."""
        t = self._advance(t)
        self._gates.pop(conn, None)
        for seq in [s for s, r in self._restores.items() if r.conn == conn]:
            del self._restores[seq]  # the agent drops its pages; no completion to report
        for pages in self._quarantine.values():
            for page in [h for h, c in pages.items() if c == conn]:
                del pages[page]
        out: list[ReclaimCommand] = []
        for gpu in list(self._queues):
            queue = self._queues.get(gpu)
            if not queue:
                continue
            head = queue[0]
            if conn in head.targets:
                self._end(t, gpu, out, Abandon.GONE, conn)
            elif not head.reclaim_seq:
                self._step(t, gpu, out)  # it may have been the one not yet acknowledged
        return out

    # -- reclamation ------------------------------------------------------------------------

    def reclaim(
        self, t: float, plan: ReclaimPlan, targets: Mapping[int, Sequence[int]]
    ) -> list[ReclaimCommand]:
        """Accept ``plan`` (compute was disabled); ``targets``: connection → its pages."""
        t = self._advance(t)
        chosen = {conn: tuple(hs) for conn, hs in targets.items() if hs}
        if not chosen:
            self.reclaims_failed += 1
            return [ReclaimAbandoned(plan.gpu, plan, Abandon.NO_OWNER)]
        queue = self._queues.setdefault(plan.gpu, [])
        queue.append(_Reclaim(plan, chosen))
        out: list[ReclaimCommand] = []
        if len(queue) == 1:
            self._start(t, plan.gpu, out)
        return out

    def reclaim_acked(
        self, t: float, conn: int, reclaim_seq: int, ok: bool, err: int = 0
    ) -> list[ReclaimCommand]:
        """``conn``'s RECLAIM_ACK (late, unknown or from a stranger: ignored)."""
        t = self._advance(t)
        gpu = next(
            (
                g
                for g, q in self._queues.items()
                if q[0].reclaim_seq and q[0].reclaim_seq == reclaim_seq
            ),
            None,
        )
        if gpu is None:
            return []
        head = self._queues[gpu][0]
        if conn not in head.targets:
            return []
        head.acks[conn] = (ok, err)
        out: list[ReclaimCommand] = []
        self._step(t, gpu, out)
        return out

    def _start(self, t: float, gpu: int, out: list[ReclaimCommand]) -> None:
        queue = self._queues.get(gpu)
        if not queue:
            return
        head = queue[0]
        if head.deadline is None:
            head.deadline = t + self.reclaim_timeout_s
        self._step(t, gpu, out)

    def _step(self, t: float, gpu: int, out: list[ReclaimCommand]) -> None:
        """Move the running reclamation on ``gpu`` on if what it waits for came."""
        queue = self._queues.get(gpu)
        if not queue:
            return
        head = queue[0]
        if not head.reclaim_seq:
            gone = next((c for c in head.targets if c not in self._gates), None)
            if gone is not None:  # first: a doomed plan neither waits nor releases a page
                self._end(t, gpu, out, Abandon.GONE, gone)
                return
            for conn, gate in self._gates.items():
                if gpu not in gate.gpus:
                    continue
                if gate.open or gate.ack_seq < gate.sent_seq:
                    return  # a disable not yet sent, or not yet acknowledged
                if gate.sent_seq and (gate.ack_enabled or not gate.ack_ok):
                    self._end(t, gpu, out, Abandon.NOT_DISABLED, conn)
                    return
            self._reclaim_seq += 1
            head.reclaim_seq = self._reclaim_seq
            for conn, handles in head.targets.items():
                out.append(SendReclaim(conn, head.reclaim_seq, gpu, handles))
            return
        if any(c not in head.acks for c in head.targets):
            return
        refused = next(((c, err) for c, (ok, err) in head.acks.items() if not ok), None)
        if refused is not None:
            self._end(t, gpu, out, Abandon.REFUSED, refused[0], refused[1])
        else:
            self._end(t, gpu, out, None)

    def _end(
        self,
        t: float,
        gpu: int,
        out: list[ReclaimCommand],
        reason: Abandon | None,
        conn: int | None = None,
        err: int = 0,
    ) -> None:
        """End the running reclamation on ``gpu`` (None: completed) and start the next."""
        queue = self._queues[gpu]
        head = queue.pop(0)
        if not queue:
            del self._queues[gpu]
        if reason is None:
            self.reclaims_done += 1
            owners: dict[int, int] = {}
            for c, handles in head.targets.items():
                for h in handles:
                    owners.setdefault(h, c)
            self._quarantine.setdefault(gpu, {}).update(owners)
            out.append(ReclaimCompleted(gpu, head.plan, owners))
        else:
            self.reclaims_failed += 1
            out.append(ReclaimAbandoned(gpu, head.plan, reason, conn, err))
        out.append(HoldEnded(gpu))
        self._start(t, gpu, out)

    # -- restore ----------------------------------------------------------------------------

    def adopt(self, gpu: int, conn: int, handles: Iterable[int]) -> None:
        """Pages ``conn`` holds quarantined on ``gpu`` that the agent takes back (pages known
        already keep their holder)."""
        pages = self._quarantine.setdefault(gpu, {})
        for h in handles:
            pages.setdefault(h, conn)

    def restore(
        self, t: float, gpu: int, conn: int | None, handles: tuple[int, ...]
    ) -> list[ReclaimCommand]:
        """The agent wants ``handles`` on ``gpu`` back from ``conn`` (None: no such process)."""
        t = self._advance(t)
        held = self._quarantine.get(gpu, {})
        if conn is None or any(held.get(h) != conn for h in handles):
            self.restores_failed += 1
            return [RestoreFinished(gpu, handles, False, True, RestoreEnd.NOT_QUARANTINED)]
        self._restore_seq += 1
        seq = self._restore_seq
        self._restores[seq] = _Restore(seq, gpu, conn, handles, t + self.restore_timeout_s)
        return [SendRestore(conn, seq, gpu, handles)]

    def restore_acked(
        self, t: float, conn: int, restore_seq: int, ok: bool, restored: int, err: int = 0
    ) -> list[ReclaimCommand]:
        """``conn``'s RESTORE_ACK (late, unknown or from a stranger: ignored)."""
        self._advance(t)
        pending = self._restores.get(restore_seq)
        if pending is None or pending.conn != conn:
            return []
        del self._restores[restore_seq]
        done = ok and restored >= len(pending.handles)
        forget = not ok and err == errno.ENOENT
        if done or forget:
            held = self._quarantine.get(pending.gpu, {})
            for h in pending.handles:
                if held.get(h) == conn:
                    del held[h]
        if done:
            self.restores_done += 1
            end = RestoreEnd.RESTORED
        else:
            self.restores_failed += 1
            end = RestoreEnd.REFUSED
        return [RestoreFinished(pending.gpu, pending.handles, done, forget, end, err)]

    # -- time -------------------------------------------------------------------------------

    def tick(self, t: float) -> list[ReclaimCommand]:
        """Time passed: what ran out of time ends (a reclamation's successor starts)."""
        t = self._advance(t)
        out: list[ReclaimCommand] = []
        for gpu in list(self._queues):
            queue = self._queues.get(gpu)
            if queue:
                deadline = queue[0].deadline
                if deadline is not None and deadline <= t:
                    self._end(t, gpu, out, Abandon.TIMED_OUT)
        for seq in [s for s, r in self._restores.items() if r.deadline <= t]:
            pending = self._restores.pop(seq)
            self.restores_failed += 1
            out.append(
                RestoreFinished(pending.gpu, pending.handles, False, False, RestoreEnd.TIMED_OUT)
            )
        return out

    def _advance(self, t: float) -> float:
        if math.isnan(t):
            raise ValueError("event time must be a number")
        self._now = max(self._now, t)
        return self._now
