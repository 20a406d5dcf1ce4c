"""The native gate loop (libgleaner_gate.so's gl_loop_*) driven through the shared-memory
segment: online edges written as an online shim writes them go in, the loop's decisions
(open_gen, open_seq) come out; its heartbeat, its death and its stop are visible in the
segment. No shim here: the offline shim's side is tests/runtime-agent/shim.

Waits poll for the expected state with generous timeouts; nothing asserts a duration.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gleaner.runtime_agent import fastgate as fg
from gleaner.runtime_agent.core import NodeAgent, replay_accounting
from gleaner.runtime_agent.gatelib import ACCT_REQUEST, GateLoop
from gleaner.runtime_agent.policy import Accounting, GateConfig
from gleaner.runtime_agent.simulated import synthetic_inventory

INVENTORY = synthetic_inventory("n", 4, 80)[::3]
"""GPUs 0 and 3."""
COOL_S = 0.02
"""The cooldown floor: short, so enables come quickly; it is a floor, not a timing assertion."""
LOOP_BEAT_S = 0.05
"""GL_FG_LOOP_BEAT_NS (gleaner_fastgate.h): an idle loop wakes this often by itself."""


def _wait(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.002)


@pytest.fixture
def seg(tmp_path: Path) -> Iterator[fg.GateSegment]:
    s = fg.GateSegment.create(fg.segment_path(tmp_path), [(0, "GPU-a"), (3, "GPU-b")])
    try:
        yield s
    finally:
        s.retire()


def _loop(seg: fg.GateSegment, **cfg: float) -> GateLoop:
    config = GateConfig(cool_floor_s=cfg.get("floor", COOL_S), request_timeout_s=None)
    return GateLoop(seg.address, config.native())


def _open(seg: fg.GateSegment, gpu: int) -> bool:
    return seg.open_gen(gpu) % 2 == 1


def test_the_loop_opens_after_the_cooldown_and_closes_on_a_busy_edge(
    seg: fg.GateSegment,
) -> None:
    loop = _loop(seg)
    try:
        assert seg.loop_state == fg.LOOP_RUNNING
        _wait(lambda: _open(seg, 0) and _open(seg, 3))  # idle since start: cooldown, then open
        seg.online_edge(3)
        _wait(lambda: not _open(seg, 3))
        assert _open(seg, 0), "an edge on GPU 3 closed GPU 0"
        assert seg.busy_seq(3) == 1
        seg.online_idle(3)
        _wait(lambda: _open(seg, 3))
        # The enable counts every busy edge the loop consumed: the offline shim may open.
        assert seg.open_seq(3) == seg.busy_seq(3) == 1
        st, view = loop.stats(1)
        assert st.edges == 2 and st.lost_edges == 0
        assert view.gpu == 3 and view.preemptions == 1 and view.enabled == 1
        assert view.enabled_s > 0 and view.busy_s >= 0
    finally:
        loop.close()
    assert seg.loop_state == fg.LOOP_STOPPED


def test_a_busy_edge_not_yet_consumed_keeps_open_seq_behind(seg: fg.GateSegment) -> None:
    """An edge bumped in the segment before its ring entry is consumed: open_seq != busy_seq
    at the loop's enable, so an offline shim would refuse it."""
    loop = _loop(seg)
    try:
        _wait(lambda: _open(seg, 0))
        seg.online_edge(0)  # bump, then the ring entry
        _wait(lambda: not _open(seg, 0))
        seg._view.slot[0].busy_seq += 1  # a second edge's bump; its entry is not written yet
        seg.online_idle(0)
        _wait(lambda: _open(seg, 0))
        assert seg.open_seq(0) == 1 != seg.busy_seq(0)
    finally:
        loop.close()


def test_at_most_one_preemption_per_request(seg: fg.GateSegment) -> None:
    """A named request preempted once holds the gate closed until it finishes, however many
    busy periods it has; its idle gaps raise the cooldown (2 x the largest gap)."""
    loop = _loop(seg)
    pid, req = 4242, 17
    try:
        _wait(lambda: _open(seg, 0))
        for _ in range(5):
            seg.online_edge(0, source=pid, request=req)
            seg.online_idle(0, source=pid)
            time.sleep(COOL_S * 3)  # longer than the floor: only the preemption holds the gate
        _wait(lambda: loop.stats(0)[0].edges == 10)
        assert not _open(seg, 0)
        seg.online_idle(0, source=pid, request=req)  # the request finished
        _wait(lambda: _open(seg, 0))
        _, view = loop.stats(0)
        assert view.preemptions == 1 and view.max_preemptions_per_request == 1
        assert view.g_max_s >= COOL_S * 2  # the gaps between its busy periods
        requests = [(g, v) for op, _, g, v in loop.drain_log() if op == ACCT_REQUEST]
        assert requests == [(0, 1.0)]
    finally:
        loop.close()


def test_a_second_source_keeps_the_gpu_busy(seg: fg.GateSegment) -> None:
    loop = _loop(seg)
    try:
        _wait(lambda: _open(seg, 0))
        seg.online_edge(0, source=1)
        seg.online_edge(0, source=2)
        seg.online_idle(0, source=1)
        _wait(lambda: loop.stats(0)[0].edges == 3)
        time.sleep(COOL_S * 5)
        assert not _open(seg, 0), "opened while another source was busy"
        seg.online_idle(0, source=2)
        _wait(lambda: _open(seg, 0))
        assert loop.stats(0)[1].preemptions == 1
    finally:
        loop.close()


def test_hold_and_force_disable_close_without_a_preemption(seg: fg.GateSegment) -> None:
    loop = _loop(seg)
    try:
        _wait(lambda: _open(seg, 3))
        loop.hold(1, True)
        assert not _open(seg, 3)
        time.sleep(COOL_S * 5)
        assert not _open(seg, 3), "opened while held"
        loop.hold(1, False)
        _wait(lambda: _open(seg, 3))
        loop.force_disable(1)
        assert not _open(seg, 3)
        _wait(lambda: _open(seg, 3))  # a cooldown later
        assert loop.stats(1)[1].preemptions == 0
    finally:
        loop.close()


def test_a_hold_that_changes_nothing_leaves_the_loop_asleep(seg: fg.GateSegment) -> None:
    """The agent repeats every GPU's hold at each process poll: those that change nothing
    must not wake the loop (a wakeup each, several a second, on an idle node)."""
    loop = _loop(seg)
    try:
        _wait(lambda: _open(seg, 3))
        loop.hold(1, True)  # a change: the loop is woken for it
        before, start = loop.stats(1)[0].wakeups, time.monotonic()
        repeats = 200
        for _ in range(repeats):
            loop.hold(1, True)
            time.sleep(0.001)
        woken = loop.stats(1)[0].wakeups - before
        beats = (time.monotonic() - start) / LOOP_BEAT_S
        # Its own beats (and the first hold's wakeup) only; a wakeup per hold would be ~200.
        assert woken <= beats + 20 < repeats, (woken, beats)
        assert not _open(seg, 3)
        loop.hold(1, False)
        _wait(lambda: _open(seg, 3))  # a change still wakes it: it opens a cooldown later
    finally:
        loop.close()


def test_the_loop_beats_and_a_killed_loop_stops_beating(seg: fg.GateSegment) -> None:
    loop = _loop(seg)
    try:
        first = seg.loop_beat_ns
        _wait(lambda: seg.loop_beat_ns > first)  # it beats with no edges at all
        loop.test_kill()
        _wait(lambda: not loop.alive)
        beat = seg.loop_beat_ns
        time.sleep(0.2)  # four beat intervals
        assert seg.loop_beat_ns == beat
        assert seg.loop_state == fg.LOOP_RUNNING  # died without a word: only the beat says so
    finally:
        loop.close()
    assert seg.loop_state == fg.LOOP_STOPPED


def test_an_entry_never_committed_is_lost_and_holds_every_gate(seg: fg.GateSegment) -> None:
    loop = _loop(seg)
    try:
        _wait(lambda: _open(seg, 0) and _open(seg, 3))
        seg._view.edge_head += 1  # a writer took a ticket and died before its commit
        _wait(lambda: loop.stats(0)[0].lost_edges == 1)
        assert not _open(seg, 0) and not _open(seg, 3)
        seg.online_edge(0)  # later entries are consumed again
        seg.online_idle(0)
        _wait(lambda: loop.stats(0)[0].edges == 2)
        _wait(lambda: _open(seg, 0) and _open(seg, 3))  # after the hold
    finally:
        loop.close()


def test_the_accounting_log_replayed_gives_the_gates_own_totals(seg: fg.GateSegment) -> None:
    """The agent replays the loop's log into its Accounting in batches: busy and enabled
    seconds and preemptions come out as the loop's gates counted them."""
    start = time.monotonic()
    loop = _loop(seg)
    acc = Accounting([0, 3], start=start)
    try:
        for i in range(20):
            seg.online_edge(0 if i % 2 else 3, source=7)
            time.sleep(0.003)
            seg.online_idle(0 if i % 2 else 3, source=7)
            time.sleep(0.03)
            if i % 5 == 4:  # a batch
                replay_accounting(acc, loop.drain_log())
        _wait(lambda: loop.stats(0)[0].edges == 40)
        loop.stop()
        replay_accounting(acc, loop.drain_log())
        t0 = time.monotonic()
        views = {gpu: loop.stats(k)[1] for k, gpu in enumerate((0, 3))}
        t1 = time.monotonic()
        tot = acc.snapshot(t1)
        for gpu, view in views.items():
            g = tot.gpus[gpu]
            assert abs(g.offline_enabled_s - view.enabled_s) <= t1 - t0 + 1e-9, gpu
            assert abs(g.online_busy_s - view.busy_s) <= t1 - t0 + 1e-9, gpu
            assert g.preemptions == view.preemptions > 0
            assert g.online_busy_s > 0 and g.offline_enabled_s > 0
    finally:
        loop.close()


# -- the loop against the agent's own rule -------------------------------------------------


_Push = Callable[[int, int, int, int, int, int], None]
"""(source, kind, slot mask, t_ns, request, gap_ns): one edge into the ring."""


def _shim_push(seg: fg.GateSegment) -> _Push:
    """An edge as an online shim writes it into the ring."""
    return lambda src, kind, mask, t_ns, req, gap: seg._push(kind, mask, t_ns, src, req, gap)


def _agent_push(loop: GateLoop) -> _Push:
    """An edge that came to the agent as a frame, put into the ring by the agent."""
    return loop.edge


def _reference_catch_up(agent: NodeAgent, t: float) -> None:
    """Every gate deadline up to ``t``, each at its own time (the loop's catch-up)."""
    for gpu in agent.gpus:
        while (d := agent.gate_deadline(gpu)) is not None and d <= t:
            agent.tick_gate(d, gpu)


@pytest.mark.parametrize("framed", [False, True], ids=["ring", "ring+frames"])
@pytest.mark.parametrize("seed", range(6))
def test_the_loop_decides_and_accounts_as_the_agents_own_gates(
    tmp_path: Path, seed: int, framed: bool
) -> None:
    """Random edges (three sources, named and anonymous requests, decode gaps, one or both
    GPUs) through the ring; the same edges into a NodeAgent (the agent's rule without the
    loop). Their accounting, the loop's replayed from its log, is the same. ``framed``:
    sources 2 and 3 are connections whose edges reach the agent as frames (a framework hook
    naming requests, a shim before its HELLO_ACK): the agent puts them into the ring
    (``GateLoop.edge``) among source 1's, which a shim writes itself."""
    rng = random.Random(seed)
    gpus = [(0, "GPU-a"), (3, "GPU-b")]
    seg = fg.GateSegment.create(fg.segment_path(tmp_path), gpus)
    timeout = None if seed % 2 else 0.02
    config = GateConfig(cool_floor_s=0.001, cool_ceiling_s=0.05, request_timeout_s=timeout)
    start_ns = time.monotonic_ns()
    loop = GateLoop(seg.address, config.native())
    try:
        start = loop.stats(0)[1].idle_since  # the gates' start (no edge yet)
        agent = NodeAgent(node="n", inventory=INVENTORY, start=start, gate_config=config)
        # Edge times from 1000 s ahead: the loop's own clock never reaches them, so every
        # deadline among them is met by catching up at the next edge, in both.
        t_ns = start_ns + 1_000_000_000_000
        pushed = 0
        for _ in range(300):
            t_ns += rng.randrange(0, 6_000_000)
            t = t_ns / 1e9
            which = rng.choice([[0], [3], [0, 3]])
            mask = sum(1 << k for k, (g, _) in enumerate(gpus) if g in which)
            pid = rng.randint(1, 3)
            request = rng.choice([0, 0, 1, 2, 3])
            kind = rng.random()
            _reference_catch_up(agent, t)
            name = f"{pid}/{request}" if request else None
            push = _agent_push(loop) if framed and pid > 1 else _shim_push(seg)
            if kind < 0.45:
                gap_ns = rng.choice([0, 0, rng.randrange(1, 20_000_000)])
                if gap_ns:
                    push(pid, fg.EDGE_GAP, mask, t_ns, 0, gap_ns)
                push(pid, fg.EDGE_BUSY, mask, t_ns, request, 0)
                for g in which:
                    if gap_ns:
                        agent.decode_gap(t, g, gap_ns / 1e9)
                    agent.online_busy(t, g, str(pid), name)
                pushed += 2 if gap_ns else 1
            else:
                push(pid, fg.EDGE_IDLE, mask, t_ns, request, 0)
                for g in which:
                    agent.online_idle(t, g, str(pid), (name,) if name else ())
                pushed += 1
        log: list[tuple[int, float, int, float]] = []
        _wait(lambda: loop.stats(0)[0].edges == pushed)
        loop.stop()
        log += loop.drain_log()
        assert loop.stats(0)[0].lost_edges == 0
    finally:
        loop.close()
        seg.retire()
    end = t_ns / 1e9
    acc = Accounting([0, 3], start=start)
    replay_accounting(acc, log)
    mine, ref = acc.snapshot(end), agent.accounting.snapshot(end)
    for gpu in (0, 3):
        a, b = mine.gpus[gpu], ref.gpus[gpu]
        assert a.preemptions == b.preemptions, gpu
        assert a.online_requests == b.online_requests, gpu
        assert a.request_preemptions == b.request_preemptions, gpu
        assert a.max_preemptions_per_request == b.max_preemptions_per_request <= 1, gpu
        assert a.online_busy_s == pytest.approx(b.online_busy_s, abs=1e-9), gpu
        assert a.offline_enabled_s == pytest.approx(b.offline_enabled_s, abs=1e-9), gpu
    assert mine.pairs[(0, 3)].overlap_s == pytest.approx(ref.pairs[(0, 3)].overlap_s, abs=1e-9)
    assert sum(mine.gpus[g].preemptions for g in (0, 3)) > 0  # the sequence exercised it


def test_an_edge_the_agent_puts_in_the_ring_gates_and_counts_as_a_shims(
    seg: fg.GateSegment,
) -> None:
    """``GateLoop.edge`` (a framed edge, put in the ring by the agent): the busy edge bumps
    busy_seq as a shim's does (the offline side closes on it, and the loop's enable matches
    it: open_seq == busy_seq), and the loop counts it. A connection's busy edge that came as
    a frame (before its HELLO_ACK) and its idle edge that its shim wrote itself into the
    ring later are one busy period of one source."""
    loop = _loop(seg)
    try:
        _wait(lambda: _open(seg, 0))
        loop.edge(5, fg.EDGE_BUSY, 0b01, time.monotonic_ns(), 9)  # a hook's request 9
        assert seg.busy_seq(0) == 1 and seg.busy_seq(3) == 0
        _wait(lambda: not _open(seg, 0))
        time.sleep(0.02)
        loop.edge(5, fg.EDGE_IDLE, 0b01, time.monotonic_ns(), 9)  # it finished
        _wait(lambda: _open(seg, 0))
        assert seg.open_seq(0) == seg.busy_seq(0) == 1
        # Source 6: busy as a frame (no ring yet), idle from its shim's own ring entry.
        loop.edge(6, fg.EDGE_BUSY, 0b01, time.monotonic_ns())
        _wait(lambda: not _open(seg, 0))
        time.sleep(0.02)
        seg.online_idle(0, source=6)
        _wait(lambda: _open(seg, 0))
        assert seg.open_seq(0) == seg.busy_seq(0) == 2
        st, view = loop.stats(0)
        assert st.edges == 4 and st.lost_edges == 0
        assert view.preemptions == 2 and view.busy_s >= 0.04
        log = loop.drain_log()
        assert [(g, v) for op, _, g, v in log if op == ACCT_REQUEST] == [(0, 1.0), (0, 1.0)]
        with pytest.raises(ValueError):
            loop.edge(5, 7, 0b01, time.monotonic_ns())  # not an edge
        with pytest.raises(ValueError):
            loop.edge(5, fg.EDGE_BUSY, 0b100, time.monotonic_ns())  # no such slot
        assert seg.busy_seq(0) == 2
    finally:
        loop.close()


def test_a_source_that_goes_away_ends_its_busy_period(seg: fg.GateSegment) -> None:
    """An online process that disconnects while busy sends no idle edge: the agent drops
    its source, and the GPU opens after the cooldown (other sources still count)."""
    loop = _loop(seg)
    try:
        _wait(lambda: _open(seg, 0))
        seg.online_edge(0, source=11)
        seg.online_edge(0, source=12)
        _wait(lambda: loop.stats(0)[0].edges == 2)
        loop.drop_source(11)
        time.sleep(COOL_S * 5)
        assert not _open(seg, 0), "opened while source 12 was busy"
        loop.drop_source(12)
        _wait(lambda: _open(seg, 0))
        assert loop.stats(0)[1].busy == 0
    finally:
        loop.close()


def _lose_busy_entry(seg: fg.GateSegment, gpu: int, source: int) -> None:
    """An online shim's busy edge whose ring entry is lost: its busy word set, busy_seq
    bumped, a ticket taken and never committed (a writer that died mid-entry)."""
    seg.set_busy_word(source, gpu)
    v = seg._view
    k = next(k for k in range(v.nslots) if v.slot[k].index == gpu)
    v.slot[k].busy_seq += 1
    v.edge_head += 1


HOLD_S = 1.0
"""``GL_LOOP_LOST_HOLD_S``: every gate is held this long after a lost entry."""


def test_a_lost_busy_entry_keeps_its_gpu_closed_until_the_idle_edge(seg: fg.GateSegment) -> None:
    """The ring lost the busy edge; the connection's busy word did not: once the lost-entry
    hold ends, the other GPU reopens, the busy one stays closed (and its enable is never
    published) until the connection's idle edge."""
    loop = _loop(seg)
    try:
        _wait(lambda: _open(seg, 0) and _open(seg, 3))
        _lose_busy_entry(seg, 0, source=21)
        _wait(lambda: loop.stats(0)[0].lost_edges == 1)
        _wait(lambda: _open(seg, 3))  # the hold ended: GPU 3 was never busy
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:  # well past the cooldown after the hold
            assert not _open(seg, 0) and seg.open_at_ns(0) == 0, "opened while online was busy"
            time.sleep(0.01)
        stats, view = loop.stats(0)
        assert view.busy == 1 and stats.busy_from_words == 1
        seg.set_busy_word(21, 0, busy=False)  # the shim: the word first, then the entry
        seg.online_idle(0, source=21)
        _wait(lambda: _open(seg, 0))
    finally:
        loop.close()


def test_a_source_that_dies_busy_holds_its_gpu_until_the_agent_drops_it(
    seg: fg.GateSegment,
) -> None:
    """A process that died busy leaves its busy word set (and here its entry lost too): the
    GPU stays closed until the agent drops the connection, which frees the word."""
    loop = _loop(seg)
    try:
        _wait(lambda: _open(seg, 0))
        _lose_busy_entry(seg, 0, source=31)
        _wait(lambda: loop.stats(0)[0].lost_edges == 1)
        _wait(lambda: loop.stats(0)[0].busy_from_words == 1)
        time.sleep(HOLD_S + COOL_S * 5)
        assert not _open(seg, 0)
        assert seg.busy_word(31) == 1
        loop.drop_source(31)
        assert seg.busy_word(31) is None
        _wait(lambda: _open(seg, 0))
    finally:
        loop.close()
