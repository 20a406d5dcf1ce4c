"""Reclaim sequence: exact transitions, and its guarantees as properties over interleavings."""

from __future__ import annotations

import errno
from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gleaner.runtime_agent.policy import (
    Abandon,
    HoldEnded,
    ReclaimAbandoned,
    ReclaimCommand,
    ReclaimCompleted,
    ReclaimPlan,
    ReclaimSequence,
    RestoreEnd,
    RestoreFinished,
    SendReclaim,
    SendRestore,
    reclaim_targets,
)

TIMEOUT = 5.0


def _plan(gpu: int, *handles: int) -> ReclaimPlan:
    return ReclaimPlan(
        gpu=gpu,
        handles=handles,
        handle_bytes=1,
        invalidated={},
        tokens_to_recompute=0,
        steps=(),
    )


def _disabled(seq: ReclaimSequence, conn: int, gate_seq: int, t: float) -> list[ReclaimCommand]:
    """``conn`` was sent a disable and acknowledged it."""
    seq.gate_sent(conn, gate_seq, False)
    return seq.gate_acked(t, conn, gate_seq, False, True)


# -- exact transitions --------------------------------------------------------------------


def test_reclaim_waits_for_the_disable_ack_then_completes_on_every_ok_ack() -> None:
    seq = ReclaimSequence(TIMEOUT, TIMEOUT)
    seq.offline_joined(1, (0,), gate_open=True)
    seq.offline_joined(2, (0, 1), gate_open=True)
    plan = _plan(0, 10, 11, 12)
    assert seq.reclaim(1.0, plan, {1: (10, 11), 2: (12,)}) == []
    assert seq.holding(0) and not seq.holding(1) and seq.reclaiming(0) == {10, 11, 12}
    assert seq.next_deadline() == 1.0 + TIMEOUT
    seq.gate_sent(1, 7, False)
    seq.gate_sent(2, 8, False)
    assert seq.gate_acked(1.1, 1, 7, False, True) == []  # process 2 has not acknowledged yet
    assert seq.gate_acked(1.2, 2, 8, False, True) == [
        SendReclaim(1, 1, 0, (10, 11)),
        SendReclaim(2, 1, 0, (12,)),
    ]
    assert seq.reclaim_acked(1.3, 1, 1, ok=True) == []
    assert seq.reclaim_acked(1.3, 3, 1, ok=True) == []  # a stranger's ack counts for nothing
    assert seq.reclaim_acked(1.3, 2, 99, ok=True) == []  # another reclamation's
    assert seq.reclaim_acked(1.4, 2, 1, ok=True) == [
        ReclaimCompleted(0, plan, {10: 1, 11: 1, 12: 2}),
        HoldEnded(0),
    ]
    assert not seq.holding(0) and seq.next_deadline() is None
    assert (seq.reclaims_done, seq.reclaims_failed) == (1, 0)
    assert seq.quarantined(0) == {10: 1, 11: 1, 12: 2}


def test_a_process_never_sent_a_gate_counts_when_its_gate_started_closed() -> None:
    seq = ReclaimSequence()
    seq.offline_joined(1, (0,), gate_open=False)
    assert seq.reclaim(0.0, _plan(0, 5), {1: (5,)}) == [SendReclaim(1, 1, 0, (5,))]


@pytest.mark.parametrize(("enabled", "ok"), [(True, True), (False, False)])
def test_an_ack_that_did_not_disable_abandons(enabled: bool, ok: bool) -> None:
    seq = ReclaimSequence()
    seq.offline_joined(1, (0,), gate_open=True)
    plan = _plan(0, 5)
    seq.reclaim(0.0, plan, {1: (5,)})
    seq.gate_sent(1, 3, False)
    assert seq.gate_acked(0.1, 1, 3, enabled, ok) == [
        ReclaimAbandoned(0, plan, Abandon.NOT_DISABLED, 1),
        HoldEnded(0),
    ]
    assert seq.reclaims_failed == 1 and not seq.holding(0)


def test_a_refused_ack_abandons_and_the_next_plan_of_the_gpu_starts() -> None:
    seq = ReclaimSequence()
    seq.offline_joined(1, (0,), gate_open=False)
    first, second = _plan(0, 5), _plan(0, 6)
    assert seq.reclaim(0.0, first, {1: (5,)}) == [SendReclaim(1, 1, 0, (5,))]
    assert seq.reclaim(0.5, second, {1: (6,)}) == []  # one at a time per GPU
    assert seq.reclaiming(0) == {5, 6}
    got = seq.reclaim_acked(1.0, 1, 1, ok=False, err=38)
    assert got == [
        ReclaimAbandoned(0, first, Abandon.REFUSED, 1, 38),
        HoldEnded(0),
        SendReclaim(1, 2, 0, (6,)),
    ]
    assert isinstance(got[0], ReclaimAbandoned)
    assert got[0].describe() == "RECLAIM refused (err 38)"
    assert seq.holding(0) and seq.next_deadline() == 1.0 + 5.0  # its own timeout, from now


def test_no_ack_in_time_abandons() -> None:
    seq = ReclaimSequence(reclaim_timeout_s=0.3)
    seq.offline_joined(1, (0,), gate_open=False)
    plan = _plan(0, 5)
    seq.reclaim(2.0, plan, {1: (5,)})
    assert seq.tick(2.29) == []
    assert seq.tick(2.3) == [ReclaimAbandoned(0, plan, Abandon.TIMED_OUT), HoldEnded(0)]
    assert seq.reclaim_acked(2.4, 1, 1, ok=True) == []  # late: ignored
    assert seq.reclaims_done == 0 and seq.quarantined(0) == {}


def test_a_target_that_leaves_abandons_and_a_bystander_that_leaves_lets_it_go_on() -> None:
    seq = ReclaimSequence()
    seq.offline_joined(1, (0,), gate_open=False)
    seq.offline_joined(2, (0,), gate_open=True)  # a bystander whose disable is not acked
    plan = _plan(0, 5)
    assert seq.reclaim(0.0, plan, {1: (5,)}) == []
    assert seq.left(0.1, 2) == [SendReclaim(1, 1, 0, (5,))]
    assert seq.left(0.2, 1) == [ReclaimAbandoned(0, plan, Abandon.GONE, 1), HoldEnded(0)]


def test_a_plan_whose_target_left_while_queued_sends_no_reclaim_at_all() -> None:
    seq = ReclaimSequence()
    seq.offline_joined(1, (0,), gate_open=False)
    seq.offline_joined(2, (0,), gate_open=False)
    first, second = _plan(0, 5), _plan(0, 6, 7)
    seq.reclaim(0.0, first, {1: (5,)})
    seq.reclaim(0.0, second, {1: (6,), 2: (7,)})
    assert seq.left(0.1, 2) == []  # not the running one's target
    assert seq.reclaim_acked(0.2, 1, 1, ok=True) == [
        ReclaimCompleted(0, first, {5: 1}),
        HoldEnded(0),
        ReclaimAbandoned(0, second, Abandon.GONE, 2),
        HoldEnded(0),
    ]


def test_a_plan_nobody_owns_is_refused_at_once_without_a_hold() -> None:
    seq = ReclaimSequence()
    plan = _plan(1, 5)
    assert seq.reclaim(0.0, plan, {}) == [ReclaimAbandoned(1, plan, Abandon.NO_OWNER)]
    assert seq.reclaim(0.0, plan, {3: ()}) == [ReclaimAbandoned(1, plan, Abandon.NO_OWNER)]
    assert not seq.holding(1) and seq.reclaims_failed == 2


def _reclaimed(seq: ReclaimSequence, conn: int = 1, pages: tuple[int, ...] = (5, 6)) -> None:
    seq.offline_joined(conn, (0,), gate_open=False)
    seq.reclaim(0.0, _plan(0, *pages), {conn: pages})
    seq.reclaim_acked(0.0, conn, seq.reclaims_done + seq.reclaims_failed + 1, ok=True)
    assert seq.quarantined(0) == dict.fromkeys(pages, conn)


def test_restore_goes_only_to_the_process_holding_the_page() -> None:
    seq = ReclaimSequence(restore_timeout_s=1.0)
    _reclaimed(seq)
    refused = RestoreFinished(0, (5,), False, True, RestoreEnd.NOT_QUARANTINED)
    assert seq.restore(1.0, 0, 2, (5,)) == [refused]  # another process
    assert seq.restore(1.0, 0, None, (5,)) == [refused]  # no process
    assert seq.restore(1.0, 0, 1, (9,)) == [
        RestoreFinished(0, (9,), False, True, RestoreEnd.NOT_QUARANTINED)
    ]  # never reclaimed
    assert seq.restore(1.0, 0, 1, (5,)) == [SendRestore(1, 1, 0, (5,))]
    assert seq.next_deadline() == 2.0
    assert seq.restore_acked(1.1, 2, 1, ok=True, restored=1) == []  # not its restore
    assert seq.restore_acked(1.2, 1, 1, ok=True, restored=1) == [
        RestoreFinished(0, (5,), True, False, RestoreEnd.RESTORED)
    ]
    assert seq.quarantined(0) == {6: 1}
    assert seq.restore(1.3, 0, 1, (5,))[0] == RestoreFinished(
        0, (5,), False, True, RestoreEnd.NOT_QUARANTINED
    )  # given back already
    assert (seq.restores_done, seq.restores_failed) == (1, 4)


def test_restore_failures_keep_the_page_except_enoent() -> None:
    seq = ReclaimSequence(restore_timeout_s=1.0)
    _reclaimed(seq)
    assert seq.restore(1.0, 0, 1, (5,)) == [SendRestore(1, 1, 0, (5,))]
    assert seq.restore_acked(1.1, 1, 1, ok=False, restored=0, err=errno.ENOMEM) == [
        RestoreFinished(0, (5,), False, False, RestoreEnd.REFUSED, errno.ENOMEM)
    ]
    assert seq.restore(1.2, 0, 1, (5,)) == [SendRestore(1, 2, 0, (5,))]
    assert seq.tick(2.19) == []
    assert seq.tick(2.2) == [RestoreFinished(0, (5,), False, False, RestoreEnd.TIMED_OUT)]
    assert seq.restore_acked(2.3, 1, 2, ok=True, restored=1) == []  # late: ignored
    assert seq.quarantined(0) == {5: 1, 6: 1}
    seq.restore(2.4, 0, 1, (5,))
    assert seq.restore_acked(2.5, 1, 3, ok=False, restored=0, err=errno.ENOENT) == [
        RestoreFinished(0, (5,), False, True, RestoreEnd.REFUSED, errno.ENOENT)
    ]
    assert seq.quarantined(0) == {6: 1}
    seq.restore(2.6, 0, 1, (6,))
    assert seq.restore_acked(2.7, 1, 4, ok=True, restored=0) == [
        RestoreFinished(0, (6,), False, False, RestoreEnd.REFUSED)
    ]  # ok, but not every page came back


def test_a_process_that_leaves_takes_its_pages_and_restores_silently() -> None:
    seq = ReclaimSequence()
    _reclaimed(seq)
    assert seq.restore(1.0, 0, 1, (5,)) == [SendRestore(1, 1, 0, (5,))]
    assert seq.left(1.1, 1) == []
    assert seq.pending_restores() == 0 and seq.quarantined(0) == {}
    assert seq.next_deadline() is None
    assert seq.restore_acked(1.2, 1, 1, ok=True, restored=1) == []


def test_adopted_pages_can_be_restored_and_known_pages_keep_their_holder() -> None:
    seq = ReclaimSequence()
    _reclaimed(seq, conn=1, pages=(5,))
    seq.offline_joined(2, (0,), gate_open=False)
    seq.adopt(0, 2, (5, 8))
    assert seq.quarantined(0) == {5: 1, 8: 2}
    assert seq.restore(1.0, 0, 2, (8,)) == [SendRestore(2, 1, 0, (8,))]


def test_targets_prefer_the_hooks_pid_then_its_job() -> None:
    offline = [(1, 100, "a/j"), (2, 200, "a/j"), (3, 300, "b/k")]
    reporters = {10: (100, "a/j"), 11: (999, "a/j"), 12: (999, "c/x")}
    assert reclaim_targets((10, 11, 12, 13), reporters, offline) == {1: (10, 11), 2: (11,)}
    assert reclaim_targets((12,), reporters, offline) == {}


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        ReclaimSequence(reclaim_timeout_s=0)
    with pytest.raises(ValueError, match="number"):
        ReclaimSequence().tick(float("nan"))


# -- properties over interleavings --------------------------------------------------------

CONNS = (1, 2, 3)
GPUS = (0, 1)
PAGES = (0, 1, 2)
# Small domains, so that ops meet: acks find their RECLAIM, restores their page.
RECLAIM_S, RESTORE_S = 1.0, 0.5


@dataclass(frozen=True)
class Join:
    conn: int
    gpus: tuple[int, ...]
    gate_open: bool


@dataclass(frozen=True)
class Leave:
    conn: int


@dataclass(frozen=True)
class Gate:
    conn: int
    enable: bool


@dataclass(frozen=True)
class GateAck:
    conn: int
    how: str
    """``true`` (what was sent), ``enabled`` (says enabled whatever was sent), ``failed``."""


@dataclass(frozen=True)
class Reclaim:
    gpu: int
    pages: tuple[int, ...]
    conns: tuple[int, ...]


@dataclass(frozen=True)
class ReclaimAck:
    conn: int
    which: str
    """``last`` or ``old`` RECLAIM sent to it, or a ``bogus`` seq."""
    ok: bool


@dataclass(frozen=True)
class Restore:
    gpu: int
    conn: int | None
    page: int


@dataclass(frozen=True)
class RestoreAck:
    conn: int
    how: str
    """``ok``, ``partial`` (ok but nothing restored), ``enomem``, ``enoent``, ``bogus`` seq."""


@dataclass(frozen=True)
class Adopt:
    gpu: int
    conn: int
    page: int


@dataclass(frozen=True)
class Wait:
    seconds: float


Op = Join | Leave | Gate | GateAck | Reclaim | ReclaimAck | Restore | RestoreAck | Adopt | Wait

_conn = st.sampled_from(CONNS)
_target = st.sampled_from(CONNS[:2])
_gpu = st.sampled_from(GPUS)
_page = st.sampled_from(PAGES)
_join = st.builds(Join, _conn, st.sampled_from([(0,), (1,), (0, 1)]), st.booleans())
_gate = st.builds(Gate, _conn, st.booleans())
_gate_ack = st.builds(GateAck, _conn, st.sampled_from(["true", "true", "enabled", "failed"]))
_reclaim = st.builds(
    Reclaim,
    _gpu,
    st.lists(_page, min_size=1, max_size=3, unique=True).map(tuple),
    st.lists(_target, max_size=2, unique=True).map(tuple),
)
_reclaim_ack = st.builds(
    ReclaimAck,
    _target,
    st.sampled_from(["last", "last", "last", "old", "bogus"]),
    st.sampled_from([True, True, True, False]),
)
_restore = st.builds(Restore, _gpu, st.sampled_from((None, *CONNS)), _page)
_restore_ack = st.builds(
    RestoreAck, _conn, st.sampled_from(["ok", "partial", "enomem", "enoent", "bogus"])
)
# Repeats weigh the draw toward the ops that move a sequence on (acks, gates).
_OPS: st.SearchStrategy[Op] = st.one_of(
    _join,
    st.builds(Leave, _conn),
    *[_gate, _gate_ack] * 3,
    *[_reclaim, _restore, _restore_ack] * 2,
    *[_reclaim_ack] * 5,
    st.builds(Adopt, _gpu, _conn, _page),
    st.builds(Wait, st.sampled_from([0.0, 0.1, 0.3, 0.6, 1.2])),
)


@dataclass
class _GateModel:
    gpus: tuple[int, ...]
    open: bool
    sent: int = 0
    acked: int = 0
    ack_enabled: bool = False
    ack_ok: bool = True

    def disabled(self) -> bool:
        """Acknowledged a disable (the last GATE sent), or never opened."""
        if self.open:
            return False
        return self.sent == 0 or (self.acked >= self.sent and not self.ack_enabled and self.ack_ok)


@dataclass
class _Pending:
    plan: ReclaimPlan
    targets: dict[int, tuple[int, ...]]
    started: float | None = None
    seq: int = 0
    acks: dict[int, bool] = field(default_factory=dict)


@dataclass
class _World:
    """What the shell knows, kept by the test apart from the machine, and the checks."""

    seq: ReclaimSequence
    now: float = 0.0
    gate_seq: int = 0
    joined: dict[int, _GateModel] = field(default_factory=dict)
    queues: dict[int, list[_Pending]] = field(default_factory=dict)
    accepted: int = 0
    ended: list[ReclaimPlan] = field(default_factory=list)
    """Plans that ended (kept alive: identity tells them apart)."""
    sent_to: dict[int, list[int]] = field(default_factory=dict)
    """Connection → the reclaim_seqs it was sent."""
    quarantine: dict[int, dict[int, int]] = field(default_factory=dict)
    """GPU → page → the connection holding it (from completions and adoptions)."""
    restores: dict[int, tuple[int, int, tuple[int, ...], float]] = field(default_factory=dict)
    """restore_seq → (conn, gpu, pages, sent at)."""
    asked: tuple[int, tuple[int, ...], int | None] | None = None
    """The restore just asked for (gpu, pages, conn): answered at once, or by a RESTORE."""
    acking: tuple[int, str] | None = None
    """The RESTORE_ACK being fed (restore_seq, how)."""

    def check(self, commands: list[ReclaimCommand]) -> None:
        for cmd in commands:
            if isinstance(cmd, SendReclaim):
                self._sent_reclaim(cmd)
            elif isinstance(cmd, ReclaimCompleted):
                head = self._end(cmd.gpu, cmd.plan)
                # A completion only after every target acknowledged ok that very RECLAIM.
                assert head.seq and all(head.acks.get(c) is True for c in head.targets)
                for h, c in cmd.owners.items():
                    assert h in head.targets[c]
                    self.quarantine.setdefault(cmd.gpu, {})[h] = c
                assert set(cmd.owners) == {h for hs in head.targets.values() for h in hs}
            elif isinstance(cmd, ReclaimAbandoned):
                self._abandoned(cmd)
            elif isinstance(cmd, SendRestore):
                # Guarantee 3: only pages a completion (or adoption) left with that process.
                held = self.quarantine.get(cmd.gpu, {})
                assert all(held.get(h) == cmd.conn for h in cmd.handles)
                assert self.asked == (cmd.gpu, cmd.handles, cmd.conn)
                self.asked = None
                self.restores[cmd.restore_seq] = (cmd.conn, cmd.gpu, cmd.handles, self.now)
            elif isinstance(cmd, RestoreFinished):
                self._restore_finished(cmd)
            else:
                assert isinstance(cmd, HoldEnded)
        self.invariants()

    def _sent_reclaim(self, cmd: SendReclaim) -> None:
        head = self.queues[cmd.gpu][0]
        # Guarantee 1: RECLAIM only once every offline process on the GPU is off.
        assert all(g.disabled() for g in self.joined.values() if cmd.gpu in g.gpus)
        assert cmd.conn in self.joined and head.targets[cmd.conn] == cmd.handles
        assert head.seq in (0, cmd.reclaim_seq)
        head.seq = cmd.reclaim_seq
        self.sent_to.setdefault(cmd.conn, []).append(cmd.reclaim_seq)

    def _abandoned(self, cmd: ReclaimAbandoned) -> None:
        if cmd.reason is Abandon.NO_OWNER:
            assert not self.seq.holding(cmd.gpu) or self.queues.get(cmd.gpu)
            self.accepted += 1
            self.ended.append(cmd.plan)
            return
        head = self._end(cmd.gpu, cmd.plan)
        if cmd.reason is Abandon.TIMED_OUT:
            assert head.started is not None and self.now >= head.started + RECLAIM_S
        elif cmd.reason is Abandon.REFUSED:
            assert cmd.conn is not None and head.acks.get(cmd.conn) is False
        elif cmd.reason is Abandon.GONE:
            assert cmd.conn in head.targets and cmd.conn not in self.joined
        else:
            assert cmd.reason is Abandon.NOT_DISABLED and cmd.conn is not None
            gate = self.joined[cmd.conn]
            assert gate.acked >= gate.sent > 0 and (gate.ack_enabled or not gate.ack_ok)

    def _end(self, gpu: int, plan: ReclaimPlan) -> _Pending:
        # Guarantee 2: each accepted reclamation ends once, the running one of its GPU.
        queue = self.queues[gpu]
        head = queue.pop(0)
        assert head.plan is plan and not any(p is plan for p in self.ended)
        self.ended.append(plan)
        if queue:
            queue[0].started = self.now
        else:
            del self.queues[gpu]
        return head

    def _restore_finished(self, cmd: RestoreFinished) -> None:
        if cmd.reason is RestoreEnd.NOT_QUARANTINED:
            assert self.asked is not None and self.asked[:2] == (cmd.gpu, cmd.handles)
            held = self.quarantine.get(cmd.gpu, {})
            conn = self.asked[2]  # refused rightly: no process, or not its page
            assert conn is None or any(held.get(h) != conn for h in cmd.handles)
            assert not cmd.ok and cmd.forget
            self.asked = None
            return
        if cmd.reason is RestoreEnd.TIMED_OUT:
            due = [
                s
                for s, (_, g, hs, at) in self.restores.items()
                if (g, hs) == (cmd.gpu, cmd.handles) and self.now >= at + RESTORE_S
            ]
            assert due and not cmd.ok and not cmd.forget
            del self.restores[due[0]]
            return
        assert self.acking is not None
        restore_seq, how = self.acking
        _, gpu, handles, _ = self.restores.pop(restore_seq)
        assert (gpu, handles) == (cmd.gpu, cmd.handles)
        assert cmd.ok == (how == "ok") and cmd.forget == (how == "enoent")
        if cmd.ok or cmd.forget:
            for h in cmd.handles:
                self.quarantine.get(cmd.gpu, {}).pop(h, None)

    def invariants(self) -> None:
        seq = self.seq
        for gpu in GPUS:
            assert seq.holding(gpu) == bool(self.queues.get(gpu))
            assert seq.quarantined(gpu) == self.quarantine.get(gpu, {})
        assert seq.pending_reclaims() == sum(len(q) for q in self.queues.values())
        assert seq.pending_restores() == len(self.restores)
        assert seq.reclaims_done + seq.reclaims_failed == len(self.ended)
        # Guarantee 4: whatever is under way is due within one timeout.
        deadline = seq.next_deadline()
        if self.queues or self.restores:
            assert deadline is not None and deadline <= self.now + max(RECLAIM_S, RESTORE_S)
        else:
            assert deadline is None

    def run(self, op: Op) -> None:
        seq = self.seq
        if isinstance(op, Join):
            self.joined.pop(op.conn, None)
            self.joined[op.conn] = _GateModel(op.gpus, op.gate_open)
            seq.offline_joined(op.conn, op.gpus, op.gate_open)
        elif isinstance(op, Leave):
            self.joined.pop(op.conn, None)
            for pages in self.quarantine.values():
                for h in [h for h, c in pages.items() if c == op.conn]:
                    del pages[h]
            for s in [s for s, r in self.restores.items() if r[0] == op.conn]:
                del self.restores[s]  # they end silently
            self.check(seq.left(self.now, op.conn))
            # A reclamation it was to release pages for ended with it (gone), not later.
            assert all(op.conn not in q[0].targets for q in self.queues.values())
        elif isinstance(op, Gate):
            gate = self.joined.get(op.conn)
            if gate is None or gate.open == op.enable:
                return
            if op.enable and any(seq.holding(g) for g in gate.gpus):
                return  # the shell holds enables back while memory is taken
            self.gate_seq += 1
            gate.open, gate.sent = op.enable, self.gate_seq
            seq.gate_sent(op.conn, self.gate_seq, op.enable)
            self.invariants()
        elif isinstance(op, GateAck):
            gate = self.joined.get(op.conn)
            if gate is None or not gate.sent:
                return
            enabled = True if op.how == "enabled" else gate.open
            ok = op.how != "failed"
            gate.acked, gate.ack_enabled, gate.ack_ok = gate.sent, enabled, ok
            self.check(seq.gate_acked(self.now, op.conn, gate.sent, enabled, ok))
        elif isinstance(op, Reclaim):
            conns = op.conns
            split = {c: op.pages[i :: len(conns)] for i, c in enumerate(conns)}
            targets = {c: hs for c, hs in split.items() if hs}
            plan = _plan(op.gpu, *op.pages)
            if targets:
                self.accepted += 1
                queue = self.queues.setdefault(op.gpu, [])
                queue.append(_Pending(plan, targets, None if queue else self.now))
            self.check(seq.reclaim(self.now, plan, targets))
        elif isinstance(op, ReclaimAck):
            sent = self.sent_to.get(op.conn, [])
            pick = {"last": sent[-1:], "old": sent[:1]}.get(op.which, [])
            rseq = pick[0] if pick else 999_999
            for queue in self.queues.values():
                head = queue[0]
                if head.seq == rseq and op.conn in head.targets:
                    head.acks[op.conn] = op.ok
            self.check(seq.reclaim_acked(self.now, op.conn, rseq, op.ok, 0 if op.ok else 38))
        elif isinstance(op, Restore):
            self.asked = (op.gpu, (op.page,), op.conn)
            self.check(seq.restore(self.now, op.gpu, op.conn, (op.page,)))
            assert self.asked is None  # answered: a RESTORE, or a failure at once
        elif isinstance(op, RestoreAck):
            mine = [s for s, r in self.restores.items() if r[0] == op.conn]
            rseq = mine[-1] if mine and op.how != "bogus" else 999_999
            self.acking = (rseq, op.how)
            err = {"enomem": errno.ENOMEM, "enoent": errno.ENOENT}.get(op.how, 0)
            restored = 1 if op.how == "ok" else 0
            ok = op.how in ("ok", "partial")
            self.check(seq.restore_acked(self.now, op.conn, rseq, ok, restored, err))
            self.acking = None
        elif isinstance(op, Adopt):
            if op.conn not in self.joined:
                return  # the shell adopts only under a connected offline process
            self.quarantine.setdefault(op.gpu, {}).setdefault(op.page, op.conn)
            seq.adopt(op.gpu, op.conn, (op.page,))
            self.invariants()
        else:
            self.now += op.seconds
            self.check(seq.tick(self.now))


_START = (Join(1, (0,), False), Join(2, (0, 1), False), Join(3, (1,), False))
"""Every run starts with offline processes on both GPUs, one on both (then ops reshape it)."""


@settings(max_examples=300)
@given(st.lists(_OPS, min_size=20, max_size=100))
# Three restores pending with three deadlines: the final ticks must reach the last one.
@example(
    [Join(1, (0,), False), *[Leave(1)] * 10, Join(1, (0,), False), Adopt(0, 3, 0),
     Restore(0, 3, 0), Wait(0.1), Join(1, (0,), False), Join(1, (0,), False),
     Restore(0, 3, 0), Wait(0.1), Restore(0, 3, 0)]
)  # fmt: skip
def test_any_interleaving_keeps_the_guarantees_and_ends_everything(ops: list[Op]) -> None:
    world = _World(ReclaimSequence(RECLAIM_S, RESTORE_S))
    for op in (*_START, *ops):
        world.run(op)
    # Nothing pends forever: ticking at each next deadline ends everything under way. Each
    # tick ends at least the reclaim or restore whose deadline it is, so one tick per pending
    # reclaim and restore (each restore has its own deadline) is enough.
    for _ in range(world.seq.pending_reclaims() + world.seq.pending_restores() + 2):
        deadline = world.seq.next_deadline()
        if deadline is None:
            break
        world.now = max(world.now, deadline)
        world.check(world.seq.tick(world.now))
    assert world.seq.next_deadline() is None
    assert world.queues == {} and world.restores == {}
    assert len(world.ended) == world.accepted
