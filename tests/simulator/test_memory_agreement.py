"""The simulator's Gleaner memory policy and the agent's NodeAgent: same inputs, same commands.

Both call ``memory_command`` (gleaner.runtime_agent.policy.memory_sequence); this pins that the
simulator charges the offline job exactly what the agent would: the same reclamations (count
and size), the same restores and deferred restores, at the same times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from gleaner.api.units import GIB
from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.policy import (
    HandleMap,
    KvSpan,
    MemoryCommand,
    MemoryConfig,
    ReclaimHandles,
    ReclaimPlan,
    RestoreDeferred,
    RestorePage,
)
from gleaner.runtime_agent.simulated import synthetic_inventory
from gleaner.simulator.latency import LLAMA31_8B_H100
from gleaner.simulator.offline import BLOCK_TOKENS, OfflineJobConfig, OfflineKV, memory_curve
from gleaner.simulator.policies import GleanerMemory, MemoryEnv, OnlineOnly

HB = 2 << 20
CAPACITY = 512  # handles: 1 GiB, so the agent's GPU size is exact
CONFIG = MemoryConfig(
    handle_bytes=HB, initial_handles=32, initial_interval_s=0.5, min_interval_s=0.05
)


@dataclass
class OfflineSink:
    """The agent's sink over an offline job holding ``initial`` handles; logs commands."""

    initial: int
    commands: list[MemoryCommand] = field(default_factory=list)
    live: list[int] = field(init=False)
    """Handle ids the job holds (never reused: the agent tells pages apart by them)."""

    def __post_init__(self) -> None:
        self.live = list(range(self.initial))
        self._next = self.initial

    @property
    def handles(self) -> int:
        return len(self.live)

    def set_gate(self, gpu: int, enable: bool, t: float) -> None:
        return None

    def reclaim(self, plan: ReclaimPlan, t: float) -> bool:
        gone = set(plan.handles)
        self.live = [h for h in self.live if h not in gone]
        self.commands.append(ReclaimHandles(plan.gpu, t, len(plan.handles)))
        return True

    def restore(self, gpu: int, owner: str, handles: tuple[int, ...], t: float) -> bool:
        self.live.append(self._next)  # the page comes back empty, under a fresh id
        self._next += 1
        self.commands.append(RestorePage(gpu, t))
        return True

    def table(self, gpu: int) -> HandleMap:
        return {h: (KvSpan(f"r{h}", (0,), 16),) for h in self.live}


def _simulated() -> GleanerMemory:
    model = LLAMA31_8B_H100
    curve = memory_curve(model, OfflineJobConfig(), model.weights_gib + 1.0)
    env = MemoryEnv(
        block_bytes=BLOCK_TOKENS * model.kv_bytes_per_token,
        pool_bytes=int(curve.weights_gib * GIB) + CAPACITY * HB,
        online_alone_blocks=CAPACITY,
        curve=curve,
        offline=model,
        recompute_s_per_token=1e-4,
    )
    kv = OfflineKV(
        handle_tokens=HB // model.kv_bytes_per_token,
        job=OfflineJobConfig(),
        rng=np.random.default_rng(0),
    )
    return GleanerMemory(env=env, config=CONFIG, kv=kv)


def _agent(sink: OfflineSink) -> NodeAgent:
    agent: NodeAgent

    def free(gpu: int) -> int:
        res = agent.memory[gpu]
        return (CAPACITY - max(res.headroom, res.used) - sink.handles) * HB

    agent = NodeAgent(
        node="n",
        inventory=synthetic_inventory("n", 1, CAPACITY * HB / GIB),
        start=0.0,
        memory_config=CONFIG,
        sink=sink,
        offline_handles=sink.table,
        free_bytes=free,
    )
    return agent


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_online_memory_gives_the_same_commands(seed: int) -> None:
    sim = _simulated()
    assert sim.kv.handles == CAPACITY - CONFIG.initial_handles
    sink = OfflineSink(initial=sim.kv.handles)
    agent = _agent(sink)
    rng = np.random.default_rng(seed)
    used = 0
    t = 0.0
    for _ in range(3000):
        t1 = t + float(rng.exponential(0.05))
        sim.advance(t, t1, 0.0)
        while (d := agent.memory_deadline()) is not None and d <= t1:
            agent.tick_memory(d)
        t = t1
        # A bursty walk of online KV use (blocks of one handle each), with spikes.
        used = int(np.clip(used + rng.integers(-12, 13) + 60 * (rng.random() < 0.01), 0, 400))
        sim.observe(t, used, OnlineOnly())
        agent.set_online_memory(t, 0, dynamic_bytes=used * HB)
        assert sim.kv.handles == sink.handles
    deferred = [c for c in sim.commands if isinstance(c, RestoreDeferred)]
    assert [c for c in sim.commands if not isinstance(c, RestoreDeferred)] == sink.commands
    assert len(deferred) == agent.restores[0].deferred
    assert sim.restores == agent.restores[0].events
    assert sum(sim.quarantine) == agent.quarantined_bytes(0)
    assert sim.reclamations > 5 and sim.restores > 5  # the walk exercised both paths


def test_a_release_with_nothing_quarantined_leaves_the_handle_free() -> None:
    sim = _simulated()
    before = sim.kv.handles
    sim.observe(0.0, 0, OnlineOnly())
    sim.advance(0.0, 5.0, 0.0)  # releases, nothing ever reclaimed
    assert sim.reservation.releases > 0
    assert sim.kv.handles == before
    assert sim.free_bytes() == sim.reservation.releases * HB
