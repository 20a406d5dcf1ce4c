"""The native gate path (docs/shim.md, "The native gate path"): the agent's shared-memory
segment, an online busy edge in it, and the offline shim's watch thread closing the gate.

The offline process is the real shim in ``rm_client`` over the fake RM; the segment is
created by the test (:class:`GateSegment`, the agent's own code) next to an
:class:`AgentStub`, or by the real ``AgentDaemon``. An online edge is written the way an
online shim writes it (:meth:`GateSegment.online_edge`), and the online shim itself is
checked to bump the segment. No waits on the scheduler's timing: every check polls for the
expected state with a generous timeout, and "did not happen" checks use a short window
that can only produce false passes, never false failures.
"""

from __future__ import annotations

import contextlib
import ctypes
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gleaner.protocol import node as pn
from gleaner.protocol import wire as p
from gleaner.runtime_agent import fastgate as fg
from gleaner.runtime_agent.daemon import AgentDaemon
from gleaner.runtime_agent.gatelib import GateLoop
from gleaner.runtime_agent.policy import GateConfig, InstrumentationConfig
from gleaner.testing.shim import (
    FAKE_GPU_UUID,
    SHIM_DIR,
    AgentStub,
    ShimProcess,
    running_agent,
    wait_until,
)

GPU = 3  # rm_client's GLEANER_GPU_INDICES


def _setup(sp: ShimProcess) -> int:
    """libcuda-like RM objects; the channel group's handle."""
    sp.cmd("open")
    sp.cmd("client")
    sp.cmd(f"device {GPU}")
    tsg = int(sp.cmd("tsg")["handle"], 16)
    sp.cmd("chan c86f")
    return tsg


def _offline(tmp: Path, sock_path: Path, env: dict[str, str] | None = None) -> ShimProcess:
    """An offline shim that logs when its watch thread starts watching the segment."""
    return ShimProcess(
        tmp,
        role="offline",
        socket_path=sock_path,
        extra_env={pn.ENV_SHIM_LOG: "debug", **(env or {})},
    )


def _watching(sp: ShimProcess) -> None:
    """Wait until the offline shim's watch thread has mapped the segment and read its
    busy counters (an edge written before that would not count as new)."""
    assert wait_until(lambda: "watching the shared-memory gate" in sp.stderr(), timeout=10), (
        sp.stderr()
    )


def _launched(sp: ShimProcess, agent: AgentStub) -> int:
    """Set up, connected, one launch run (the agent said open), the segment watched; the
    channel group's handle."""
    tsg = _setup(sp)
    agent.wait_for(p.Hello)
    assert sp.cmd("launch 1")["rc"] == "0"
    _watching(sp)
    return tsg


def _held(
    sp: ShimProcess, seconds: float, why: str = "offline work ran with the gate closed"
) -> None:
    """A launch sent now does not return within ``seconds`` (a window that can only pass
    falsely, never fail falsely); its reply is the caller's to read once the gate opens."""
    sp.send("launch 1")
    assert sp.no_reply_within(seconds), why


def _disables(sp: ShimProcess) -> list[dict[str, str]]:
    return [c for c in sp.rm_calls("control") if c.get("enable") == "0"]


class Beating:
    """The agent's heartbeat, from a thread (every 50 ms) until :meth:`stop`."""

    def __init__(self, seg: fg.GateSegment) -> None:
        self.seg = seg
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.seg.beat()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@contextlib.contextmanager
def _segment(sock_path: Path, *, stale_s: float = 1.0) -> Iterator[tuple[fg.GateSegment, Beating]]:
    """A filled segment with a heartbeat, retired on exit."""
    gpus = [(0, "GPU-other"), (GPU, FAKE_GPU_UUID)]
    seg = fg.GateSegment.create(fg.segment_path(sock_path.parent), gpus, stale_s=stale_s)
    beating = Beating(seg)
    try:
        yield seg, beating
    finally:
        beating.stop()
        seg.retire()


@contextlib.contextmanager
def _watched(
    tmp: Path, sock_path: Path, agent: AgentStub, *, stale_s: float = 1.0
) -> Iterator[tuple[fg.GateSegment, Beating, ShimProcess]]:
    """A beating segment and an offline shim that runs work and watches it."""
    with _segment(sock_path, stale_s=stale_s) as (seg, beating), _offline(tmp, sock_path) as sp:
        _launched(sp, agent)
        yield seg, beating, sp


def _native_loop(seg: fg.GateSegment, cool_floor_s: float = 0.01) -> contextlib.closing[GateLoop]:
    """A native gate loop on ``seg``, closed on exit."""
    return contextlib.closing(GateLoop(seg.address, GateConfig(cool_floor_s=cool_floor_s).native()))


def _status(agent: AgentStub, words: str, after: int = 0, timeout: float = 10.0) -> p.Status:
    return agent.wait_for(p.Status, lambda s: words in s.reason, timeout=timeout, after=after)


def test_the_python_layout_is_the_c_layout(tmp_path: Path) -> None:
    fields = ["magic", "version", "nslots", "agent_pid", "wake", "loop_state", "heartbeat_ns"]
    fields += ["stale_ns", "loop_beat_ns", "edge_head", "edge_tail", "slot", "open_at_ns"]
    fields += ["source", "edge"]
    slot = ["uuid", "index", "busy_seq", "open_seq", "open_gen"]
    edge = ["commit", "kind", "source", "mask", "t_ns", "request", "gap_ns"]
    source = ["state", "mask"]
    lines = ['#include "gleaner_fastgate.h"', "#include <stddef.h>", "#include <stdio.h>"]
    lines += ["int main(void) {", '  printf("size %zu\\n", sizeof(gl_fg_segment));']
    lines += [f'  printf("{f} %zu\\n", offsetof(gl_fg_segment, {f}));' for f in fields]
    lines += [f'  printf("slot.{f} %zu\\n", offsetof(gl_fg_slot, {f}));' for f in slot]
    lines += [f'  printf("edge.{f} %zu\\n", offsetof(gl_fg_edge, {f}));' for f in edge]
    lines += [f'  printf("source.{f} %zu\\n", offsetof(gl_fg_source, {f}));' for f in source]
    lines += ['  printf("sources %u\\n", GL_FG_SOURCES);']
    lines += ['  printf("version_value %u\\n", GL_FG_VERSION);']
    lines += ['  printf("ring %u\\n", GL_FG_RING);']
    lines += ['  printf("magic_value %u\\n", GL_FG_MAGIC);', "  return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    inc = SHIM_DIR / "include"
    subprocess.run(["gcc", "-std=gnu11", f"-I{inc}", "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    c = {k: int(v) for k, v in (line.split() for line in out.splitlines())}
    assert c["size"] == fg.SIZE == ctypes.sizeof(fg.SegmentLayout)
    for f in fields:
        assert c[f] == getattr(fg.SegmentLayout, f).offset, f
    for f in slot:
        assert c[f"slot.{f}"] == getattr(fg.Slot, f).offset, f
    for f in edge:
        assert c[f"edge.{f}"] == getattr(fg.Edge, f).offset, f
    for f in source:
        assert c[f"source.{f}"] == getattr(fg.Source, f).offset, f
    assert c["sources"] == fg.SOURCES
    assert (c["magic_value"], c["version_value"], c["ring"]) == (fg.MAGIC, fg.VERSION, fg.RING)


def test_an_online_edge_in_shared_memory_closes_the_offline_gate_without_the_agent(
    tmp_path: Path, sock_path: Path, agent: AgentStub
) -> None:
    with (
        _segment(sock_path) as (seg, _),
        _offline(tmp_path, sock_path) as sp,
    ):
        tsg = _launched(sp, agent)
        seg.online_edge(GPU)  # the agent sends nothing
        assert wait_until(lambda: bool(_disables(sp)), timeout=10), "no native close"
        ctl = _disables(sp)[-1]
        assert ctl["cmd"] == "0xa06c0101" and int(ctl["object"], 16) == tsg
        assert not agent.all_of(p.Gate)
        _held(sp, 0.3, "offline work ran after the online edge")
        # An enable decided before the agent saw that edge is refused ...
        agent.send(p.Gate(gate_seq=1, gpu=p.GPU_ALL, enable=True))
        ack = agent.wait_for(p.GateAck, lambda a: a.gate_seq == 1, timeout=10)
        assert ack.ok and not ack.enabled
        assert sp.no_reply_within(0.2)
        # ... one made after it (open_seq = busy_seq) opens the gate.
        seg.allow(GPU)
        agent.send(p.Gate(gate_seq=2, gpu=p.GPU_ALL, enable=True))
        ack = agent.wait_for(p.GateAck, lambda a: a.gate_seq == 2, timeout=10)
        assert ack.ok and ack.enabled
        assert sp.reply(timeout=10)["rc"] == "0"


def test_an_edge_on_another_gpu_leaves_the_gate_open(
    tmp_path: Path, sock_path: Path, agent: AgentStub
) -> None:
    with _watched(tmp_path, sock_path, agent) as (seg, _, sp):
        seg.online_edge(0)
        time.sleep(0.2)
        assert sp.cmd("launch 1")["rc"] == "0"
        assert not _disables(sp)
        seg.online_edge(GPU)
        assert wait_until(lambda: bool(_disables(sp)), timeout=10)


def test_a_stale_heartbeat_closes_the_gate_and_says_why(
    tmp_path: Path, sock_path: Path, agent: AgentStub
) -> None:
    with _watched(tmp_path, sock_path, agent, stale_s=0.5) as (seg, beating, sp):
        mark = agent.mark()
        beating.stop()  # the agent stalls
        seg.set_heartbeat_ns(time.monotonic_ns() - 5_000_000_000)
        st = _status(agent, "heartbeat in shared memory stale", after=mark)
        assert st.code == p.StatusCode.NO_AGENT
        assert wait_until(lambda: bool(_disables(sp)), timeout=10)
        _held(sp, 0.3)
        # Beating again: the shim says so (STATUS) and opens at the agent's next enable.
        mark = agent.mark()
        again = Beating(seg)
        try:
            _status(agent, "live again", after=mark)
            agent.send(p.Gate(gate_seq=9, gpu=p.GPU_ALL, enable=True))
            assert agent.wait_for(p.GateAck, lambda a: a.gate_seq == 9, timeout=10).enabled
            assert sp.reply(timeout=10)["rc"] == "0"
        finally:
            again.stop()


def test_a_retired_segment_closes_the_gate(
    tmp_path: Path, sock_path: Path, agent: AgentStub
) -> None:
    with _watched(tmp_path, sock_path, agent) as (seg, beating, sp):
        mark = agent.mark()
        beating.stop()
        seg.retire()  # as the agent does when it stops
        _status(agent, "retired", after=mark)
        assert wait_until(lambda: bool(_disables(sp)), timeout=10)
        _held(sp, 0.3)


def test_a_watch_thread_that_stops_fails_closed_for_good(
    tmp_path: Path, sock_path: Path, agent: AgentStub
) -> None:
    env = {pn.ENV_SHIM_FAULT: pn.SHIM_FAULT_GATE_WATCH_EXIT}
    with (
        _segment(sock_path) as (seg, _),
        _offline(tmp_path, sock_path, env) as sp,
    ):
        _setup(sp)
        st = _status(agent, "native gate watch stopped")
        assert st.code == p.StatusCode.NO_AGENT
        seg.allow(GPU)
        agent.send(p.Gate(gate_seq=5, gpu=p.GPU_ALL, enable=True))
        ack = agent.wait_for(p.GateAck, lambda a: a.gate_seq == 5, timeout=10)
        assert not ack.enabled
        _held(sp, 0.3, "work ran without the watch thread")


def test_the_online_shim_bumps_the_segment(
    tmp_path: Path, sock_path: Path, agent: AgentStub
) -> None:
    env = {"GLEANER_FAKE_KERNEL_US": "2000"}
    with (
        _segment(sock_path) as (seg, _),
        ShimProcess(tmp_path, role="online", socket_path=sock_path, extra_env=env) as sp,
    ):
        sp.cmd("open")
        agent.wait_for(p.Hello)  # connected: the busy frame is not dropped
        before = (seg.busy_seq(0), seg.busy_seq(GPU))
        sp.cmd("launch 1")
        agent.wait_for(p.OnlineBusy)
        assert seg.busy_seq(GPU) == before[1] + 1  # bumped before the frame went
        assert seg.busy_seq(0) == before[0]  # its UUID names one GPU
        # The edges go into the ring too, for the native gate loop, once the shim has its
        # source id (HELLO_ACK, which the first launch may precede): busy, then idle.
        head = _launch_until_ringed(sp, agent, seg)
        busy, idle = seg.edge(head - 2), seg.edge(head - 1)
        assert (busy.commit, busy.kind, busy.mask, busy.request) == (head - 1, fg.EDGE_BUSY, 2, 0)
        assert busy.source == 1 and busy.t_ns > 0  # the connection's id (HELLO_ACK)
        assert (idle.commit, idle.kind, idle.mask, idle.source) == (head, fg.EDGE_IDLE, 2, 1)
        assert idle.t_ns >= busy.t_ns


def _launch_until_ringed(sp: ShimProcess, agent: AgentStub, seg: fg.GateSegment) -> int:
    """Launch (one busy period each) until the online shim's edges are in the ring; the
    ring's head then."""
    for _ in range(50):
        mark = agent.mark()
        sp.cmd("launch 1")
        agent.wait_for(p.OnlineIdle, after=mark, timeout=10)
        # The idle frame may reach the agent before the idle edge is committed to the ring
        # (a loaded machine can stall the shim between the two): wait for the entry itself.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            head = int(seg._view.edge_head)
            if head >= 2:
                last = seg.edge(head - 1)
                if last.commit == head and last.kind == fg.EDGE_IDLE:
                    return head
            time.sleep(0.01)
        time.sleep(0.05)
    raise AssertionError("the online shim never wrote its edges into the ring")


@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_a_native_gate_loop_that_dies_or_stops_closes_the_gate_and_says_why(
    tmp_path: Path, sock_path: Path, agent: AgentStub, how: str
) -> None:
    with (
        _segment(sock_path, stale_s=0.5) as (seg, _),
        _offline(tmp_path, sock_path) as sp,
        _native_loop(seg) as loop,
    ):
        _launched(sp, agent)
        mark = agent.mark()
        if how == "killed":
            loop.test_kill()  # dies without a word: only its beat stops
            words = "native gate loop heartbeat in shared memory stale"
        else:
            loop.stop()
            words = "native gate loop stopped"
        st = _status(agent, words, after=mark)
        assert st.code == p.StatusCode.NO_AGENT
        assert wait_until(lambda: bool(_disables(sp)), timeout=10)
        _held(sp, 0.3, "work ran without the native gate loop")


def test_without_a_segment_the_socket_path_alone_gates(
    tmp_path: Path, sock_path: Path, agent: AgentStub
) -> None:
    with _offline(tmp_path, sock_path) as sp:
        _setup(sp)
        agent.wait_for(p.Hello)
        assert sp.cmd("launch 1")["rc"] == "0"
        agent.send(p.Gate(gate_seq=1, gpu=p.GPU_ALL, enable=False))
        assert wait_until(lambda: bool(_disables(sp)), timeout=10)
        agent.send(p.Gate(gate_seq=2, gpu=p.GPU_ALL, enable=True))
        assert agent.wait_for(p.GateAck, lambda a: a.gate_seq == 2, timeout=10).enabled


@pytest.fixture
def daemon(sock_path: Path) -> Iterator[AgentDaemon]:
    """The agent on the socket path (no native gate loop): these tests pin how its own gates,
    fed by per-edge frames, use the segment (the loop's tests ask for it)."""
    guard = InstrumentationConfig(enforce=False)
    with running_agent(sock_path, node="fg-node", instrumentation=guard, gate_loop=False) as d:
        assert wait_until(lambda: all(d.health()["gates"].values()))
        yield d


def test_with_the_real_agent_the_native_close_precedes_its_gate_and_the_policy_reopens(
    tmp_path: Path, sock_path: Path, daemon: AgentDaemon
) -> None:
    health = daemon.health()
    assert health["gate_segment"]["path"] == str(fg.segment_path(sock_path.parent))
    seg = fg.GateSegment.open(fg.segment_path(sock_path.parent))
    try:
        with _offline(tmp_path, sock_path) as sp:
            _setup(sp)
            assert wait_until(lambda: daemon.health()["offline_jobs"] == {str(GPU): "team-a/job-1"})
            assert sp.cmd("launch 1")["rc"] == "0"
            _watching(sp)
            seg.online_edge(GPU)  # no socket frame at all: only shared memory
            assert wait_until(lambda: bool(_disables(sp)), timeout=10)
            assert daemon.agent.gates[GPU].enabled, "the agent's policy did not hear of it"
            _held(sp, 0.3)
            # The online shim's frames reach the policy: disable (already off), cooldown,
            # enable with open_seq = busy_seq, and the shim opens.
            online = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            online.connect(str(sock_path))
            try:
                p.send_message(online, p.Hello(pid=7, role=p.Role.ONLINE, gpu_indices=(GPU,)))
                p.send_message(online, p.OnlineBusy(gpu=0, mono_ns=1))
                p.send_message(online, p.OnlineIdle(gpu=0, mono_ns=2))
                assert sp.reply(timeout=10)["rc"] == "0"
                assert seg.open_seq(GPU) == seg.busy_seq(GPU)
            finally:
                online.close()
    finally:
        seg.close()
    assert fg.segment_path(sock_path.parent).exists()


def test_the_real_agent_reports_why_a_shim_holds_work(tmp_path: Path, sock_path: Path) -> None:
    env = {pn.ENV_SHIM_FAULT: pn.SHIM_FAULT_GATE_WATCH_EXIT}
    guard = InstrumentationConfig(enforce=False)
    with (
        running_agent(sock_path, node="fg-node", instrumentation=guard) as d,
        _offline(tmp_path, sock_path, env) as sp,
    ):
        _setup(sp)

        def held() -> list[dict[str, object]]:
            return [
                h
                for h in d.health()["offline_held"]
                if "native gate watch stopped" in str(h["reason"])
            ]

        assert wait_until(lambda: bool(held()), timeout=10), d.health()["offline_held"]
        assert held()[0]["status"] == "no_agent"
        assert held()[0]["job"] == "team-a/job-1"


def test_an_enable_the_agent_decided_before_reading_a_bumped_edges_frame_is_refused(
    tmp_path: Path, sock_path: Path, daemon: AgentDaemon
) -> None:
    # The residual race of an open_seq read from the segment at enable time: an edge bumped
    # while its frame is still unread would be counted, and offline work would run beside
    # it. The agent counts only the bumps up to its latest busy frame.
    seg = fg.GateSegment.open(fg.segment_path(sock_path.parent))
    online = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _offline(tmp_path, sock_path) as sp:
            _setup(sp)
            assert wait_until(lambda: daemon.health()["offline_jobs"] == {str(GPU): "team-a/job-1"})
            assert sp.cmd("launch 1")["rc"] == "0"
            online.connect(str(sock_path))
            p.send_message(online, p.Hello(pid=7, role=p.Role.ONLINE, gpu_indices=(GPU,)))
            seg.online_edge(GPU)  # edge 1: bump, then its frame, as a shim does
            p.send_message(online, p.OnlineBusy(gpu=0, mono_ns=1))
            assert wait_until(lambda: not daemon.agent.gates[GPU].enabled, timeout=10)
            seg.online_edge(GPU)  # edge 2: bumped, its frame not sent yet
            p.send_message(online, p.OnlineIdle(gpu=0, mono_ns=2))  # edge 1 ends
            assert wait_until(lambda: daemon.agent.gates[GPU].enabled, timeout=10)
            _held(sp, 0.5, "offline work ran beside an online edge")
            assert seg.open_seq(GPU) == seg.busy_seq(GPU) - 1
            p.send_message(online, p.OnlineBusy(gpu=0, mono_ns=3))  # edge 2's frame
            p.send_message(online, p.OnlineIdle(gpu=0, mono_ns=4))
            assert sp.reply(timeout=10)["rc"] == "0"
            assert seg.open_seq(GPU) == seg.busy_seq(GPU)
    finally:
        online.close()
        seg.close()


def _enables(sp: ShimProcess) -> list[dict[str, str]]:
    return [c for c in sp.rm_calls("control") if c.get("enable") == "1"]


def test_the_native_gate_loop_reopens_the_offline_gate_without_the_agent(
    tmp_path: Path, sock_path: Path, agent: AgentStub
) -> None:
    """Agent's word once (open), then only shared memory: online edges close and reopen the
    gate through the loop; a loop hold closes it without a busy edge."""
    with (
        _segment(sock_path) as (seg, _),
        _offline(tmp_path, sock_path) as sp,
        _native_loop(seg) as loop,
    ):
        _launched(sp, agent)
        frames = len(agent.all_of(p.GateAck))
        off, on = len(_disables(sp)), len(_enables(sp))
        for i in range(1, 4):
            seg.online_edge(GPU)
            assert wait_until(lambda: len(_disables(sp)) == off + i, timeout=10)  # noqa: B023
            _held(sp, 0.2, "work ran while online was busy")
            seg.online_idle(GPU)
            assert sp.reply(timeout=10)["rc"] == "0"  # reopened by the loop's word
            assert wait_until(lambda: len(_enables(sp)) == on + i, timeout=10)  # noqa: B023
        assert len(agent.all_of(p.GateAck)) == frames, "the agent was asked"
        loop.hold(1, True)  # slot 1: GPU 3
        assert wait_until(lambda: len(_disables(sp)) == off + 4, timeout=10)
        _held(sp, 0.2, "work ran while the loop held the gate")
        loop.hold(1, False)
        assert sp.reply(timeout=10)["rc"] == "0"


def test_with_a_native_gate_loop_the_online_shim_sends_edges_only_through_the_segment(
    tmp_path: Path, sock_path: Path, agent: AgentStub
) -> None:
    env = {"GLEANER_FAKE_KERNEL_US": "2000"}
    with (
        _segment(sock_path) as (seg, _),
        ShimProcess(tmp_path, role="online", socket_path=sock_path, extra_env=env) as sp,
        _native_loop(seg) as loop,
    ):
        sp.cmd("open")
        agent.wait_for(p.Hello)
        time.sleep(1.2)  # the online shim looks for the segment at most once a second
        sp.cmd("launch 1")  # maps the segment on this edge
        assert wait_until(lambda: loop.stats(1)[0].edges >= 2, timeout=10)  # busy, idle
        assert wait_until(lambda: not loop.stats(1)[1].busy, timeout=10)
        frames = len(agent.all_of(p.OnlineBusy)) + len(agent.all_of(p.OnlineIdle))
        edges = loop.stats(1)[0].edges
        sp.cmd("launch 1")
        assert wait_until(lambda: loop.stats(1)[0].edges >= edges + 2, timeout=10)
        assert wait_until(lambda: not loop.stats(1)[1].busy, timeout=10)
        assert loop.stats(1)[1].gpu == GPU
        time.sleep(0.2)  # a frame that would come has come by now (false passes only)
        assert len(agent.all_of(p.OnlineBusy)) + len(agent.all_of(p.OnlineIdle)) == frames
        # The loop gone, frames come again (the agent's socket path decides).
        loop.stop()
        sp.cmd("launch 1")
        agent.wait_for(p.OnlineBusy, timeout=10, after=0)
        assert wait_until(
            lambda: len(agent.all_of(p.OnlineBusy)) + len(agent.all_of(p.OnlineIdle)) > frames,
            timeout=10,
        )


def test_the_real_agent_with_a_native_gate_loop_gates_without_frames_and_accounts(
    tmp_path: Path, sock_path: Path
) -> None:
    """``gleaner agent --native-gate-loop``: online edges only in shared memory; the offline
    shim closes and reopens at the loop's word, the agent sends no GATE for them, and its
    accounting (read from the loop in batches) has the busy time and the preemptions."""
    guard = InstrumentationConfig(enforce=False)
    with running_agent(sock_path, node="fg-loop", instrumentation=guard, gate_loop=True) as d:
        assert wait_until(lambda: (d.health()["gate_loop"] or {}).get("running") is True)
        seg = fg.GateSegment.open(fg.segment_path(sock_path.parent))
        try:
            with _offline(tmp_path, sock_path) as sp:
                _setup(sp)
                assert sp.cmd("launch 1", timeout=10)["rc"] == "0"  # the agent's enable
                _watching(sp)
                commands = d.agent.gate_commands
                off = len(_disables(sp))
                for i in range(1, 4):
                    seg.online_edge(GPU, source=99)
                    assert wait_until(lambda: len(_disables(sp)) == off + i, timeout=10)  # noqa: B023
                    _held(sp, 0.1, "work ran while online was busy")
                    time.sleep(0.05)
                    seg.online_idle(GPU, source=99)
                    assert sp.reply(timeout=10)["rc"] == "0"
                assert d.agent.gate_commands == commands, "the agent's event loop gated"
                assert wait_until(lambda: d.health()["gate_loop"]["edges"] >= 6, timeout=10)
                # Accounting: drained every beat, replayed into the agent's totals.
                assert wait_until(
                    lambda: d.agent.accounting.snapshot().gpus[GPU].preemptions == 3, timeout=10
                )
                totals = d.agent.accounting.snapshot().gpus[GPU]
                assert totals.online_busy_s >= 3 * 0.05
                assert totals.offline_enabled_s > 0
        finally:
            seg.close()


def test_the_real_agent_with_a_native_gate_loop_fails_closed_and_says_why(
    tmp_path: Path, sock_path: Path
) -> None:
    """An online connection that goes away busy ends its busy period and frees its busy word
    (the gate reopens); a loop that dies closes the offline gate, and the agent says why in
    /healthz."""
    guard = InstrumentationConfig(enforce=False)
    with running_agent(sock_path, node="fg-loop2", instrumentation=guard, gate_loop=True) as d:
        assert wait_until(lambda: (d.health()["gate_loop"] or {}).get("running") is True)
        seg = fg.GateSegment.open(fg.segment_path(sock_path.parent))
        online = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with _offline(tmp_path, sock_path) as sp:
                _setup(sp)
                assert sp.cmd("launch 1", timeout=10)["rc"] == "0"
                _watching(sp)
                online.connect(str(sock_path))
                p.send_message(online, p.Hello(pid=7, role=p.Role.ONLINE, gpu_indices=(GPU,)))
                online.settimeout(10)
                got = p.recv_messages(online, p.FrameDecoder()) or []
                ack = next(m for m in got if isinstance(m, p.HelloAck))
                assert ack.source_id > 0
                off = len(_disables(sp))
                seg.set_busy_word(ack.source_id, GPU)  # as the online shim does, then the edge
                seg.online_edge(GPU, source=ack.source_id)
                assert wait_until(lambda: len(_disables(sp)) == off + 1, timeout=10)
                _held(sp, 0.2, "work ran while online was busy")
                online.close()  # gone while busy: no idle edge ever comes, its word stays set
                assert sp.reply(timeout=10)["rc"] == "0"  # the agent dropped it, word and all
                assert seg.busy_word(ack.source_id) is None
                # The loop dies: the shim closes on its stale beat, the agent says why.
                assert d.server is not None and d.server.loop is not None
                d.server.loop.test_kill()
                assert wait_until(lambda: len(_disables(sp)) == off + 2, timeout=10)
                _held(sp, 0.3, "work ran without the native gate loop")
                assert wait_until(
                    lambda: "native gate loop heartbeat" in str(d.health()["offline_held"]),
                    timeout=10,
                )
                health = d.health()["gate_loop"]
                assert health["running"] is False and "stopped" in health["error"]
        finally:
            online.close()
            seg.close()


def test_a_busy_edge_lost_from_the_ring_keeps_the_offline_gate_closed_until_idle(
    tmp_path: Path, sock_path: Path, agent: AgentStub
) -> None:
    """The real online shim's busy edge loses its ring entry (a ticket never filled, as a
    writer that died mid-entry): the loop counts it lost and holds every gate for a second,
    and after that hold the offline shim still stays closed, by the online connection's busy
    word, until the online kernel ends (its idle edge)."""
    kernel_s = 6.0  # long enough to outlast the lost-entry hold on a loaded machine
    for d in ("off", "on"):
        (tmp_path / d).mkdir()
    env = {
        "GLEANER_FAKE_KERNEL_US": str(int(kernel_s * 1e6)),
        pn.ENV_SHIM_FAULT: pn.SHIM_FAULT_RING_LOSE_BUSY,
    }
    with (
        _segment(sock_path) as (seg, _),
        _offline(tmp_path / "off", sock_path) as off,
        ShimProcess(tmp_path / "on", role="online", socket_path=sock_path, extra_env=env) as on,
        _native_loop(seg) as loop,
    ):
        _launched(off, agent)
        on.cmd("open")
        agent.wait_for(p.Hello, lambda h: h.role == p.Role.ONLINE)
        time.sleep(1.2)  # the online shim looks for the segment at most once a second
        closes = len(_disables(off))
        started = time.monotonic()
        on.cmd("launch 1")  # busy for kernel_s; its ring entry is lost
        assert wait_until(lambda: loop.stats(1)[0].lost_edges >= 1, timeout=10)
        assert wait_until(lambda: len(_disables(off)) > closes, timeout=10)
        _held(off, 2.0, "offline work ran while online was busy")
        assert time.monotonic() - started < kernel_s, "the machine was too slow to tell"
        assert loop.stats(1)[0].busy_from_words >= 1
        assert off.reply(timeout=kernel_s + 20)["rc"] == "0"  # after the idle edge
        assert time.monotonic() - started >= kernel_s * 0.9


def test_an_online_edge_the_loop_cannot_read_goes_as_frames_and_leaves_the_gpu_openable(
    tmp_path: Path, sock_path: Path, agent: AgentStub
) -> None:
    """Every busy word taken: the real online shim cannot put its edges in the ring, so
    while a loop runs it neither bumps the segment (the loop would never read a matching
    entry, and the GPU would stay closed for good) nor skips its frames: the agent's gates
    hear them. After the online cycle, the offline gate is open to work again."""
    env = {"GLEANER_FAKE_KERNEL_US": "2000"}
    for d in ("off", "on"):
        (tmp_path / d).mkdir()
    with (
        _segment(sock_path) as (seg, _),
        _offline(tmp_path / "off", sock_path) as off,
        ShimProcess(tmp_path / "on", role="online", socket_path=sock_path, extra_env=env) as on,
    ):
        for source in range(1000, 1000 + fg.SOURCES):  # other connections, idle
            seg.set_busy_word(source, busy=False)
        loop = GateLoop(seg.address, GateConfig(cool_floor_s=0.01).native())
        try:
            _launched(off, agent)
            on.cmd("open")
            agent.wait_for(p.Hello, lambda h: h.role == p.Role.ONLINE)
            time.sleep(1.2)  # the online shim looks for the segment at most once a second
            on.cmd("launch 1")
            agent.wait_for(p.OnlineBusy, timeout=10)
            agent.wait_for(p.OnlineIdle, timeout=10)
            assert off.cmd("launch 1", timeout=10)["rc"] == "0"
            assert seg.open_seq(GPU) == seg.busy_seq(GPU)
            assert loop.stats(1)[0].edges == 0
        finally:
            loop.close()


def test_an_idle_edge_goes_the_way_its_busy_edge_went(tmp_path: Path, sock_path: Path) -> None:
    """A busy edge the online shim sent as a frame only (before its HELLO_ACK: no source id,
    so no ring entry) made the agent's own gate busy: its idle edge goes as a frame too, even
    when the source id arrived meanwhile, not into the ring, which only the loop reads (the
    agent would hold the offline side closed until the connection went away)."""
    env = {"GLEANER_FAKE_KERNEL_US": "400000"}  # the HELLO_ACK comes while the kernel runs
    with (
        AgentStub(sock_path, auto_ack=False) as agent,
        _segment(sock_path) as (seg, _),
        ShimProcess(tmp_path, role="online", socket_path=sock_path, extra_env=env) as sp,
        _native_loop(seg, cool_floor_s=0.05),  # a native gate loop runs
    ):
        sp.cmd("open")
        agent.wait_for(p.Hello)
        head = seg.edges_written
        sp.cmd("launch 1")
        agent.wait_for(p.OnlineBusy)  # a frame: no source id yet
        agent.send(p.HelloAck(gate_open=True, gate_mode=p.GateMode.SHIM, source_id=1))
        agent.wait_for(p.OnlineIdle, timeout=10)  # after the kernel: a frame as well
        assert seg.edges_written == head  # and nothing in the ring for the loop alone
        # The next busy period, with the source id: the ring, and no frames.
        mark = agent.mark()
        sp.cmd("launch 1")

        def kinds() -> list[int]:  # the decode gap before the busy edge aside
            ring = [seg.edge(t).kind for t in range(head, seg.edges_written)]
            return [k for k in ring if k != fg.EDGE_GAP]

        assert wait_until(lambda: fg.EDGE_IDLE in kinds(), timeout=10)
        assert kinds() == [fg.EDGE_BUSY, fg.EDGE_IDLE]
        assert not [m for _, m in agent.messages[mark:] if isinstance(m, p.OnlineIdle)]
