"""Compute gate: exact transitions and the paper's guarantees as properties."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.runtime_agent.policy import ComputeGate, Disable, Enable, GateAction, GateConfig

CFG = GateConfig(cool_floor_s=0.01, cool_ceiling_s=1.0, request_timeout_s=None)


def _is_enabled(g: ComputeGate) -> bool:
    # A call, so that type checkers do not narrow the attribute across state changes.
    return g.enabled


def test_starts_closed_and_opens_after_one_floor_cooldown() -> None:
    g = ComputeGate(3, CFG, start=10.0)
    assert not g.enabled
    assert g.next_deadline() == pytest.approx(10.01)
    assert g.tick(10.009) == []
    assert g.tick(10.01) == [Enable(3, 10.01)]
    assert _is_enabled(g) and g.next_deadline() is None


def test_busy_disables_at_once_and_counts_one_preemption() -> None:
    g = ComputeGate(0, CFG)
    g.tick(1.0)
    assert g.online_busy(2.0) == [Disable(0, 2.0)]
    assert g.preemptions == 1
    # Already closed: another busy edge is no new preemption.
    assert g.online_busy(2.1) == []
    assert g.preemptions == 1
    assert g.online_idle(2.5) == []
    assert g.tick(2.5 + 0.0099) == []
    assert g.tick(2.51) == [Enable(0, 2.51)]
    assert g.drain_finished() == [1, 0]  # the first period was preempted, the second not


def test_cooldown_is_twice_the_largest_gap_within_floor_and_ceiling() -> None:
    g = ComputeGate(0, CFG)
    assert g.cooldown_s == 0.01
    g.decode_gap(0.04)
    assert g.cooldown_s == pytest.approx(0.08)
    g.decode_gap(0.02)  # smaller gaps do not lower G_max
    assert g.cooldown_s == pytest.approx(0.08)
    g.decode_gap(5.0)
    assert g.cooldown_s == 1.0  # ceiling


def test_gap_between_busy_periods_of_one_request_is_measured() -> None:
    g = ComputeGate(0, CFG)
    g.online_busy(1.0, "r1")
    g.online_idle(1.1)
    g.online_busy(1.13, "r1")
    assert g.g_max_s == pytest.approx(0.03)


def test_no_reenable_while_a_preempted_request_is_in_flight() -> None:
    g = ComputeGate(0, CFG)
    g.tick(1.0)
    assert g.online_busy(2.0, "r1") == [Disable(0, 2.0)]
    g.online_idle(2.1)
    # A gap far longer than the cooldown: still closed, r1 already had its preemption.
    assert g.tick(5.0) == []
    assert g.next_deadline() is None
    assert g.online_busy(5.0, "r1") == []
    assert g.online_idle(5.2, finished=["r1"]) == []
    # r1's 2.9 s pause was a decode gap: the cooldown is now at its 1 s ceiling.
    assert g.cooldown_s == 1.0
    assert g.tick(6.19) == []
    assert g.tick(6.2) == [Enable(0, 6.2)]
    assert g.max_preemptions_per_request == 1


def test_lost_request_is_forgotten_after_timeout() -> None:
    g = ComputeGate(0, GateConfig(cool_floor_s=0.01, request_timeout_s=10.0))
    g.tick(1.0)
    g.online_busy(2.0, "lost")
    g.online_idle(2.1)
    assert g.next_deadline() == pytest.approx(12.1)
    assert g.tick(12.0) == []
    assert g.tick(12.2) == [Enable(0, 12.2)]


def test_force_disable_is_not_a_preemption() -> None:
    g = ComputeGate(0, CFG)
    g.tick(1.0)
    assert g.force_disable(1.5) == [Disable(0, 1.5, preempted=False)]
    assert g.preemptions == 0
    assert g.tick(1.505) == []
    assert g.tick(1.51) == [Enable(0, 1.51)]


def test_enabled_and_busy_seconds() -> None:
    g = ComputeGate(0, CFG)
    g.tick(1.0)  # enabled from 1.0
    g.online_busy(3.0)
    g.online_idle(4.0)
    g.tick(4.01)
    assert g.enabled_seconds(5.0) == pytest.approx(2.0 + 0.99)
    assert g.busy_seconds(5.0) == pytest.approx(1.0)


def test_bad_config_and_times() -> None:
    with pytest.raises(ValueError):
        GateConfig(cool_floor_s=2, cool_ceiling_s=1)
    with pytest.raises(ValueError):
        ComputeGate(0, CFG).tick(float("nan"))


# -- properties ---------------------------------------------------------------------------


@dataclass
class Req:
    start: float
    bursts: list[tuple[float, float]]  # (idle gap before, busy duration)


requests = st.lists(
    st.builds(
        Req,
        start=st.floats(0, 20),
        bursts=st.lists(
            st.tuples(st.floats(0.0, 0.3), st.floats(0.0001, 0.2)), min_size=1, max_size=6
        ),
    ),
    min_size=1,
    max_size=12,
)


def _events(reqs: list[Req]) -> list[tuple[float, int, str, str]]:
    """(time, order, kind, request) for busy-start/busy-end/done of every request."""
    out: list[tuple[float, int, str, str]] = []
    for i, r in enumerate(reqs):
        t = r.start
        name = f"r{i}"
        for gap, dur in r.bursts:
            t += gap
            out.append((t, 1, "start", name))
            t += dur
            out.append((t, 0, "end", name))
        out.append((t, 0, "done", name))
    return sorted(out)


@settings(max_examples=150)
@given(reqs=requests, gaps=st.lists(st.floats(0.0, 0.2), max_size=4), named=st.booleans())
def test_property_one_preemption_per_request_and_never_enabled_while_busy(
    reqs: list[Req], gaps: list[float], named: bool
) -> None:
    gate = ComputeGate(0, CFG)
    for gap in gaps:
        gate.decode_gap(gap)
    busy: dict[str, int] = {}
    preempted_during: dict[str, int] = {}
    running: set[str] = set()

    def apply(actions: list[GateAction]) -> None:
        for a in actions:
            if isinstance(a, Enable):
                # Invariant: offline never enabled while any online work is busy.
                assert not any(busy.values())
            elif a.preempted:
                for r in running:
                    preempted_during[r] = preempted_during.get(r, 0) + 1

    for t, _, kind, name in _events(reqs):
        # Let time pass first, as the shell would by calling tick at the deadline.
        deadline = gate.next_deadline()
        if deadline is not None and deadline <= t:
            apply(gate.tick(deadline))
        if kind == "start":
            running.add(name)
            was_busy = any(busy.values())
            busy[name] = busy.get(name, 0) + 1
            if named:
                apply(gate.online_busy(t, name))
            elif not was_busy:
                apply(gate.online_busy(t))
            assert not gate.enabled
        elif kind == "end":
            busy[name] -= 1
            if not any(busy.values()):
                apply(gate.online_idle(t))
        else:
            running.discard(name)
            if named:
                apply(gate.request_done(t, name))
        assert not (gate.enabled and any(busy.values()))
    if named:
        assert all(n <= 1 for n in preempted_during.values()), preempted_during
        assert gate.max_preemptions_per_request <= 1
    # Every preemption closed an open gate: preemptions == Disable actions with preempted.
    assert gate.preemptions <= len(reqs) * 6
