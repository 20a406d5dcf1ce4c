"""The shim control server over a real Unix socket, with clients speaking the v1 protocol."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gleaner.protocol import wire as p
from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.metrics import build_registry
from gleaner.runtime_agent.policy import (
    GateConfig,
    KvSpan,
    MemoryConfig,
    plan_reclamation,
    select_handles_fifo,
    select_handles_greedy,
)
from gleaner.runtime_agent.policy.reclaim import Selector
from gleaner.runtime_agent.server import (
    REGATE_INTERVAL_S,
    UNREPORTED,
    OfflineStatus,
    ShimServer,
    summarize_offline_status,
)
from gleaner.runtime_agent.simulated import synthetic_inventory
from gleaner.testing.kube import wait_for

M = TypeVar("M", bound=p.Message)
NODE = "node-s"
INVENTORY = synthetic_inventory(NODE, 2, 80)


class Harness:
    """A ShimServer on an event loop in a background thread (clients are the test thread)."""

    def __init__(
        self,
        socket_dir: Path,
        memory_config: MemoryConfig | None = None,
        selector: Selector = select_handles_greedy,
        reclaim_timeout_s: float = 5.0,
        restore_timeout_s: float = 5.0,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.agent = NodeAgent(
            node=NODE,
            inventory=INVENTORY,
            start=self.loop.time(),
            gate_config=GateConfig(cool_floor_s=0.05, cool_ceiling_s=0.2, request_timeout_s=None),
            memory_config=memory_config or MemoryConfig(),
            selector=selector,
        )
        self.server = ShimServer(
            self.agent,
            socket_dir,
            clock=self.loop.time,
            on_event=self.rearm,
            reclaim_timeout_s=reclaim_timeout_s,
            restore_timeout_s=restore_timeout_s,
        )
        self.agent.sink = self.server
        self.agent.offline_handles = self.server.offline_handle_map
        self._timer: asyncio.TimerHandle | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def rearm(self) -> None:
        d = self.agent.next_deadline()
        if d is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_at(d, self.fire)

    def fire(self) -> None:
        self._timer = None
        self.agent.tick(self.loop.time())
        self.rearm()

    def call(self, fn: object) -> None:
        assert callable(fn)
        done = threading.Event()

        def run() -> None:
            fn()
            done.set()

        self.loop.call_soon_threadsafe(run)
        assert done.wait(5)

    def start(self) -> None:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(5)
        self.call(self.rearm)

    def stop(self) -> None:
        self.call(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path)
    h.start()
    yield h
    h.stop()


class Client:
    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(str(path))
        self.decoder = p.FrameDecoder()
        self.inbox: list[p.Message] = []

    def send(self, msg: p.Message) -> None:
        p.send_message(self.sock, msg)

    def expect(self, kind: type[M], timeout: float = 10.0) -> M:
        self.sock.settimeout(timeout)
        while True:
            for i, m in enumerate(self.inbox):
                if isinstance(m, kind):
                    del self.inbox[i]
                    return m
            got = p.recv_messages(self.sock, self.decoder)
            if got is None:
                raise ConnectionError("closed")
            self.inbox.extend(got)

    def close(self) -> None:
        self.sock.close()


def _offline(h: Harness, gpus: tuple[int, ...] = (0,)) -> Client:
    c = Client(h.server.path)
    c.send(
        p.Hello(
            pid=100,
            role=p.Role.OFFLINE,
            gpu_uuids=tuple(INVENTORY[g].uuid for g in gpus),
            job="team/llm",
        )
    )
    return c


def _online(h: Harness) -> Client:
    c = Client(h.server.path)
    c.send(p.Hello(pid=200, role=p.Role.ONLINE, gpu_uuids=(INVENTORY[0].uuid,)))
    c.expect(p.HelloAck)
    return c


def test_gate_cycle_over_the_socket(harness: Harness) -> None:
    off = _offline(harness)
    ack = off.expect(p.HelloAck)
    assert isinstance(ack, p.HelloAck) and ack.accepted
    # The gate opens once the floor cooldown has passed with the online side idle.
    opened = off.expect(p.Gate)
    assert isinstance(opened, p.Gate) and opened.enable
    assert harness.agent.offline_jobs == {0: "team/llm"}
    on = _online(harness)
    on.send(p.OnlineBusy(gpu=0, mono_ns=1, request_id=7))
    closed = off.expect(p.Gate)
    assert isinstance(closed, p.Gate) and not closed.enable
    assert closed.gate_seq > opened.gate_seq
    on.send(p.DecodeGap(gpu=0, mono_ns=2, gap_ns=30_000_000))
    on.send(p.OnlineIdle(gpu=0, mono_ns=3, request_id=7))  # request 7 finished
    reopened = off.expect(p.Gate)
    assert isinstance(reopened, p.Gate) and reopened.enable
    tot = harness.agent.accounting.totals.gpus[0]
    assert tot.preemptions == 1
    assert tot.online_requests == 1 and tot.max_preemptions_per_request == 1
    assert harness.agent.gates[0].g_max_s == pytest.approx(0.03)
    off.send(p.GateAck(gate_seq=reopened.gate_seq, enabled=True, ok=True, latency_ns=1000))
    on.send(p.Heartbeat(mono_ns=5, pid=200))
    assert isinstance(on.expect(p.Heartbeat), p.Heartbeat)
    assert harness.server.connections() == {"offline": 1, "online": 1, "framework": 0}
    off.close()
    on.close()


def test_a_held_report_within_the_regate_interval_is_answered_when_it_ends(
    harness: Harness,
) -> None:
    """An offline shim refuses the enables (its watch thread still maps the restarted agent's
    old segment, say) and reports it twice within the interval: the second report is not
    dropped, the enable goes again once the interval is over. Nothing else would make the shim
    report again while no thread of it waits in a launch."""
    assert harness.server.segment is not None, "the re-send is for shims on the native path"
    off = _offline(harness)
    off.expect(p.HelloAck)
    opened = off.expect(p.Gate)
    assert opened.enable
    held = p.Status(code=p.StatusCode.NO_AGENT, blocked_threads=0)
    off.send(held)
    first = off.expect(p.Gate)
    assert first.enable and first.gate_seq > opened.gate_seq  # the first one goes at once
    sent = time.monotonic()
    off.send(held)
    second = off.expect(p.Gate, timeout=10 * REGATE_INTERVAL_S)
    assert second.enable and second.gate_seq > first.gate_seq
    assert time.monotonic() - sent >= REGATE_INTERVAL_S / 2  # deferred, not a storm
    off.close()


def test_a_deferred_regate_is_not_sent_to_a_shim_that_runs_again(harness: Harness) -> None:
    off = _offline(harness)
    off.expect(p.HelloAck)
    assert off.expect(p.Gate).enable
    off.send(p.Status(code=p.StatusCode.NO_AGENT, blocked_threads=0))
    assert off.expect(p.Gate).enable
    off.send(p.Status(code=p.StatusCode.NO_AGENT, blocked_threads=0))
    off.send(p.Status(code=p.StatusCode.OK, blocked_threads=0))  # it opened after all
    with pytest.raises(TimeoutError):
        off.expect(p.Gate, timeout=2 * REGATE_INTERVAL_S)
    off.close()


def test_online_disconnect_while_busy_counts_as_idle(harness: Harness) -> None:
    off = _offline(harness)
    off.expect(p.HelloAck)
    off.expect(p.Gate)
    on = _online(harness)
    on.send(p.OnlineBusy(gpu=p.GPU_ALL, mono_ns=1))
    assert not off.expect(p.Gate).enable
    on.close()
    assert off.expect(p.Gate).enable
    off.close()


def test_multi_gpu_job_enabled_only_when_all_its_gpus_are(harness: Harness) -> None:
    off = _offline(harness, (0, 1))
    off.expect(p.HelloAck)
    assert off.expect(p.Gate).enable
    on = _online(harness)  # online on GPU 0 only
    on.send(p.OnlineBusy(gpu=0, mono_ns=1))
    assert not off.expect(p.Gate).enable
    # GPU 1 is enabled all along, yet the job stays gated until GPU 0 reopens.
    assert harness.agent.gates[1].enabled
    on.send(p.OnlineIdle(gpu=0, mono_ns=2))
    assert off.expect(p.Gate).enable
    off.close()
    on.close()


def test_fd_passed_by_scm_rights_is_kept(harness: Harness) -> None:
    off = _offline(harness)
    off.expect(p.HelloAck)
    r, w = os.pipe()
    try:
        off.send(p.FdPass(h_client=0xC1D00001, sender_fd=r, fd=r))
        off.send(p.Heartbeat(mono_ns=1))
        off.expect(p.Heartbeat)  # the server handled everything before it
        procs = [q for q in harness.server.processes.values() if q.fds]
        assert len(procs) == 1
        kept = procs[0].fds[0]
        assert os.fstat(kept).st_ino == os.fstat(r).st_ino
        os.write(w, b"x")
        assert os.read(kept, 1) == b"x"  # the very same pipe, through another descriptor
    finally:
        os.close(r)
        os.close(w)
    off.close()


def test_framework_hook_receives_invalidated_blocks(harness: Harness) -> None:
    hook = Client(harness.server.path)
    hook.send(p.Hello(pid=300, role=p.Role.FRAMEWORK))
    assert hook.expect(p.HelloAck).accepted
    plan = plan_reclamation(
        0, {5: [KvSpan("req-a", (3, 4), 64)], 6: [KvSpan("req-b", (9,), 16)]}, 2, handle_bytes=1
    )
    harness.call(lambda: harness.server.send_invalidations(plan))
    got = {}
    for _ in range(2):
        m = hook.expect(p.InvalidateBlocks)
        assert isinstance(m, p.InvalidateBlocks)
        got[m.request_id] = m.block_ids
    assert got == {"req-a": (3, 4), "req-b": (9,)}
    hook.close()


def test_invalidated_blocks_go_only_to_the_hook_of_the_job_on_that_gpu(harness: Harness) -> None:
    off = _offline(harness, gpus=(0,))  # job team/llm on GPU 0
    off.expect(p.HelloAck)
    hooks = {}
    for pid, job in ((301, "team/llm"), (302, "team/other")):
        hook = Client(harness.server.path)
        hook.send(p.Hello(pid=pid, role=p.Role.FRAMEWORK, job=job))
        assert hook.expect(p.HelloAck).accepted
        hooks[job] = hook
    plan = plan_reclamation(0, {5: [KvSpan("req-a", (3, 4), 64)]}, 1, handle_bytes=1)
    harness.call(lambda: harness.server.send_invalidations(plan))
    m = hooks["team/llm"].expect(p.InvalidateBlocks)
    assert (m.request_id, m.block_ids) == ("req-a", (3, 4))
    # Block 3 of another engine is another block: the other job's hook hears nothing.
    with pytest.raises(TimeoutError):
        hooks["team/other"].expect(p.InvalidateBlocks, timeout=0.3)
    for c in (*hooks.values(), off):
        c.close()


def test_garbage_drops_the_connection(harness: Harness) -> None:
    c = Client(harness.server.path)
    c.sock.sendall(b"\0" * 32)
    with pytest.raises(ConnectionError):
        c.expect(p.HelloAck)
    assert harness.server.protocol_errors == 1
    c.close()


def test_frames_split_anywhere_and_mixed_with_slow_ones(harness: Harness) -> None:
    off = _offline(harness)
    off.expect(p.HelloAck)
    assert off.expect(p.Gate).enable
    on = Client(harness.server.path)
    hello = p.Hello(pid=201, role=p.Role.ONLINE, gpu_uuids=(INVENTORY[0].uuid,)).encode(1)
    busy = p.OnlineBusy(gpu=0, mono_ns=1, request_id=5).encode(2)
    gap = p.DecodeGap(gpu=0, mono_ns=2, gap_ns=40_000_000).encode(3)
    idle = p.OnlineIdle(gpu=0, mono_ns=3, request_id=5).encode(4)
    stream = hello + busy + gap + idle
    # Cut inside a header, inside a payload, and between frames.
    cuts = [3, len(hello) + 5, len(hello) + len(busy) + 20, len(stream) - 1, len(stream)]
    last = 0
    for cut in cuts:
        on.sock.sendall(stream[last:cut])
        last = cut
        harness.call(lambda: None)  # let the server read this piece before the next
    assert on.expect(p.HelloAck).accepted
    assert not off.expect(p.Gate).enable
    assert off.expect(p.Gate).enable  # request 5 finished: the cooldown passes, it reopens
    tot = harness.agent.accounting.totals.gpus[0]
    assert tot.preemptions == 1 and tot.online_requests == 1
    assert harness.agent.gates[0].g_max_s == pytest.approx(0.04)
    assert harness.server.protocol_errors == 0
    on.close()
    off.close()


def test_offline_connections_are_polled_after_hello(harness: Harness) -> None:
    off = _offline(harness)
    off.expect(p.HelloAck)
    gate = off.expect(p.Gate)
    (proc,) = [q for q in harness.server.processes.values() if q.offline]
    assert proc.polled  # no longer watched by the loop
    off.send(p.GateAck(gate_seq=gate.gate_seq, enabled=True, ok=True))
    off.send(p.GateAck(gate_seq=gate.gate_seq, enabled=True, ok=False, err=1))
    off.send(p.Heartbeat(mono_ns=1, pid=100))
    assert isinstance(off.expect(p.Heartbeat), p.Heartbeat)  # answered by the poll
    assert proc.gate_acks == 2 and proc.last_ack_seq == gate.gate_seq
    assert harness.server.gate_acks_failed == 1
    off.close()
    # The connection leaves the table first, then its jobs: wait for both.
    deadline = time.monotonic() + 10
    while (
        harness.server.connections()["offline"] or harness.agent.offline_jobs
    ) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert harness.server.connections()["offline"] == 0  # the poll saw the disconnect
    assert harness.agent.offline_jobs == {}


def test_garbage_after_a_fast_frame_drops_the_connection(harness: Harness) -> None:
    on = _online(harness)
    on.sock.sendall(p.OnlineBusy(gpu=0, mono_ns=1).encode(2) + b"\xff" * 16)
    with pytest.raises(ConnectionError):
        on.expect(p.HelloAck)
    harness.call(lambda: None)  # the loop has finished with that connection
    assert harness.server.protocol_errors == 1
    assert not harness.agent.is_busy(0)  # the busy edge was handled, then the drop idled it
    assert harness.agent.gates[0].online_requests == 1  # it did reach the gate
    on.close()


def test_offline_status_summary_counts_states_and_extends_holds_to_now() -> None:
    held = p.Status(code=p.StatusCode.NO_AGENT, blocked_ns=2_000_000_000, blocked_threads=1)
    gated_idle = p.Status(code=p.StatusCode.GATED_BY_AGENT, blocked_threads=0)
    running = p.Status(code=p.StatusCode.OK, blocked_ns=9_000_000_000, blocked_threads=3)
    out = summarize_offline_status(
        [
            ("team/a", held, 10.0),
            ("team/a", gated_idle, 11.0),
            ("team/b", running, 12.0),
            ("team/c", None, 0.0),
        ],
        now=13.5,
    )
    assert out.held_seconds == {"team/a": pytest.approx(5.5), "team/b": 0.0, "team/c": 0.0}
    assert out.processes["no_agent"] == out.processes["gated_by_agent"] == 1
    assert out.processes["ok"] == out.processes[UNREPORTED] == 1
    assert out.processes["control_refused"] == 0 and len(out.processes) == 7


def test_status_frames_reach_the_summary(harness: Harness) -> None:
    off = _offline(harness)
    off.expect(p.HelloAck)
    off.send(
        p.Status(
            code=p.StatusCode.CONTROL_REFUSED,
            reason="disable refused",
            blocked_ns=1_000_000_000,
            blocked_threads=2,
        )
    )
    got: list[OfflineStatus] = []
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # offline connections are read by a 20 ms poll
        harness.call(lambda: got.append(harness.server.offline_status(harness.loop.time())))
        if got[-1].processes["control_refused"]:
            break
        time.sleep(0.01)
    out = got[-1]
    assert out.processes["control_refused"] == 1
    assert out.held_seconds["team/llm"] >= 1.0
    off.close()


# -- memory: ONLINE_MEMORY, OFFLINE_HANDLES, reclamation in DESIGN order ----------------------

MIB2 = 2 << 20
PAGE = 0x7F0000000000
# Six pages, one request each: the first two are expensive to lose, the rest cheap.
TOKENS = (100, 100, 1, 1, 1, 1)


def _handles_frame(gpu: int = 0) -> p.OfflineHandles:
    entries = tuple(
        p.HandleSpan(PAGE + i * MIB2, MIB2, f"req-{i}", tokens=t, block_ids=(2 * i, 2 * i + 1))
        for i, t in enumerate(TOKENS)
    )
    return p.OfflineHandles(gpu=gpu, entries=entries)


class _Reclaiming:
    """An offline shim, its framework hook (same pid, same job) and an online process."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.off = _offline(h)
        if not self.off.expect(p.HelloAck).gate_open:  # else the cooldown ended before HELLO
            opened = self.off.expect(p.Gate)
            assert opened.enable
            self.off.send(p.GateAck(gate_seq=opened.gate_seq, enabled=True, ok=True))
        self.hook = Client(h.server.path)
        self.hook.send(p.Hello(pid=100, role=p.Role.FRAMEWORK, job="team/llm", gpu_indices=(0,)))
        assert self.hook.expect(p.HelloAck).accepted
        self.hook.send(_handles_frame())
        self.hook.send(p.Heartbeat(mono_ns=1))
        self.hook.expect(p.Heartbeat)  # the table arrived
        self.on = _online(h)

    def pressure(self) -> p.Gate:
        # 4 of 4 headroom handles in use: a pressure event, the headroom grows by 4.
        self.on.send(p.OnlineMemory(gpu=0, kv_used_bytes=4 * MIB2, kv_reserved_bytes=64 * MIB2))
        gate = self.off.expect(p.Gate)
        assert not gate.enable  # compute off first
        return gate

    def silent(self, client: Client, seconds: float = 0.3) -> list[p.Message]:
        """Frames that arrive within ``seconds`` (heartbeats aside)."""
        client.sock.settimeout(seconds)
        try:
            got = p.recv_messages(client.sock, client.decoder) or []
        except TimeoutError:
            got = []
        client.inbox.extend(got)
        return [m for m in client.inbox if not isinstance(m, p.Heartbeat)]

    def close(self) -> None:
        for c in (self.off, self.hook, self.on):
            c.close()


def _memory_harness(tmp_path: Path, selector: Selector, timeout: float = 5.0) -> Harness:
    h = Harness(
        tmp_path,
        memory_config=MemoryConfig(initial_handles=4, initial_interval_s=60.0, max_interval_s=60.0),
        selector=selector,
        reclaim_timeout_s=timeout,
    )
    h.start()
    return h


def test_online_memory_report_feeds_the_reservation(harness: Harness) -> None:
    on = _online(harness)
    on.send(p.OnlineMemory(gpu=0, kv_used_bytes=10 * MIB2, kv_reserved_bytes=64 * MIB2))
    on.send(p.Heartbeat(mono_ns=1))
    on.expect(p.Heartbeat)
    assert harness.agent.memory[0].used == 10
    assert harness.agent.memory_model[0].online_dynamic_bytes == 10 * MIB2
    on.close()
    deadline = time.monotonic() + 3
    while harness.agent.memory_model[0].online_dynamic_bytes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert harness.agent.memory_model[0].online_dynamic_bytes == 0  # gone: counts no more


@pytest.mark.parametrize(
    ("selector", "expected"),
    [(select_handles_greedy, (2, 3, 4, 5)), (select_handles_fifo, (0, 1, 2, 3))],
    ids=["greedy", "fifo"],
)
def test_reclamation_runs_in_design_order_over_the_socket(
    tmp_path: Path, selector: Selector, expected: tuple[int, ...]
) -> None:
    h = _memory_harness(tmp_path, selector)
    try:
        s = _Reclaiming(h)
        assert len(h.server.offline_handle_map(0)) == 6
        gate = s.pressure()
        # Until the disable is acknowledged: no RECLAIM, no invalidation.
        assert s.silent(s.off) == [] and s.silent(s.hook) == []
        s.off.send(p.GateAck(gate_seq=gate.gate_seq, enabled=False, ok=True))
        rec = s.off.expect(p.Reclaim)
        assert rec.gpu == 0 and rec.handles == tuple(PAGE + i * MIB2 for i in expected)
        # RECLAIM sent, not acknowledged: still no invalidation, nothing counted, gate held.
        assert s.silent(s.hook) == [] and s.silent(s.off, 0.4) == []
        assert h.agent.accounting.totals.gpus[0].reclamations == 0
        s.off.send(p.ReclaimAck(reclaim_seq=rec.reclaim_seq, gpu=0, released=4))
        got = {}
        for _ in expected:
            m = s.hook.expect(p.InvalidateBlocks)
            got[m.request_id] = m.block_ids
        assert got == {f"req-{i}": (2 * i, 2 * i + 1) for i in expected}
        # Compute comes back only now; the reclaimed pages left the table.
        assert s.off.expect(p.Gate).enable
        tot = h.agent.accounting.totals.gpus[0]
        assert tot.reclamations == 1
        assert tot.reclaimed_bytes == 4 * MIB2
        assert tot.kv_blocks_invalidated == 8
        assert sorted(h.server.offline_handle_map(0)) == sorted(
            PAGE + i * MIB2 for i in range(6) if i not in expected
        )
        assert h.server.reclaims_done == 1 and h.server.reclaims_failed == 0
        samples = {
            (smp.name, smp.labels.get("gpu")): smp.value
            for fam in text_string_to_metric_families(
                generate_latest(build_registry(lambda: h.agent)).decode()
            )
            for smp in fam.samples
        }
        assert samples[("gleaner_memory_reclaim_events_total", "0")] == 1
        assert samples[("gleaner_memory_reclaimed_bytes_total", "0")] == 4 * MIB2
        assert samples[("gleaner_kv_blocks_invalidated_total", "0")] == 8
        s.close()
    finally:
        h.stop()


def test_a_refused_reclaim_invalidates_nothing(tmp_path: Path) -> None:
    h = _memory_harness(tmp_path, select_handles_greedy)
    try:
        s = _Reclaiming(h)
        gate = s.pressure()
        s.off.send(p.GateAck(gate_seq=gate.gate_seq, enabled=False, ok=True))
        rec = s.off.expect(p.Reclaim)
        s.off.send(p.ReclaimAck(reclaim_seq=rec.reclaim_seq, gpu=0, released=0, ok=False, err=38))
        assert s.off.expect(p.Gate).enable  # the hold ends; the shim itself fails closed
        assert s.silent(s.hook) == []
        assert h.agent.accounting.totals.gpus[0].reclamations == 0
        assert h.server.reclaims_failed == 1 and len(h.server.offline_handle_map(0)) == 6
        s.close()
    finally:
        h.stop()


def test_a_reclaim_never_acknowledged_times_out(tmp_path: Path) -> None:
    h = _memory_harness(tmp_path, select_handles_greedy, timeout=0.3)
    try:
        s = _Reclaiming(h)
        gate = s.pressure()
        s.off.send(p.GateAck(gate_seq=gate.gate_seq, enabled=False, ok=True))
        s.off.expect(p.Reclaim)
        assert s.off.expect(p.Gate).enable
        assert s.silent(s.hook) == [] and h.server.reclaims_failed == 1
        s.close()
    finally:
        h.stop()


# -- memory given back: RESTORE ---------------------------------------------------------------

RESTORE_MEMORY = MemoryConfig(
    initial_handles=4,
    min_handles=4,  # no release before the pressure event
    alpha=4.0,  # 4 → 16 handles: all 6 pages are reclaimed, and 12 Releases follow
    initial_interval_s=0.2,
    min_interval_s=0.2,
    max_interval_s=0.2,
)


def _reclaimed(tmp_path: Path, restore_timeout: float = 5.0) -> tuple[Harness, _Reclaiming]:
    """A harness whose GPU 0 had all 6 pages reclaimed, online now using none."""
    h = Harness(tmp_path, memory_config=RESTORE_MEMORY, restore_timeout_s=restore_timeout)
    h.start()
    s = _Reclaiming(h)
    gate = s.pressure()
    s.off.send(p.GateAck(gate_seq=gate.gate_seq, enabled=False, ok=True))
    rec = s.off.expect(p.Reclaim)
    assert rec.handles == tuple(PAGE + i * MIB2 for i in (2, 3, 4, 5, 0, 1))  # cheapest first
    assert s.silent(s.off, 0.5) == []  # nothing is restored before the RECLAIM_ACK
    s.off.send(p.ReclaimAck(reclaim_seq=rec.reclaim_seq, gpu=0, released=6))
    assert s.off.expect(p.Gate).enable
    for _ in range(6):
        s.hook.expect(p.InvalidateBlocks)
    assert [q.handle for q in h.agent.quarantine[0]] == list(rec.handles)
    s.on.send(p.OnlineMemory(gpu=0, kv_used_bytes=0, kv_reserved_bytes=64 * MIB2))
    return h, s


def _samples(h: Harness) -> dict[tuple[str, str | None], float]:
    return {
        (smp.name, smp.labels.get("gpu")): smp.value
        for fam in text_string_to_metric_families(
            generate_latest(build_registry(lambda: h.agent)).decode()
        )
        for smp in fam.samples
    }


def test_released_headroom_restores_the_oldest_page_to_the_process_that_holds_it(
    tmp_path: Path,
) -> None:
    h, s = _reclaimed(tmp_path)
    try:
        first = s.off.expect(p.Restore)
        assert first.gpu == 0 and first.handles == (PAGE + 2 * MIB2,)
        # One restore at a time: nothing more while the first is unacknowledged.
        assert [m for m in s.silent(s.off, 0.5) if isinstance(m, p.Restore)] == []
        s.off.send(p.RestoreAck(restore_seq=first.restore_seq, gpu=0, restored=1))
        second = s.off.expect(p.Restore)
        assert second.handles == (PAGE + 3 * MIB2,) and second.restore_seq != first.restore_seq
        s.off.send(
            p.RestoreAck(restore_seq=second.restore_seq, gpu=0, restored=0, ok=False, err=12)
        )
        retry = s.off.expect(p.Restore)  # out of memory: the same page, at a later Release
        assert retry.handles == second.handles
        s.off.send(p.RestoreAck(restore_seq=retry.restore_seq, gpu=0, restored=1))
        third = s.off.expect(p.Restore)
        assert third.handles == (PAGE + 4 * MIB2,)
        left = [PAGE + i * MIB2 for i in (4, 5, 0, 1)]
        wait_for(lambda: [q.handle for q in h.agent.quarantine[0]] == left)
        assert h.server.restores_done == 2 and h.server.restores_failed == 1
        m = _samples(h)
        assert m[("gleaner_memory_restore_events_total", "0")] == 2
        assert m[("gleaner_memory_restored_bytes_total", "0")] == 2 * MIB2
        assert m[("gleaner_memory_restore_failures_total", "0")] == 1
        assert m[("gleaner_memory_quarantined_bytes", "0")] == 4 * MIB2
        assert m[("gleaner_memory_reclaimed_bytes_total", "0")] == 6 * MIB2
        assert s.silent(s.hook, 0.2) == []  # restores invalidate nothing
        s.close()
    finally:
        h.stop()


def test_enoent_forgets_the_page_and_a_silent_process_is_retried(tmp_path: Path) -> None:
    h, s = _reclaimed(tmp_path, restore_timeout=0.3)
    try:
        first = s.off.expect(p.Restore)
        s.off.send(p.RestoreAck(restore_seq=first.restore_seq, gpu=0, restored=0, ok=False, err=2))
        second = s.off.expect(p.Restore)
        assert second.handles == (PAGE + 3 * MIB2,)  # page 2 is not quarantined there: gone
        # No ack: after the timeout the restore failed, the page is still quarantined.
        again = s.off.expect(p.Restore)
        assert again.handles == second.handles and again.restore_seq > second.restore_seq
        s.off.send(p.RestoreAck(restore_seq=second.restore_seq, gpu=0, restored=1))  # too late
        s.off.send(p.RestoreAck(restore_seq=again.restore_seq, gpu=0, restored=1))
        wait_for(lambda: PAGE + 3 * MIB2 not in {q.handle for q in h.agent.quarantine[0]})
        assert PAGE + 2 * MIB2 not in {q.handle for q in h.agent.quarantine[0]}
        tot = h.agent.restores[0]
        assert tot.events >= 1 and tot.failures == 2 and tot.restored_bytes == tot.events * MIB2
        s.close()
    finally:
        h.stop()


def test_an_offline_process_that_goes_away_takes_its_quarantined_pages(tmp_path: Path) -> None:
    h, s = _reclaimed(tmp_path)
    try:
        s.off.expect(p.Restore)  # under way when the process goes
        s.off.close()
        wait_for(lambda: h.agent.quarantine[0] == [])
        assert h.agent.restores[0].events == 0
        m = _samples(h)
        assert m[("gleaner_memory_quarantined_bytes", "0")] == 0
        # A new offline process of the same job is not sent the old process's pages.
        off2 = _offline(h)
        off2.expect(p.HelloAck)
        assert [m for m in s.silent(off2, 0.6) if isinstance(m, p.Restore)] == []
        off2.close()
        s.close()
    finally:
        h.stop()


# -- OFFLINE_PAGE_GROUPS: the same table, and quarantined pages taken back after a restart ----


def _groups_frame(gpu: int = 0, reset: bool = True) -> p.OfflinePageGroups:
    """The pages of :func:`_handles_frame` as groups: pages 0 and 1 hold the same request."""
    shared = p.GroupSpan("req-a", 100, (0, 1, 2, 3))
    groups = (
        p.PageGroup(MIB2, (PAGE, PAGE + MIB2), (shared,)),
        p.PageGroup(MIB2, (PAGE + 2 * MIB2,), (p.GroupSpan("req-b", 1, (4, 5)),)),
        p.PageGroup(MIB2, (PAGE + 3 * MIB2,)),  # empty
    )
    return p.OfflinePageGroups(gpu=gpu, groups=groups, reset=reset)


def _hook(h: Harness, pid: int = 100) -> Client:
    hook = Client(h.server.path)
    hook.send(p.Hello(pid=pid, role=p.Role.FRAMEWORK, job="team/llm", gpu_indices=(0,)))
    assert hook.expect(p.HelloAck).accepted
    return hook


def _sync(c: Client) -> None:
    """Every frame ``c`` sent before has been handled."""
    c.send(p.Heartbeat(mono_ns=1))
    c.expect(p.Heartbeat)


def test_page_groups_build_the_page_table_and_records_add_up(harness: Harness) -> None:
    hook = _hook(harness)
    hook.send(_groups_frame())
    # A second record for page 1 (no RESET): its spans add to the first record's.
    extra = p.PageGroup(MIB2, (PAGE + MIB2,), (p.GroupSpan("req-c", 7, (9,)),))
    hook.send(p.OfflinePageGroups(gpu=0, groups=(extra,), reset=False))
    _sync(hook)
    table = harness.server.offline_handle_map(0)
    assert {h: [(s.request, s.blocks, s.tokens) for s in spans] for h, spans in table.items()} == {
        PAGE: [("req-a", (0, 1, 2, 3), 100)],
        PAGE + MIB2: [("req-a", (0, 1, 2, 3), 100), ("req-c", (9,), 7)],
        PAGE + 2 * MIB2: [("req-b", (4, 5), 1)],
        PAGE + 3 * MIB2: [],
    }
    # A RESET replaces the whole table.
    only = p.PageGroup(MIB2, (PAGE + 5 * MIB2,))
    hook.send(p.OfflinePageGroups(gpu=0, groups=(only,)))
    _sync(hook)
    assert list(harness.server.offline_handle_map(0)) == [PAGE + 5 * MIB2]
    assert harness.agent.quarantine[0] == []
    hook.close()


RELEASING = MemoryConfig(
    initial_handles=12,
    min_handles=4,
    initial_interval_s=0.2,
    min_interval_s=0.2,
    max_interval_s=0.2,
)


def _quarantined_report(pages: tuple[int, ...], reset: bool = True) -> p.OfflinePageGroups:
    held = p.PageGroup(MIB2, pages, quarantined=True)
    live = p.PageGroup(MIB2, (PAGE,), (p.GroupSpan("req-a", 10, (0,)),))
    return p.OfflinePageGroups(gpu=0, groups=(live, held), reset=reset)


@pytest.mark.parametrize("hook_first", [True, False], ids=["hook-first", "shim-first"])
def test_quarantined_pages_reported_after_a_restart_are_restored_to_their_process(
    tmp_path: Path, hook_first: bool
) -> None:
    """A fresh agent (restarted) learns from the hook's first report which pages the offline
    process of the same pid holds quarantined, whichever of the two connects first."""
    h = Harness(tmp_path, memory_config=RELEASING)
    h.start()
    try:
        pages = (PAGE + 4 * MIB2, PAGE + 5 * MIB2)
        stranger = Client(h.server.path)  # another job's process with another pid
        stranger.send(p.Hello(pid=999, role=p.Role.OFFLINE, gpu_indices=(0,), job="x/y"))
        if hook_first:
            hook = _hook(h)
            hook.send(_quarantined_report(pages))
            _sync(hook)
            assert h.agent.quarantine[0] == []  # no holder connected yet: nothing to restore
            off = _offline(h)
        else:
            off = _offline(h)
            off.expect(p.HelloAck)
            hook = _hook(h)
            hook.send(_quarantined_report(pages))
        wait_for(lambda: [q.handle for q in h.agent.quarantine[0]] == list(pages))
        source = next(
            q.source
            for q in h.server.processes.values()
            if q.hello and q.hello.pid == 100 and q.offline
        )
        assert {q.owner for q in h.agent.quarantine[0]} == {source}
        assert list(h.server.offline_handle_map(0)) == [PAGE]  # quarantined: not reclaimable
        # Online uses nothing: Releases follow, each restores the oldest page to its holder.
        restore = off.expect(p.Restore, timeout=5)
        assert restore.handles == (pages[0],)
        off.send(p.RestoreAck(restore_seq=restore.restore_seq, gpu=0, restored=1))
        restore = off.expect(p.Restore, timeout=5)
        assert restore.handles == (pages[1],)
        off.send(p.RestoreAck(restore_seq=restore.restore_seq, gpu=0, restored=1))
        wait_for(lambda: h.agent.quarantine[0] == [])
        assert h.agent.restores[0].events == 2
        assert h.agent.restores[0].restored_bytes == 2 * MIB2
        assert not any(isinstance(m, p.Restore) for m in stranger.inbox)
        # Later reports are not adopted: pages reclaimed from now on are the agent's own
        # to know, and a report racing a restore must not bring a restored page back.
        hook.send(_quarantined_report(pages))
        _sync(hook)
        assert h.agent.quarantine[0] == []
        for c in (hook, off, stranger):
            c.close()
    finally:
        h.stop()


def test_a_reconnecting_offline_process_gets_its_quarantined_pages_back(tmp_path: Path) -> None:
    h = Harness(tmp_path, memory_config=RESTORE_MEMORY)  # no Release: nothing is restored
    h.start()
    try:
        off = _offline(h)
        off.expect(p.HelloAck)
        hook = _hook(h)
        pages = (PAGE + 4 * MIB2,)
        hook.send(_quarantined_report(pages))
        wait_for(lambda: len(h.agent.quarantine[0]) == 1)
        off.close()  # a socket hiccup: the agent forgets the pages with the connection
        wait_for(lambda: h.agent.quarantine[0] == [])
        off2 = _offline(h)  # the same process (pid) again
        off2.expect(p.HelloAck)
        wait_for(lambda: len(h.agent.quarantine[0]) == 1)
        owner = h.agent.quarantine[0][0].owner
        assert owner == next(
            q.source for q in h.server.processes.values() if q.offline and q.hello is not None
        )
        assert h.agent.quarantine[0][0].handle == pages[0]
        hook.close()
        off2.close()
    finally:
        h.stop()
