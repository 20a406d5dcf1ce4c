"""Memory given back to offline work (RESTORE): the NodeAgent's policy, the simulated sink."""

from __future__ import annotations

from dataclasses import dataclass, field

from gleaner.runtime_agent.core import NodeAgent, QuarantinedPage
from gleaner.runtime_agent.policy import GateConfig, KvSpan, MemoryConfig, ReclaimPlan
from gleaner.runtime_agent.simulated import (
    SimulatedNode,
    TraceOnline,
    TraceSample,
    synthetic_inventory,
)

MIB2 = 2 << 20
GATE = GateConfig(cool_floor_s=0.01, cool_ceiling_s=0.01, request_timeout_s=None)
MEMORY = MemoryConfig(
    initial_handles=4, initial_interval_s=1.0, min_interval_s=1.0, max_interval_s=1.0
)


@dataclass
class Sink:
    """Records reclamations and restores; ``done_now`` says whether a restore ends at once."""

    done_now: bool = True
    restores: list[tuple[int, str, tuple[int, ...]]] = field(default_factory=list)
    plans: list[ReclaimPlan] = field(default_factory=list)

    def set_gate(self, gpu: int, enable: bool, t: float) -> None:
        return None

    def reclaim(self, plan: ReclaimPlan, t: float) -> bool:
        self.plans.append(plan)
        return False  # the test completes it, naming owners

    def restore(self, gpu: int, owner: str, handles: tuple[int, ...], t: float) -> bool:
        self.restores.append((gpu, owner, handles))
        return self.done_now


def _agent(sink: Sink, free: dict[int, int | None] | None = None) -> NodeAgent:
    table = {h: [KvSpan(f"r{h}", (h,), 10 * (h + 1))] for h in range(8)}
    return NodeAgent(
        node="n",
        inventory=synthetic_inventory("n", 2, 80),
        start=0.0,
        gate_config=GATE,
        memory_config=MEMORY,
        sink=sink,
        offline_handles=lambda gpu: table,
        free_bytes=None if free is None else free.get,
    )


def _reclaim(agent: NodeAgent, sink: Sink, t: float, owners: dict[int, str]) -> ReclaimPlan:
    """A pressure event on GPU 0 (4 of 4 handles used), completed by the 'shims'."""
    agent.set_online_memory(t, 0, dynamic_bytes=4 * MIB2)
    plan = sink.plans[-1]
    agent.reclaim_completed(t, plan, {h: owners.get(h, "") for h in plan.handles})
    agent.set_online_memory(t, 0, dynamic_bytes=0)  # online's use falls: releases follow
    return plan


def _releases_until(agent: NodeAgent, t: float, until: float) -> float:
    while t < until:
        t += 0.25
        agent.tick(t)
    return t


def test_a_release_restores_the_oldest_quarantined_page_to_its_owner() -> None:
    sink = Sink()
    agent = _agent(sink)
    plan = _reclaim(agent, sink, 1.0, {0: "conn-1", 1: "conn-2", 2: "conn-1", 3: "conn-1"})
    assert plan.handles == (0, 1, 2, 3)
    assert [p.handle for p in agent.quarantine[0]] == [0, 1, 2, 3]
    assert agent.quarantined_bytes(0) == 4 * MIB2 and agent.quarantined_bytes(1) == 0
    headroom = agent.memory[0].headroom
    t = _releases_until(agent, 1.0, 2.1)  # one release interval: one Release, one restore
    assert agent.memory[0].headroom == headroom - 1
    assert sink.restores == [(0, "conn-1", (0,))]
    assert [p.handle for p in agent.quarantine[0]] == [1, 2, 3]
    t = _releases_until(agent, t, 3.1)
    assert sink.restores[-1] == (0, "conn-2", (1,))  # oldest first, to the page's holder
    tot = agent.restores[0]
    assert (tot.events, tot.restored_bytes, tot.failures) == (2, 2 * MIB2, 0)
    _releases_until(agent, t, 10.0)
    assert agent.quarantine[0] == [] and agent.restores[0].events == 4
    assert len(sink.restores) == 4  # nothing left: later Releases restore nothing
    assert agent.restores[1].events == 0


def test_free_memory_must_cover_the_page_when_it_is_known() -> None:
    sink = Sink()
    free: dict[int, int | None] = {0: 0}
    agent = _agent(sink, free)
    _reclaim(agent, sink, 1.0, {})
    assert len(agent.quarantine[0]) == 4
    t = _releases_until(agent, 1.0, 4.1)
    assert sink.restores == [] and agent.restores[0].deferred >= 2
    free[0] = MIB2 - 1  # still a byte short
    t = _releases_until(agent, t, 5.1)
    assert sink.restores == []
    free[0] = MIB2
    t = _releases_until(agent, t, 6.1)
    assert [h for _, _, h in sink.restores] == [(0,)]
    free[0] = None  # unknown (e.g. a failed NVML query): restore, the owner may refuse
    _releases_until(agent, t, 7.1)
    assert [h for _, _, h in sink.restores] == [(0,), (1,)]


def test_a_failed_restore_keeps_the_page_and_retries_it_at_a_later_release() -> None:
    sink = Sink(done_now=False)
    agent = _agent(sink)
    _reclaim(agent, sink, 1.0, {h: "conn-1" for h in range(4)})
    t = _releases_until(agent, 1.0, 2.1)
    assert sink.restores == [(0, "conn-1", (0,))]
    t = _releases_until(agent, t, 3.1)
    assert len(sink.restores) == 1  # one restore at a time per GPU: the first is under way
    agent.restore_completed(t, 0, (0,), ok=False)  # e.g. CUDA out of memory
    assert [p.handle for p in agent.quarantine[0]] == [0, 1, 2, 3]
    assert agent.restores[0].failures == 1 and agent.restores[0].events == 0
    t = _releases_until(agent, t, 4.1)
    assert sink.restores[-1] == (0, "conn-1", (0,))  # the same, oldest page again
    agent.restore_completed(t, 0, (0,), ok=True)
    assert [p.handle for p in agent.quarantine[0]] == [1, 2, 3]
    t = _releases_until(agent, t, 5.1)
    assert sink.restores[-1] == (0, "conn-1", (1,))
    # The owner holds no such quarantined page (ENOENT): retrying could never work.
    agent.restore_completed(t, 0, (1,), ok=False, forget=True)
    assert [p.handle for p in agent.quarantine[0]] == [2, 3]
    assert agent.restores[0].events == 1 and agent.restores[0].failures == 2


def test_an_owner_that_goes_away_drops_its_pages_only() -> None:
    sink = Sink(done_now=False)
    agent = _agent(sink)
    _reclaim(agent, sink, 1.0, {0: "conn-1", 1: "conn-2", 2: "conn-1", 3: "conn-2"})
    t = _releases_until(agent, 1.0, 2.1)
    assert sink.restores == [(0, "conn-1", (0,))]
    assert agent.drop_quarantine("conn-1") == 2
    assert [(p.handle, p.owner) for p in agent.quarantine[0]] == [(1, "conn-2"), (3, "conn-2")]
    agent.restore_completed(t, 0, (0,), ok=True)  # a late completion counts nothing
    assert agent.restores[0].events == 0
    _releases_until(agent, t, 3.1)  # the GPU is free for the next restore at once
    assert sink.restores[-1] == (0, "conn-2", (1,))


def test_restores_leave_the_harvestable_memory_to_the_reservation() -> None:
    sink = Sink()
    agent = _agent(sink)
    total = agent.memory_model[0].total_bytes

    def expected() -> int:
        m = agent.memory_model[0]
        return total - m.online_base_bytes - max(agent.memory[0].headroom_bytes, 0)

    assert agent.harvestable_bytes(0) == expected()
    _reclaim(agent, sink, 1.0, {})
    grown = agent.harvestable_bytes(0)
    assert grown == expected() == total - 8 * MIB2  # the headroom grew to 8 handles
    t, seen = 1.0, []
    for _ in range(4):  # one Release, one restore each
        t = _releases_until(agent, t, t + 1.0)
        assert agent.harvestable_bytes(0) == expected()  # a restore changes nothing here
        seen.append(agent.harvestable_bytes(0))
    assert agent.quarantine[0] == []
    assert seen == sorted(seen) and seen[-1] == grown + 4 * MIB2
    assert agent.restores[0].restored_bytes == 4 * MIB2


def test_reclaim_without_owners_quarantines_under_no_name() -> None:
    sink = Sink()
    agent = _agent(sink)
    agent.set_online_memory(1.0, 0, dynamic_bytes=4 * MIB2)
    agent.reclaim_completed(1.0, sink.plans[-1])
    assert agent.quarantine[0][0] == QuarantinedPage(0, "", MIB2, 1.0)


def test_the_simulated_backend_gives_reclaimed_handles_back() -> None:
    inv = synthetic_inventory("sim", 1, 80)
    idle = TraceOnline({0: [TraceSample(0.0, 0.0, 40.0, 5.0)]})  # never busy, no KV growth
    sim = SimulatedNode("sim", inv, online=idle, gate_config=GATE, memory_config=MEMORY)
    sim.set_offline_jobs(0.0, {0: "ns/job"})
    sim.advance(0.5)
    sim.agent.set_online_memory(0.5, 0, dynamic_bytes=4 * MIB2)  # pressure: 4 → 8 handles
    model = sim.offline[0]
    assert model.reclaimed_bytes == 4 * MIB2 and len(model.lost_handles) == 4
    assert sim.agent.quarantined_bytes(0) == 4 * MIB2
    sim.advance(30.0)  # the trace sets online KV use back to 0: releases follow
    assert sim.agent.quarantined_bytes(0) == 0
    assert model.restored_bytes == 4 * MIB2 and model.lost_handles == set()
    assert sim.agent.restores[0].restored_bytes == 4 * MIB2
    # A job that leaves takes its quarantined pages with it.
    sim.agent.set_online_memory(31.0, 0, dynamic_bytes=sim.agent.memory[0].headroom_bytes)
    assert sim.agent.quarantine[0]
    sim.set_offline_jobs(31.0, {})
    assert sim.agent.quarantine[0] == []


def test_adopted_pages_join_after_the_known_ones_and_are_never_doubled() -> None:
    sink = Sink(done_now=False)
    agent = _agent(sink)
    _reclaim(agent, sink, 1.0, {h: "conn-1" for h in range(4)})
    assert [p.handle for p in agent.quarantine[0]] == [0, 1, 2, 3]
    _releases_until(agent, 1.0, 2.1)  # page 0 is being restored (no completion yet)
    assert sink.restores == [(0, "conn-1", (0,))]
    # The hook says pages 0..3 and 9 are quarantined: only 9 is new to the agent.
    assert agent.adopt_quarantine(3.0, 0, "conn-7", {h: MIB2 for h in (9, 3, 0, 2, 1)}) == 1
    assert [(p.handle, p.owner) for p in agent.quarantine[0]] == [
        (0, "conn-1"),
        (1, "conn-1"),
        (2, "conn-1"),
        (3, "conn-1"),
        (9, "conn-7"),
    ]
    assert agent.quarantined_bytes(0) == 5 * MIB2
    assert agent.adopt_quarantine(3.0, 0, "conn-7", {9: MIB2}) == 0
    assert agent.adopt_quarantine(3.0, 1, "conn-7", {9: 4 * MIB2}) == 1  # per GPU
    assert agent.quarantined_bytes(1) == 4 * MIB2
