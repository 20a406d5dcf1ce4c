"""Which pods hold which GPUs (gleaner.runtime_agent.podresources, against a fake kubelet
PodResources server) and the guard for an agent without the host's pids (count matching and
the ``unshimmed`` rule of gleaner.runtime_agent.policy.instrumented)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.api import GpuInfo
from gleaner.api.contract import KUBELET_POD_RESOURCES_SOCKET
from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.daemon import AgentDaemon, AgentOptions
from gleaner.runtime_agent.instrumented import InstrumentationWatch
from gleaner.runtime_agent.podresources import (
    ContainerDevices,
    KubeletGpuHolders,
    PodResourcesClient,
    PodResourcesError,
    decode_list_response,
    encode_list_response,
    gpu_holders,
)
from gleaner.runtime_agent.policy import (
    GateConfig,
    GpuProcess,
    Instrumentation,
    InstrumentationConfig,
    Uninstrumented,
)
from gleaner.testing.podresources import FakePodResources

GPUS = (0, 1)
SILENCE = 1.0
INVENTORY = [GpuInfo(index=g, uuid=f"GPU-{g}aa", memory_gi_b=80) for g in GPUS]
WEB = ContainerDevices("prod/web-0", "server", "nvidia.com/gpu", ("GPU-0aa",))
COUNT = InstrumentationConfig(silence_s=SILENCE, match="count")


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        low, v = v & 0x7F, v >> 7
        out.append(low | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _len(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


# -- the encoding -------------------------------------------------------------------------


def test_the_list_answer_round_trips() -> None:
    entries = [
        WEB,
        ContainerDevices("prod/web-0", "server", "example.com/nic", ("eth1",)),
        ContainerDevices("prod/web-0", "sidecar", "nvidia.com/gpu", ()),
        ContainerDevices("batch/train", "main", "nvidia.com/gpu", ("GPU-1aa", "GPU-0aa")),
    ]
    assert decode_list_response(encode_list_response(entries)) == entries
    assert decode_list_response(b"") == []


def test_fields_the_agent_does_not_read_are_skipped_by_wire_type() -> None:
    # A container as a newer kubelet sends it: packed cpu_ids (3), memory (4), a topology
    # inside the devices (3), a fixed64 and a fixed32 field nobody defines yet.
    topology = _len(1, _varint(1 << 3) + _varint(1))
    devices = _len(1, b"nvidia.com/gpu") + _len(2, b"GPU-1aa") + _len(3, topology)
    container = (
        _len(1, b"c")
        + _len(3, _varint(2) + _varint(3))
        + _len(2, devices)
        + _len(4, _len(1, b"memory"))
        + _varint(9 << 3 | 1)
        + bytes(8)
        + _varint(10 << 3 | 5)
        + bytes(4)
    )
    pod = _len(1, b"p") + _len(2, b"ns") + _len(3, container) + _varint(7 << 3) + _varint(300)
    answer = _len(1, pod) + _len(2, b"unknown top-level field")
    assert decode_list_response(answer) == [
        ContainerDevices("ns/p", "c", "nvidia.com/gpu", ("GPU-1aa",))
    ]


@pytest.mark.parametrize(
    "bad",
    [b"\x0a\x05ab", b"\x0a", b"\x0b", b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"],
    ids=["truncated-field", "truncated-length", "group-wire-type", "endless-varint"],
)
def test_a_malformed_answer_raises_value_error(bad: bytes) -> None:
    with pytest.raises(ValueError):
        decode_list_response(bad)


def test_device_ids_map_to_gpu_indices_by_uuid_or_index() -> None:
    entries = [
        WEB,
        ContainerDevices("prod/web-1", "s", "nvidia.com/gpu", ("GPU-0aa",)),
        ContainerDevices("prod/web-1", "t", "nvidia.com/gpu", ("GPU-0aa",)),
        ContainerDevices("x/by-index", "c", "nvidia.com/gpu", ("1",)),
        ContainerDevices("x/mig", "c", "nvidia.com/mig-1g.10gb", ("MIG-abc",)),
        ContainerDevices("x/nic", "c", "example.com/nic", ("7",)),
    ]
    assert gpu_holders(entries, INVENTORY) == {
        0: ("prod/web-0", "prod/web-1"),
        1: ("x/by-index",),
    }


# -- the client and its cache against a fake kubelet --------------------------------------


def test_the_client_lists_from_the_kubelet_socket(tmp_path: Path) -> None:
    sock = tmp_path / "kubelet.sock"
    assert KUBELET_POD_RESOURCES_SOCKET.endswith("/pod-resources/kubelet.sock")
    with FakePodResources(sock, [WEB]) as kubelet:
        client = PodResourcesClient(str(sock), timeout_s=10.0)
        try:
            assert client.list() == [WEB]
            kubelet.entries = []
            assert client.list() == []
            kubelet.fail = "UNAVAILABLE"
            with pytest.raises(PodResourcesError, match="UNAVAILABLE"):
                client.list()
        finally:
            client.close()
        assert kubelet.calls == 3


def test_no_kubelet_is_an_error_not_a_hang(tmp_path: Path) -> None:
    client = PodResourcesClient(str(tmp_path / "absent.sock"), timeout_s=0.5)
    with pytest.raises(PodResourcesError):
        client.list()
    client.close()


def test_holders_are_unknown_before_the_first_answer_and_once_stale(tmp_path: Path) -> None:
    now = [0.0]
    sock = tmp_path / "kubelet.sock"
    with FakePodResources(sock, [WEB]) as kubelet:
        client = PodResourcesClient(str(sock), timeout_s=10.0)
        holders = KubeletGpuHolders(INVENTORY, client.list, stale_s=10.0, clock=lambda: now[0])
        assert holders() is None
        holders.refresh()
        assert holders() == {0: ("prod/web-0",)}
        kubelet.fail = "UNAVAILABLE"
        now[0] = 9.0
        holders.refresh()  # a failure keeps the last answer ...
        assert holders() == {0: ("prod/web-0",)} and holders.errors == 1
        assert "UNAVAILABLE" in str(holders.last_error)
        now[0] = 10.5
        assert holders() is None  # ... until it is stale
        kubelet.fail = None
        holders.refresh()
        assert holders() == {0: ("prod/web-0",)} and holders.last_error is None
        client.close()


def test_the_refresh_thread_polls_until_stopped(tmp_path: Path) -> None:
    sock = tmp_path / "kubelet.sock"
    with FakePodResources(sock, [WEB]) as kubelet:
        client = PodResourcesClient(str(sock), timeout_s=10.0)
        holders = KubeletGpuHolders(INVENTORY, client.list, interval_s=0.05)
        holders.start()
        try:
            assert kubelet.called.wait(30.0)
            for _ in range(600):  # the answer lands just after the call
                if holders() is not None:
                    break
                kubelet.called.clear()
                kubelet.called.wait(0.05)
            assert holders() == {0: ("prod/web-0",)}
        finally:
            holders.stop()
            client.close()


# -- the policy without host pids ---------------------------------------------------------


def test_count_matching_holds_only_gpus_with_more_processes_than_live_shims() -> None:
    ins = Instrumentation(GPUS, COUNT)
    # The shims' pids (their containers') never match the driver's (the host's).
    ins.connected(0.0, "on", 7, "online", [0])
    ins.connected(0.0, "off", 9, "offline", [0, 1])
    ins.set_processes(0.0, 0, [GpuProcess(4001), GpuProcess(4002)])
    ins.set_processes(0.0, 1, [GpuProcess(4003)])
    assert ins.uninstrumented(0, 0.1) == () and ins.uninstrumented(1, 0.1) == ()
    ins.set_processes(0.2, 0, [GpuProcess(4001), GpuProcess(4002), GpuProcess(4100)])
    assert ins.uninstrumented(0, 0.3) == (Uninstrumented(4100, "unknown"),)
    assert ins.held(0, 0.3) and not ins.held(1, 0.3)
    # The same lists under pid matching would hold both GPUs: nothing matches.
    strict = Instrumentation(GPUS, InstrumentationConfig(silence_s=SILENCE))
    strict.connected(0.0, "off", 9, "offline", [0, 1])
    strict.set_processes(0.0, 1, [GpuProcess(4003)])
    assert strict.held(1, 0.1)


def test_count_matching_still_closes_on_a_silent_or_lost_online_shim() -> None:
    ins = Instrumentation(GPUS, COUNT)
    ins.connected(0.0, "on", 7, "online", [0])
    ins.set_processes(0.0, 0, [GpuProcess(4001)])
    assert not ins.held(0, 0.5)
    assert ins.held(0, 1.5)  # silent: it no longer counts, and it is reported
    assert Uninstrumented(7, "silent") in ins.uninstrumented(0, 1.5)
    ins.heard(1.6, "on")
    assert not ins.held(0, 1.7)
    ins.disconnected(1.8, "on")
    assert ins.held(0, 1.8)
    ins.set_processes(2.0, 0, [GpuProcess(4001)])  # the process still runs: still counted
    assert ins.uninstrumented(0, 2.0) == (Uninstrumented(4001, "unknown"),)
    ins.set_processes(2.5, 0, [])
    assert not ins.held(0, 2.5)


def test_a_pod_holding_a_gpu_without_a_live_online_shim_holds_it() -> None:
    ins = Instrumentation(GPUS, COUNT)
    ins.set_holders(0.0, 0, ["prod/web-0"])
    ins.set_holders(0.0, 1, [])
    ins.set_processes(0.0, 0, [])
    # No process yet: the pod may start serving any moment, without the shim.
    assert ins.uninstrumented(0, 0.1) == (Uninstrumented(0, "unshimmed", "prod/web-0"),)
    assert ins.held(0, 0.1) and not ins.held(1, 0.1)
    ins.connected(0.2, "off", 9, "offline", [0])  # an offline shim is not the pod's
    assert ins.held(0, 0.3)
    ins.connected(0.4, "on", 7, "online", [0])
    assert not ins.held(0, 0.5)
    ins.set_holders(0.6, 0, ["prod/web-0", "prod/web-1"])  # two pods share it, one shim
    assert [u.pod for u in ins.uninstrumented(0, 0.7)] == ["prod/web-0", "prod/web-1"]
    ins.set_holders(0.8, 0, None)  # unknown: the rule says nothing
    assert not ins.held(0, 0.9)
    assert ins.held(0, 1.5)  # the online shim went silent
    with pytest.raises(KeyError):
        ins.set_holders(1.0, 9, [])
    with pytest.raises(ValueError, match="match"):
        InstrumentationConfig(match="both")  # type: ignore[arg-type]


def test_the_watch_feeds_holders_and_names_no_pod_from_another_pid_namespace(
    tmp_path: Path,
) -> None:
    (tmp_path / "4001").mkdir()
    (tmp_path / "4001" / "cgroup").write_text(
        "0::/kubepods/burstable/pod0123abcd-0000-1111-2222-333344445555/x\n"
    )
    agent = NodeAgent("n", INVENTORY, start=0.0, gate_config=GateConfig(0.01, 0.01))
    held: dict[int, tuple[str, ...]] | None = {1: ("prod/web-1",)}
    watch = InstrumentationWatch(
        agent,
        COUNT,
        running_pids=lambda gpu: [4001] if gpu == 0 else [],
        pod_name=lambda uid: "wrong/pod",
        gpu_holders=lambda: held,
        proc_root=tmp_path,
    )
    watch.poll(0.0)
    assert watch.report(0.0) == {
        0: (Uninstrumented(4001, "unknown", ""),),
        1: (Uninstrumented(0, "unshimmed", "prod/web-1"),),
    }
    assert agent.gates[0].held and agent.gates[1].held
    held = None
    watch.poll(1.0)
    assert 1 not in watch.report(1.0) and not agent.gates[1].held


# -- the property -------------------------------------------------------------------------

PIDS = (100, 101, 102, 103)
KEYS = ("a", "b", "c")
PODS = ("ns/p", "ns/q")

events = st.one_of(
    st.tuples(
        st.just("connect"),
        st.sampled_from(KEYS),
        st.sampled_from(PIDS),
        st.sampled_from(("online", "offline", "framework")),
        st.sets(st.sampled_from(GPUS), min_size=1).map(sorted),
    ),
    st.tuples(st.just("frame"), st.sampled_from(KEYS)),
    st.tuples(st.just("disconnect"), st.sampled_from(KEYS)),
    st.tuples(
        st.just("processes"),
        st.sampled_from(GPUS),
        st.none() | st.sets(st.sampled_from(PIDS)).map(sorted),
    ),
    st.tuples(
        st.just("holders"),
        st.sampled_from(GPUS),
        st.none() | st.sets(st.sampled_from(PODS)).map(sorted),
    ),
    st.tuples(st.just("busy"), st.sampled_from(GPUS), st.sampled_from(KEYS)),
    st.tuples(st.just("wait"), st.floats(0.0, 1.5)),
)


@dataclass
class CountOracle:
    """The counting rules, kept the simplest way: a GPU is accounted for when its shims
    outnumber neither its processes nor (online shims) the pods that hold it."""

    shims: dict[str, tuple[int, str, list[int], float]] = field(default_factory=dict)
    listed: dict[int, list[int] | None] = field(default_factory=lambda: dict.fromkeys(GPUS))
    holders: dict[int, list[str] | None] = field(default_factory=lambda: dict.fromkeys(GPUS))
    lost: dict[int, list[int]] = field(default_factory=lambda: {g: [] for g in GPUS})

    def alive(self, role: str, heard: float, t: float) -> bool:
        return role == "offline" or (role == "online" and t - heard < SILENCE)

    def unaccounted(self, gpu: int, t: float) -> bool:
        live = [(p, r, g) for p, r, g, h in self.shims.values() if self.alive(r, h, t)]
        live_pids = {p for p, _, _ in live}
        on_gpu = [r for _, r, g in live if gpu in g]
        if len(self.listed[gpu] or []) > len(on_gpu):
            return True
        if len(self.holders[gpu] or []) > on_gpu.count("online"):
            return True
        if any(pid not in live_pids for pid in self.lost[gpu]):
            return True
        return any(
            r == "online" and gpu in g and not self.alive(r, h, t) and p not in live_pids
            for p, r, g, h in self.shims.values()
        )

    def drop(self, t: float, key: str) -> None:
        if key in self.shims:
            pid, role, gpus, _ = self.shims.pop(key)
            live = {p for p, r, _, h in self.shims.values() if self.alive(r, h, t)}
            if role == "online" and pid not in live:
                for g in gpus:
                    self.lost[g].append(pid)


@settings(max_examples=300)
@given(st.lists(events, max_size=60))
def test_without_host_pids_the_gate_never_opens_over_an_unaccounted_gpu(
    script: list[tuple[object, ...]],
) -> None:
    sent: list[tuple[int, bool, float]] = []

    class Recording:
        def set_gate(self, gpu: int, enable: bool, t: float) -> None:
            sent.append((gpu, enable, t))

        def reclaim(self, plan: object, t: float) -> bool:
            return True

        def restore(self, gpu: int, owner: str, handles: tuple[int, ...], t: float) -> bool:
            return True

    agent = NodeAgent(
        "n", INVENTORY, start=0.0, gate_config=GateConfig(0.01, 0.01), sink=Recording()
    )
    ins = Instrumentation(GPUS, InstrumentationConfig(silence_s=SILENCE, match="count"))
    oracle = CountOracle()
    t = 0.0

    def settle() -> None:
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
            ins.disconnected(t, key)
            oracle.drop(t, key)
            ins.connected(t, key, pid, role, gpus)  # type: ignore[arg-type]
            oracle.shims[key] = (pid, role, gpus, t)
            if role in ("online", "offline"):
                for g in GPUS:
                    oracle.lost[g] = [gone for gone in oracle.lost[g] if gone != pid]
        elif kind == "frame":
            key = str(event[1])
            ins.heard(t, key)
            if key in oracle.shims:
                pid, role, gpus, _ = oracle.shims[key]
                oracle.shims[key] = (pid, role, gpus, t)
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
                oracle.lost[gpu] = [gone for gone in oracle.lost[gpu] if gone in listed]
        elif kind == "holders":
            _, gpu, pods = event
            assert isinstance(gpu, int) and (pods is None or isinstance(pods, list))
            ins.set_holders(t, gpu, None if pods is None else [str(p) for p in pods])
            oracle.holders[gpu] = None if pods is None else [str(p) for p in pods]
        elif kind == "busy":
            _, gpu, key = event
            agent.online_busy(t, int(str(gpu)), str(key))
        else:
            wait = float(str(event[1]))
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


def test_the_nvidia_daemon_asks_the_kubelet_and_reports_the_holders(tmp_path: Path) -> None:
    sock = tmp_path / "kubelet.sock"
    options = AgentOptions(
        backend="nvidia",
        node="n",
        gpus=2,
        kube=False,
        nvml=False,
        socket_dir=tmp_path / "run",
        instrumentation=COUNT,
        pod_resources_socket=str(sock),
    )
    (tmp_path / "run").mkdir()
    daemon = AgentDaemon(options)
    assert daemon.holders is not None and daemon.instrumentation is not None
    uuid = daemon.inventory[1].uuid
    with FakePodResources(sock, [ContainerDevices("prod/web", "s", "nvidia.com/gpu", (uuid,))]):
        daemon.holders.refresh()
        daemon.instrumentation.poll(daemon.clock())
        health = daemon.health()
    assert health["process_match"] == "count"
    assert health["pod_resources"] == {"known": True, "error": None}
    assert health["uninstrumented"]["gpus"] == {
        "1": [{"pid": 0, "why": "unshimmed", "pod": "prod/web"}]
    }
    assert daemon.agent.gates[1].held and not daemon.agent.gates[0].held
    plain = AgentDaemon(AgentOptions(backend="simulated", node="n", gpus=1, kube=False))
    assert plain.health()["pod_resources"] is None and plain.health()["process_match"] is None
