"""The uninstrumented-process guard (gleaner.runtime_agent.policy.instrumented) and the gate
hold it drives (ComputeGate.hold, NodeAgent.hold)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.api import GpuInfo, GpuTrace, NodeTraceStatus, UninstrumentedGuard
from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.daemon import AgentDaemon, AgentOptions
from gleaner.runtime_agent.instrumented import InstrumentationWatch, pod_uid_of
from gleaner.runtime_agent.kube import PodNames
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


def test_a_shim_in_another_pid_namespace_is_matched_by_its_peer_pid() -> None:
    ins = Instrumentation(GPUS, InstrumentationConfig(silence_s=SILENCE))
    # The pod's shim says pid 1 (its own namespace); the socket says 4242 (the agent's).
    ins.connected(0.0, "c1", 1, "online", [0], peer_pid=4242)
    ins.set_processes(0.0, 0, [GpuProcess(4242, "ns/web")])
    assert not ins.held(0, 0.5)
    ins.disconnected(0.6, "c1")
    assert ins.uninstrumented(0, 0.6) == (Uninstrumented(4242, "disconnected", "ns/web"),)
    ins.connected(0.7, "c2", 1, "online", [0], peer_pid=4242)  # it reconnects
    assert not ins.held(0, 0.7)
    ins.disconnected(0.8, "c2")
    ins.set_processes(0.9, 0, [])  # the process ended (the driver lists neither pid)
    assert not ins.held(0, 0.9)
    # Silent: reported once, under the pid the driver lists.
    ins.connected(1.0, "c3", 1, "online", [0], peer_pid=5000)
    ins.set_processes(1.0, 0, [GpuProcess(5000)])
    assert ins.uninstrumented(0, 2.5) == (Uninstrumented(5000, "silent"),)


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
    st.none() | st.sampled_from(PIDS),  # the socket's peer pid (another pid namespace)
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

    shims: dict[str, tuple[set[int], str, list[int], float]] = field(default_factory=dict)
    """key -> (its pids: HELLO's and the peer's, role, GPUs, last heard)."""
    listed: dict[int, list[int] | None] = field(default_factory=lambda: dict.fromkeys(GPUS))
    lost: dict[int, list[set[int]]] = field(default_factory=lambda: {g: [] for g in GPUS})
    """GPU -> the pid sets of online shims whose connection closed."""

    def live(self, t: float) -> set[int]:
        out: set[int] = set()
        for pids, role, _, heard in self.shims.values():
            if role == "offline" or (role == "online" and t - heard < SILENCE):
                out |= pids
        return out

    def unaccounted(self, gpu: int, t: float) -> bool:
        live = self.live(t)
        listed = self.listed[gpu] or []
        if any(pid not in live for pid in listed):
            return True
        if any(not (pids & live) for pids in self.lost[gpu]):
            return True
        return any(
            role == "online" and gpu in gpus and not (pids & live)
            for pids, role, gpus, _ in self.shims.values()
        )

    def drop(self, t: float, key: str) -> None:
        if key in self.shims:
            pids, role, gpus, _ = self.shims.pop(key)
            if role == "online" and not (pids & self.live(t)):
                for g in gpus:
                    self.lost[g].append(pids)


@settings(max_examples=300)
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
            _, key, pid, role, gpus, peer = event
            assert isinstance(key, str) and isinstance(pid, int) and isinstance(role, str)
            assert isinstance(gpus, list) and (peer is None or isinstance(peer, int))
            ins.disconnected(t, key)  # a key reused is a new connection
            oracle.drop(t, key)
            ins.connected(t, key, pid, role, gpus, peer)  # type: ignore[arg-type]
            pids = {pid} if peer is None else {pid, peer}
            oracle.shims[key] = (pids, role, gpus, t)
            if role in ("online", "offline"):
                for g in GPUS:
                    oracle.lost[g] = [gone for gone in oracle.lost[g] if not (gone & pids)]
        elif kind == "frame":
            key = str(event[1])
            ins.heard(t, key)
            if key in oracle.shims:
                pids, role, gpus, _ = oracle.shims[key]
                oracle.shims[key] = (pids, role, gpus, t)
        elif kind == "disconnect":
            key = str(event[1])
            ins.disconnected(t, key)
            oracle.drop(t, key)
        elif kind == "processes":
            _, gpu, seen = event
            assert isinstance(gpu, int) and (seen is None or isinstance(seen, list))
            listed = None if seen is None else [int(p) for p in seen]
            ins.set_processes(t, gpu, None if listed is None else [GpuProcess(p) for p in listed])
            oracle.listed[gpu] = listed
            if listed is not None:
                oracle.lost[gpu] = [gone for gone in oracle.lost[gpu] if gone & set(listed)]
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


# -- backends -----------------------------------------------------------------------------


def test_the_simulated_backend_is_unchanged_and_the_nvidia_one_checks(tmp_path: Path) -> None:
    sim = AgentDaemon(AgentOptions(backend="simulated", node="n", gpus=2, kube=False))
    assert sim.instrumentation is None and sim.health()["uninstrumented"] is None
    assert [m.name for m in sim.extra_metrics() if "uninstrumented" in m.name] == []
    nv = AgentDaemon(
        AgentOptions(
            backend="nvidia",
            node="n",
            gpus=1,
            kube=False,
            nvml=False,
            socket_dir=tmp_path,
            instrumentation=InstrumentationConfig(enforce=False),
        )
    )
    assert nv.health()["uninstrumented"] == {"enforced": False, "gpus": {}}
    names = {m.name: m for m in nv.extra_metrics()}
    guard = names["gleaner_uninstrumented_guard_enforced"]
    assert [s.value for s in guard.samples] == [0.0]
    count = names["gleaner_gpu_uninstrumented_processes"]
    assert [(s.labels["gpu"], s.value) for s in count.samples] == [("0", 0.0)]


def test_pods_are_named_from_their_cgroup_and_the_node_pod_list(tmp_path: Path) -> None:
    uid = "0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"
    cg = tmp_path / "300"
    cg.mkdir()
    systemd = uid.replace("-", "_")
    cg.joinpath("cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{systemd}.slice/"
        "cri-containerd-abc.scope\n"
    )
    assert pod_uid_of(300, tmp_path) == uid
    assert pod_uid_of(301, tmp_path) is None  # no such process

    calls: list[str | None] = []

    class Client:
        def list(self, path: str, *, field_selector: str | None = None) -> list[dict[str, Any]]:
            calls.append(field_selector)
            return [{"metadata": {"uid": uid, "namespace": "ns", "name": "web"}}]

    now = [0.0]
    names = PodNames(cast(Any, Client()), "n1", refresh_s=30.0, clock=lambda: now[0])
    names.refresh()
    assert names(uid) == "ns/web" and calls == ["spec.nodeName=n1"]

    agent, _ = _agent()
    watch = InstrumentationWatch(
        agent,
        InstrumentationConfig(),
        running_pids=lambda gpu: [300, 301] if gpu == 0 else None,
        pod_name=names,
        proc_root=tmp_path,
    )
    watch.poll(1.0)
    assert watch.report(1.0) == {
        0: (Uninstrumented(300, "unknown", "ns/web"), Uninstrumented(301, "unknown"))
    }
    assert agent.gates[0].held and not agent.gates[1].held
