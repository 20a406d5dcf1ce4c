"""NodeAgent's deferred accounting: the totals do not depend on when they are read."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.runtime_agent.core import ACCOUNTING_BATCH, NodeAgent
from gleaner.runtime_agent.policy import GateConfig
from gleaner.runtime_agent.simulated import synthetic_inventory

INVENTORY = synthetic_inventory("node-c", 2, 80)
CONFIG = GateConfig(cool_floor_s=0.01, cool_ceiling_s=0.05, request_timeout_s=None)


def _agent() -> NodeAgent:
    agent = NodeAgent(node="node-c", inventory=INVENTORY, start=0.0, gate_config=CONFIG)
    agent.set_offline_jobs(0.0, {0: "ns/a", 1: "ns/b"})
    return agent


def _drive(agent: NodeAgent, events: list[tuple[float, str, int]], read_each: bool) -> None:
    t = 0.0
    for dt, kind, gpu in events:
        t += dt
        if kind == "busy":
            agent.online_busy(t, gpu, f"src-{gpu}")
        elif kind == "named":
            agent.online_busy(t, gpu, f"src-{gpu}", f"src-{gpu}/r")
        elif kind == "idle":
            agent.online_idle(t, gpu, f"src-{gpu}")
        elif kind == "done":
            agent.online_idle(t, gpu, f"src-{gpu}", (f"src-{gpu}/r",))
        else:
            agent.tick(t)
        if read_each:
            agent.accounting.totals  # noqa: B018 - a read applies what was deferred


@settings(max_examples=80)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 0.05),
            st.sampled_from(["busy", "named", "idle", "done", "tick"]),
            st.integers(0, 1),
        ),
        max_size=80,
    )
)
def test_property_deferred_accounting_equals_accounting_read_after_every_event(
    events: list[tuple[float, str, int]],
) -> None:
    eager, lazy = _agent(), _agent()
    _drive(eager, events, read_each=True)
    _drive(lazy, events, read_each=False)
    end = sum(e[0] for e in events) + 1.0
    a, b = eager.accounting.snapshot(end), lazy.accounting.snapshot(end)
    for g in (0, 1):
        ga, gb = a.gpus[g], b.gpus[g]
        assert gb.online_busy_s == pytest.approx(ga.online_busy_s, abs=1e-9)
        assert gb.offline_enabled_s == pytest.approx(ga.offline_enabled_s, abs=1e-9)
        assert (gb.preemptions, gb.online_requests) == (ga.preemptions, ga.online_requests)
        assert gb.request_preemptions == ga.request_preemptions
        # The policies and the accounting agree (the gate counts its own preemptions).
        assert gb.preemptions == lazy.gates[g].preemptions
    assert b.job_timeslice_s == pytest.approx(a.job_timeslice_s, abs=1e-9)
    assert b.pairs[(0, 1)].overlap_s == pytest.approx(a.pairs[(0, 1)].overlap_s, abs=1e-9)


def test_deferred_accounting_stays_bounded_without_readers() -> None:
    agent = _agent()
    t = 0.0
    for _ in range(5 * ACCOUNTING_BATCH):
        t += 0.001
        agent.online_busy(t, 0, "src")
        t += 0.001
        agent.online_idle(t, 0, "src")
        t += 0.02
        agent.tick_gate(t, 0)
        assert len(agent._deferred) < ACCOUNTING_BATCH + 8
    tot = agent.accounting.totals.gpus[0]
    assert not agent._deferred
    assert tot.preemptions == agent.gates[0].preemptions == 5 * ACCOUNTING_BATCH - 1
    assert tot.online_busy_s == pytest.approx(5 * ACCOUNTING_BATCH * 0.001)
