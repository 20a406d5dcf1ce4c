"""The uninstrumented-process guard (gleaner.runtime_agent.policy.instrumented) and the gate
hold it drives (ComputeGate.hold, NodeAgent.hold)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.api import GpuInfo, GpuTrace, NodeTraceStatus, UninstrumentedGuard
from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.policy import (
    ComputeGate,
    Disable,
    Enable,
    GateConfig,
    GpuProcess,
    Instrumentation,
    InstrumentationConfig,
    Uninstrumented,
)
from gleaner.runtime_agent.reporting import with_uninstrumented

GPUS = (0, 1)
SILENCE = 1.0


def _agent() -> tuple[NodeAgent, list[tuple[int, bool, float]]]:
    sent: list[tuple[int, bool, float]] = []

    class Recording:
        def set_gate(self, gpu: int, enable: bool, t: float) -> None:
            sent.append((gpu, enable, t))

        def reclaim(self, plan: object, t: float) -> bool:
            return True

        def restore(self, gpu: int, owner: str, handles: tuple[int, ...], t: float) -> bool:
            return True

    inventory = [GpuInfo(index=g, uuid=f"GPU-{g}", memory_gi_b=80) for g in GPUS]
    agent = NodeAgent(
        "n", inventory, start=0.0, gate_config=GateConfig(0.01, 0.01), sink=Recording()
    )
    return agent, sent


# -- the gate hold ------------------------------------------------------------------------


def test_a_held_gate_closes_without_a_preemption_and_reopens_a_cooldown_after_release() -> None:
    g = ComputeGate(0, GateConfig(0.1, 0.1))
    assert g.tick(0.2) == [Enable(0, 0.2)]
    assert g.hold(1.0, True) == [Disable(0, 1.0, preempted=False)]
    assert g.preemptions == 0
    assert g.tick(5.0) == [] and g.next_deadline() is None
    assert g.online_busy(5.1) == [] and g.online_idle(5.2) == []
    assert g.hold(6.0, False) == []
    assert g.next_deadline() == pytest.approx(6.1)
    assert g.tick(6.05) == []
    assert g.tick(6.1) == [Enable(0, 6.1)]


# -- the policy ---------------------------------------------------------------------------


def test_a_process_no_shim_accounts_for_holds_its_gpu_and_only_that_gpu() -> None:
    ins = Instrumentation(GPUS, InstrumentationConfig(silence_s=SILENCE))
    ins.connected(0.0, "c1", 100, "online", [0])
    ins.connected(0.0, "c2", 200, "offline", [0, 1])
    ins.set_processes(0.0, 0, [GpuProcess(100), GpuProcess(200), GpuProcess(300, "ns/web")])
    ins.set_processes(0.0, 1, [GpuProcess(200)])
    assert ins.uninstrumented(0, 0.5) == (Uninstrumented(300, "unknown", "ns/web"),)
    assert ins.held(0, 0.5) and not ins.held(1, 0.5)
    ins.set_processes(0.6, 0, [GpuProcess(100), GpuProcess(200)])  # it ended
    ins.heard(0.6, "c1")
    assert not ins.held(0, 0.7)


def test_a_framework_hook_alone_does_not_account_for_its_pid() -> None:
    ins = Instrumentation(GPUS)
    ins.connected(0.0, "h", 100, "framework", [0])
    ins.set_processes(0.0, 0, [GpuProcess(100)])
    assert ins.uninstrumented(0, 0.0) == (Uninstrumented(100, "unknown"),)


def test_a_silent_online_shim_holds_until_it_is_heard_again() -> None:
    ins = Instrumentation(GPUS, InstrumentationConfig(silence_s=SILENCE))
    ins.connected(0.0, "c1", 100, "online", [1])
    assert not ins.held(1, 0.99)
    assert ins.next_deadline(0.5) == 1.0
    assert ins.held(1, 1.0)
    assert ins.uninstrumented(1, 1.5) == (Uninstrumented(100, "silent"),)
    assert ins.next_deadline(1.5) is None
    ins.heard(1.6, "c1")
    assert not ins.held(1, 1.6)


def test_a_disconnected_online_shim_holds_until_it_reconnects_or_its_process_ends() -> None:
    ins = Instrumentation(GPUS, InstrumentationConfig(silence_s=None))
    ins.connected(0.0, "c1", 100, "online", [0])
    ins.disconnected(1.0, "c1")
    assert ins.uninstrumented(0, 1.0) == (Uninstrumented(100, "disconnected"),)
    ins.set_processes(1.1, 0, None)  # the driver cannot tell: still held
    assert ins.held(0, 1.1)
    ins.connected(2.0, "c2", 100, "online", [0])
    assert not ins.held(0, 2.0)
    ins.disconnected(3.0, "c2")
    ins.set_processes(3.1, 0, [GpuProcess(100, "ns/web")])  # still running, unheard
    assert ins.uninstrumented(0, 3.1) == (Uninstrumented(100, "disconnected", "ns/web"),)
    ins.set_processes(3.2, 0, [])  # ended
    assert not ins.held(0, 3.2)
    ins.set_processes(3.3, 0, [GpuProcess(100)])  # a pid reused later is an unknown process
    assert ins.uninstrumented(0, 3.3) == (Uninstrumented(100, "unknown"),)


def test_opting_out_reports_but_never_holds() -> None:
    ins = Instrumentation(GPUS, InstrumentationConfig(enforce=False))
    ins.set_processes(0.0, 0, [GpuProcess(7)])
    assert ins.uninstrumented(0, 0.0) == (Uninstrumented(7, "unknown"),)
    assert not ins.held(0, 0.0)


def test_node_agent_hold_closes_and_releases_the_gate() -> None:
    agent, sent = _agent()
    agent.tick(0.02)
    assert (0, True, 0.02) in sent
    agent.hold(1.0, 0, True)
    assert sent[-1] == (0, False, 1.0)
    agent.tick(5.0)
    assert sent[-1] == (0, False, 1.0)
    agent.hold(5.0, 0, False)
    agent.tick(5.02)
    assert sent[-1] == (0, True, 5.02)
    assert [s for s in sent if s[0] == 1] == [(1, True, 0.02)]  # GPU 1 untouched
    assert agent.accounting.totals.gpus[0].preemptions == 0


# -- the property -------------------------------------------------------------------------

PIDS = (100, 101, 102, 103)
KEYS = ("a", "b", "c")

connects = st.tuples(
    st.just("connect"),
    st.sampled_from(KEYS),
    st.sampled_from(PIDS),
    st.sampled_from(("online", "offline", "framework")),
    st.sets(st.sampled_from(GPUS), min_size=1).map(sorted),
)
events = st.one_of(
    connects,
    st.tuples(st.just("frame"), st.sampled_from(KEYS)),
    st.tuples(st.just("disconnect"), st.sampled_from(KEYS)),
    st.tuples(
        st.just("processes"),
        st.sampled_from(GPUS),
        st.none() | st.sets(st.sampled_from(PIDS)).map(sorted),
    ),
    st.tuples(st.just("busy"), st.sampled_from(GPUS), st.sampled_from(KEYS)),
    st.tuples(st.just("idle"), st.sampled_from(GPUS), st.sampled_from(KEYS)),
    st.tuples(st.just("wait"), st.floats(0.0, 1.5)),
)


@dataclass
class Oracle:
    """What is on each GPU and who is connected, kept the simplest way."""

    shims: dict[str, tuple[int, str, list[int], float]] = field(default_factory=dict)
    listed: dict[int, list[int] | None] = field(default_factory=lambda: dict.fromkeys(GPUS))
    lost: dict[int, set[int]] = field(default_factory=lambda: {g: set() for g in GPUS})

    def live(self, t: float) -> set[int]:
        return {
            pid
            for pid, role, _, heard in self.shims.values()
            if role == "offline" or (role == "online" and t - heard < SILENCE)
        }

    def unaccounted(self, gpu: int, t: float) -> bool:
        live = self.live(t)
        listed = self.listed[gpu] or []
        if any(pid not in live for pid in listed):
            return True
        if any(pid not in live for pid in self.lost[gpu]):
            return True
        return any(
            role == "online" and gpu in gpus and pid not in live
            for pid, role, gpus, _ in self.shims.values()
        )


@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=60))
def test_the_gate_never_opens_while_an_uninstrumented_process_is_on_its_gpu(
    script: list[tuple[object, ...]],
) -> None:
    agent, sent = _agent()
    ins = Instrumentation(GPUS, InstrumentationConfig(silence_s=SILENCE))
    oracle = Oracle()
    t = 0.0

    def settle() -> None:
        # The shell: after every event, and at every deadline, holds follow the policy.
        for g in GPUS:
            agent.hold(t, g, ins.held(g, t))
        agent.tick(t)

    for event in script:
        kind = event[0]
        n_before = len(sent)
        if kind == "connect":
            _, key, pid, role, gpus = event
            assert isinstance(key, str) and isinstance(pid, int) and isinstance(role, str)
            assert isinstance(gpus, list)
            ins.disconnected(t, key)  # a key reused is a new connection
            if key in oracle.shims:
                old_pid, old_role, old_gpus, _ = oracle.shims.pop(key)
                if old_role == "online" and old_pid not in oracle.live(t):
                    for g in old_gpus:
                        oracle.lost[g].add(old_pid)
            ins.connected(t, key, pid, role, gpus)  # type: ignore[arg-type]
            oracle.shims[key] = (pid, role, gpus, t)
            if role in ("online", "offline"):
                for lost in oracle.lost.values():
                    lost.discard(pid)
        elif kind == "frame":
            key = str(event[1])
            ins.heard(t, key)
            if key in oracle.shims:
                pid, role, gpus, _ = oracle.shims[key]
                oracle.shims[key] = (pid, role, gpus, t)
        elif kind == "disconnect":
            key = str(event[1])
            ins.disconnected(t, key)
            if key in oracle.shims:
                pid, role, gpus, _ = oracle.shims.pop(key)
                if role == "online" and pid not in oracle.live(t):
                    for g in gpus:
                        oracle.lost[g].add(pid)
        elif kind == "processes":
            _, gpu, pids = event
            assert isinstance(gpu, int)
            listed = None if pids is None else list(pids)  # type: ignore[call-overload]
            ins.set_processes(t, gpu, None if listed is None else [GpuProcess(p) for p in listed])
            oracle.listed[gpu] = listed
            if listed is not None:
                oracle.lost[gpu] &= set(listed)
        elif kind == "busy":
            _, gpu, key = event
            agent.online_busy(t, int(str(gpu)), str(key))
        elif kind == "idle":
            _, gpu, key = event
            agent.online_idle(t, int(str(gpu)), str(key))
        else:
            wait = float(str(event[1]))
            # Stop at the policy's deadline on the way, as the shell's timer does.
            d = ins.next_deadline(t)
            if d is not None and t < d < t + wait:
                t = d
                settle()
            t += wait
        settle()
        for gpu, enable, at in sent[n_before:]:
            if enable:
                assert not oracle.unaccounted(gpu, at)
        for g in GPUS:
            if oracle.unaccounted(g, t):
                assert not agent.gates[g].enabled
            assert ins.held(g, t) == oracle.unaccounted(g, t)


# -- the report ---------------------------------------------------------------------------


def test_every_report_says_what_is_uninstrumented_and_whether_the_node_opted_out() -> None:
    status = NodeTraceStatus(
        gpus=[GpuInfo(index=g, uuid=f"GPU-{g}", memory_gi_b=80) for g in GPUS],
        per_gpu=[GpuTrace(index=g, offline_enabled_seconds=1, online_busy_seconds=1) for g in GPUS],
    )
    found = {1: (Uninstrumented(300, "unknown", "ns/web"), Uninstrumented(7, "silent"))}
    out = with_uninstrumented(status, found, enforced=True).to_k8s()
    assert out["uninstrumentedGuard"] == "Enforced"
    assert "uninstrumentedProcesses" not in out["perGPU"][0]
    assert out["perGPU"][1]["uninstrumentedProcesses"] == [
        {"pid": 300, "pod": "ns/web", "reason": "unknown"},
        {"pid": 7, "pod": "", "reason": "silent"},
    ]
    back = NodeTraceStatus.model_validate(out)
    assert {g: u.describe() for g, u in back.uninstrumented_gpus().items()} == {1: "pod ns/web"}
    off = NodeTraceStatus.model_validate(with_uninstrumented(status, found, False).to_k8s())
    assert off.uninstrumented_guard == UninstrumentedGuard.OPTED_OUT
    assert off.uninstrumented_gpus() == {}  # reported, but nothing for the scheduler to avoid
    assert off.per_gpu[1].uninstrumented_processes is not None
