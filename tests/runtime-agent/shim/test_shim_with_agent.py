"""The real shim against the real agent: ``rm_client`` (libcuda-like RM traffic through the
shim and the fake RM) connected to ``AgentDaemon`` with the nvidia backend, no stubs between.

An online client (protocol v1 over the same socket) turns busy: the agent's GATE reaches the
shim, which disables the channel group on libcuda's own fd, and launches wait until the
agent re-enables after the cooldown. When the RM refuses the control, the process stays
held (fail closed) and the agent's /metrics say so (status and ack-failure counters).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gleaner.protocol import wire as p
from gleaner.runtime_agent.daemon import AgentDaemon
from gleaner.runtime_agent.policy import InstrumentationConfig, MemoryConfig
from gleaner.testing.shim import ShimProcess, agent_metrics, running_agent, wait_until

NODE = "shim-node"
GPU = 3  # rm_client's GLEANER_GPU_INDICES; its UUID is unknown to the synthetic inventory
NO_GUARD = InstrumentationConfig(enforce=False)


@pytest.fixture
def daemon(sock_path: Path) -> Iterator[AgentDaemon]:
    # Opted out of the uninstrumented-process guard: these tests close the online client
    # to show that a vanished online process counts as idle, and without NVML the guard
    # would hold the gate until it reconnects (tests/runtime-agent/test_instrumented.py).
    # The memory timer is 10 s away, so a gate that reopens within seconds of an event was
    # reopened by the gate's own timer, not by a memory release (the bound holds under load).
    # The socket path (no native gate loop): these tests drive the agent's gates and count
    # its preemptions with per-edge ONLINE_BUSY/ONLINE_IDLE frames.
    slow_memory = MemoryConfig(initial_interval_s=10.0)
    with running_agent(
        sock_path, node=NODE, instrumentation=NO_GUARD, memory=slow_memory, gate_loop=False
    ) as d:
        assert wait_until(lambda: all(d.health()["gates"].values()))  # one cooldown after start
        yield d


def _setup(sp: ShimProcess) -> dict[str, int]:
    handles = {"fd": int(sp.cmd("open")["fd"])}
    for step, cmd in (("client", "client"), ("device", f"device {GPU}"), ("tsg", "tsg")):
        r = sp.cmd(cmd)
        assert r["status"] == "0"
        handles[step] = int(r["handle"], 16)
    r = sp.cmd("chan c86f")
    handles["chan"] = int(r["handle"], 16)
    return handles


def _registered(d: AgentDaemon, h_object: int) -> bool:
    assert d.server is not None
    return any(h_object == key[1] for q in list(d.server.processes.values()) for key in q.channels)


def _online(sock_path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(sock_path))
    p.send_message(s, p.Hello(pid=7, role=p.Role.ONLINE, gpu_indices=(GPU,)))
    return s


def _hook(sock_path: Path, sp: ShimProcess) -> socket.socket:
    """A framework hook's connection for ``sp``'s process (job team-a/job-1)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(sock_path))
    hello = p.Hello(pid=sp.proc.pid, role=p.Role.FRAMEWORK, job="team-a/job-1", gpu_indices=(GPU,))
    p.send_message(s, hello)
    return s


def _controls(sp: ShimProcess) -> list[dict[str, str]]:
    return sp.rm_calls("control")


def test_online_busy_gates_the_shims_channel_group_and_cooldown_releases_it(
    tmp_path: Path, sock_path: Path, daemon: AgentDaemon
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        h = _setup(sp)
        assert wait_until(lambda: daemon.health()["offline_jobs"] == {str(GPU): "team-a/job-1"})
        assert wait_until(lambda: _registered(daemon, h["tsg"]))
        assert sp.cmd("launch 1")["rc"] == "0"  # the gate is open: work runs
        online = _online(sock_path)
        try:
            p.send_message(online, p.OnlineBusy(gpu=0, mono_ns=1))  # its first (only) GPU
            assert wait_until(lambda: any(c["enable"] == "0" for c in _controls(sp)), timeout=5), (
                "the agent's GATE did not reach the channel group"
            )
            ctl = [c for c in _controls(sp) if c["enable"] == "0"][-1]
            assert ctl["cmd"] == "0xa06c0101" and int(ctl["object"], 16) == h["tsg"]
            assert ctl["fd"] == ctl["owner_fd"] == str(h["fd"])  # libcuda's own fd
            sp.send("launch 1")
            assert sp.no_reply_within(0.3), "offline work ran while online was busy"
            t_idle = time.monotonic()
            p.send_message(online, p.OnlineIdle(gpu=0, mono_ns=2))
            assert sp.reply()["rc"] == "0"  # released after the cooldown
            assert time.monotonic() - t_idle >= 0.04
            assert _controls(sp)[-1]["enable"] == "1"
            # An online process that goes away while busy counts as idle: the cooldown's
            # timer re-enables (not a later, unrelated event).
            p.send_message(online, p.OnlineBusy(gpu=0, mono_ns=3))
            assert wait_until(lambda: _controls(sp)[-1]["enable"] == "0")
            sp.send("launch 1")
            assert sp.no_reply_within(0.2)
            t_gone = time.monotonic()
            online.close()
            assert sp.reply()["rc"] == "0"
            assert time.monotonic() - t_gone < 5.0  # the memory timer (T = 10 s) is later
        finally:
            online.close()
        m = agent_metrics(daemon)
        assert m[("gleaner_preemptions_total", (("gpu", str(GPU)), ("node", NODE)))] == 2
        assert m[("gleaner_gate_ack_failures_total", (("node", NODE),))] == 0
        assert m[("gleaner_agent_connections", (("node", NODE), ("role", "offline")))] == 1


def test_refused_control_keeps_work_held_and_shows_in_the_agentsagent_metrics(
    tmp_path: Path, sock_path: Path, daemon: AgentDaemon
) -> None:
    env = {"GLEANER_FAKE_RM_FAIL_CMDS": "a06c0101,a06f0103"}
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path, extra_env=env) as sp:
        h = _setup(sp)
        assert wait_until(lambda: _registered(daemon, h["chan"]))
        online = _online(sock_path)
        try:
            p.send_message(online, p.OnlineBusy(gpu=0, mono_ns=1))
            assert wait_until(
                lambda: daemon.server is not None and daemon.server.gate_acks_failed > 0
            )
            key = ("gleaner_offline_processes", (("node", NODE), ("status", "control_refused")))
            assert wait_until(lambda: agent_metrics(daemon).get(key) == 1)
            m = agent_metrics(daemon)
            assert m[("gleaner_gate_ack_failures_total", (("node", NODE),))] == 1
            assert m[("gleaner_offline_processes", (("node", NODE), ("status", "ok")))] == 0
            sp.send("launch 1")
            assert sp.no_reply_within(0.3), "a launch ran although the disable was refused"
            assert wait_until(lambda: "held in cuLaunchKernel" in sp.stderr())
        finally:
            online.close()
        # Online gone: the agent re-enables; nothing was disabled, so the shim needs no
        # control to open and the held launch runs.
        assert sp.reply()["rc"] == "0"
        assert wait_until(
            lambda: (
                agent_metrics(daemon).get(
                    ("gleaner_offline_processes", (("node", NODE), ("status", "ok")))
                )
                == 1
            )
        )


PAGE = 2 << 20
BASE = 0x7F0000000000
TOKENS = (100, 100, 1, 1, 1, 1)


def test_reclamation_end_to_end_through_the_real_shim(sock_path: Path) -> None:
    """Online memory pressure → GATE off → RECLAIM → the shim quarantines pages in the fake
    libcuda → RECLAIM_ACK → INVALIDATE_BLOCKS to the job's hook, counted in /metrics."""
    memory = MemoryConfig(initial_handles=4, initial_interval_s=60.0, max_interval_s=60.0)
    tmp = sock_path.parent / "e2e"
    tmp.mkdir()
    agent = running_agent(sock_path, node=NODE, memory=memory)
    with agent as d, ShimProcess(tmp, role="offline", socket_path=sock_path) as sp:
        h = _setup(sp)
        assert wait_until(lambda: _registered(d, h["chan"]))
        assert sp.cmd("vmm-map-rel 6")["rc"] == "0"
        hook = _hook(sock_path, sp)
        entries = tuple(
            p.HandleSpan(BASE + i * PAGE, PAGE, f"req-{i}", tokens=t, block_ids=(i,))
            for i, t in enumerate(TOKENS)
        )
        p.send_message(hook, p.OfflineHandles(gpu=0, entries=entries))
        server = d.server
        assert server is not None
        assert wait_until(lambda: len(server.offline_handle_map(GPU)) == 6)
        assert wait_until(lambda: d.health()["gates"][str(GPU)] is True)
        on = _online(sock_path)
        p.send_message(on, p.OnlineMemory(gpu=p.GPU_ALL, kv_used_bytes=4 * PAGE))
        dec = p.FrameDecoder()
        got: dict[str, tuple[int, ...]] = {}
        deadline = time.monotonic() + 10
        while len(got) < 4 and time.monotonic() < deadline:
            for m in p.recv_messages(hook, dec) or []:
                if isinstance(m, p.InvalidateBlocks):
                    got[m.request_id] = m.block_ids
        assert got == {f"req-{i}": (i,) for i in (2, 3, 4, 5)}  # Algorithm 1's choice
        state = sp.cmd("vmm-state")
        maps = dict(pair.split(":") for pair in state["maps"].split(","))
        quarantine = {maps[hex(BASE + i * PAGE)] for i in (2, 3, 4, 5)}
        assert len(quarantine) == 1 and quarantine.isdisjoint(
            {maps[hex(BASE + i * PAGE)] for i in (0, 1)}
        )
        assert state["live"] == "3"  # pages 0 and 1, and the quarantine allocation
        labels = (("gpu", str(GPU)), ("node", NODE))
        metrics = agent_metrics(d)
        assert metrics[("gleaner_memory_reclaim_events_total", labels)] == 1
        assert metrics[("gleaner_memory_reclaimed_bytes_total", labels)] == 4 * PAGE
        assert metrics[("gleaner_kv_blocks_invalidated_total", labels)] == 4
        # The gate comes back after the reclamation, in the agent and in the shim.
        assert wait_until(lambda: d.health()["gates"][str(GPU)] is True)
        assert sp.cmd("launch 1", timeout=10)["rc"] == "0"
        assert server.reclaims_done == 1 and server.reclaims_failed == 0
        hook.close()
        on.close()


def _vmm_maps(sp: ShimProcess) -> dict[int, str]:
    """Page VA → the fake libcuda allocation mapped there."""
    state = sp.cmd("vmm-state")
    return {int(va, 16): h for va, h in (pair.split(":") for pair in state["maps"].split(","))}


def test_reclaim_then_restore_round_through_the_real_shim(sock_path: Path) -> None:
    """Pressure → RECLAIM (4 pages quarantined in the shim) → online gives its headroom back →
    one RESTORE per Release, oldest page first → fresh allocations mapped in the fake libcuda
    → RESTORE_ACK → /metrics; the hook reports the pages again (empty) and the next pressure
    event takes those, costing no recomputation."""
    tmp = sock_path.parent / "round"
    tmp.mkdir()
    labels = (("gpu", str(GPU)), ("node", NODE))
    pages = [BASE + i * PAGE for i in range(6)]
    with running_agent(
        sock_path,
        node=NODE,
        # No release before the first pressure event (min = initial); then one every 0.3 s.
        memory=MemoryConfig(
            initial_handles=4,
            min_handles=4,
            initial_interval_s=0.3,
            min_interval_s=0.3,
            max_interval_s=0.3,
        ),
        nvml=False,  # free memory unknown: every growth reclaims, every Release restores
    ) as d:
        server = d.server
        assert server is not None
        with ShimProcess(tmp, role="offline", socket_path=sock_path) as sp:
            h = _setup(sp)
            assert wait_until(lambda: _registered(d, h["chan"]))
            assert sp.cmd("vmm-map-rel 6")["rc"] == "0"
            original = _vmm_maps(sp)
            hook = _hook(sock_path, sp)
            entries = tuple(
                p.HandleSpan(va, PAGE, f"req-{i}", tokens=t, block_ids=(i,))
                for i, (va, t) in enumerate(zip(pages, TOKENS, strict=True))
            )
            p.send_message(hook, p.OfflineHandles(gpu=0, entries=entries))
            assert wait_until(lambda: len(server.offline_handle_map(GPU)) == 6)
            assert wait_until(lambda: d.health()["gates"][str(GPU)] is True)
            on = _online(sock_path)
            # 7 of 4 handles: H → 8, 4 reclaimed; at 7 of 8 no Release is due yet.
            p.send_message(on, p.OnlineMemory(gpu=p.GPU_ALL, kv_used_bytes=7 * PAGE))
            taken = [pages[i] for i in (2, 3, 4, 5)]  # Algorithm 1's choice
            assert wait_until(lambda: server.reclaims_done == 1, timeout=10)
            maps = _vmm_maps(sp)
            quarantine = maps[taken[0]]
            assert {maps[va] for va in taken} == {quarantine}
            assert [q.handle for q in d.agent.quarantine[GPU]] == taken
            # Online's KV use falls: the headroom is released a handle at a time, and each
            # Release gives the oldest quarantined page back to the shim that holds it.
            p.send_message(on, p.OnlineMemory(gpu=p.GPU_ALL, kv_used_bytes=0))
            assert wait_until(lambda: server.restores_done == 4, timeout=15), (
                f"restores: {server.restores_done} ok, {server.restores_failed} failed"
            )
            assert server.restores_failed == 0 and d.agent.quarantine[GPU] == []
            maps = _vmm_maps(sp)
            backed = [maps[va] for va in taken]
            assert quarantine not in backed and len(set(backed)) == 4  # fresh allocations
            assert not set(backed) & {original[va] for va in taken}  # the old ones were freed
            assert all(maps[pages[i]] == original[pages[i]] for i in (0, 1))  # untouched
            m = agent_metrics(d)
            assert m[("gleaner_memory_restore_events_total", labels)] == 4
            assert m[("gleaner_memory_restored_bytes_total", labels)] == 4 * PAGE
            assert m[("gleaner_memory_quarantined_bytes", labels)] == 0
            assert m[("gleaner_memory_reclaimed_bytes_total", labels)] == 4 * PAGE
            # The hook reports the restored pages again, empty; the next pressure event takes
            # them first (they cost no recomputation) and the shim quarantines them again.
            empty = tuple(p.HandleSpan(va, PAGE) for va in taken)
            p.send_message(hook, p.OfflineHandles(gpu=0, entries=entries[:2] + empty))
            assert wait_until(lambda: len(server.offline_handle_map(GPU)) == 6)
            assert wait_until(lambda: d.agent.memory[GPU].headroom == 4)
            p.send_message(on, p.OnlineMemory(gpu=p.GPU_ALL, kv_used_bytes=7 * PAGE))
            assert wait_until(lambda: server.reclaims_done == 2, timeout=10)
            maps = _vmm_maps(sp)
            assert {maps[va] for va in taken} == {quarantine}
            assert [q.handle for q in d.agent.quarantine[GPU]] == taken
            m = agent_metrics(d)
            assert m[("gleaner_kv_blocks_invalidated_total", labels)] == 4  # none the 2nd time
            assert wait_until(lambda: d.health()["gates"][str(GPU)] is True)
            assert sp.cmd("launch 1", timeout=10)["rc"] == "0"
            hook.close()
            on.close()


def _lost_online_shim_is_held(
    tmp_path: Path,
    sock_path: Path,
    *,
    gate_loop: bool = True,
    stall_s: float = 0.0,
    held_for_s: float,
    why: str,
) -> None:
    """An online process turns busy and goes away: the offline launch stays held (the guard
    enforced, the default, no NVML: a closed online connection could be a process still
    running on the GPU without its shim) until the same process reconnects. With
    ``stall_s``, the agent's event loop is blocked that long first (``_stall``); ``gate_loop``
    as the agent's option (the default: on)."""
    with (
        running_agent(sock_path, node=NODE, gate_loop=gate_loop) as d,
        ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp,
    ):
        assert wait_until(lambda: all(d.health()["gates"].values()))
        h = _setup(sp)
        assert wait_until(lambda: _registered(d, h["tsg"]))
        assert sp.cmd("launch 1")["rc"] == "0"
        # Only a close from here on counts: a loaded node may have closed and reopened the
        # gate earlier (a stale heartbeat), and such a disable says nothing about this edge.
        before = len(_controls(sp))
        if stall_s:
            _stall(d, stall_s)
        online = _online(sock_path)
        p.send_message(online, p.OnlineBusy(gpu=0, mono_ns=1))

        def closed_on_the_edge() -> bool:
            # Closed now, by a disable after the busy edge; and unless stalled, the agent
            # has read the edge (its own gate closed): before that, the busy edge is still
            # in flight and offline work may run (the frame's latency). Stalled, the offline
            # shim closes on the stale heartbeat with the frame unread.
            controls = _controls(sp)
            disabled = len(controls) > before and controls[-1]["enable"] == "0"
            return disabled and (bool(stall_s) or d.health()["gates"][str(GPU)] is False)

        assert wait_until(closed_on_the_edge, timeout=30), (
            f"the busy edge did not close the offline gate; the agent's /healthz: {d.health()}; "
            f"the offline shim's controls: {_controls(sp)}"
        )
        online.close()
        sp.send("launch 1")
        assert sp.no_reply_within(held_for_s), (
            f"{why}; the agent's /healthz: {d.health()}; "
            f"the offline shim's controls: {_controls(sp)}"
        )
        assert d.health()["uninstrumented"]["gpus"] == {
            str(GPU): [{"pid": 7, "why": "disconnected", "pod": ""}]
        }
        again = _online(sock_path)  # the same process reconnects: accounted for again
        try:
            assert sp.reply()["rc"] == "0"
        finally:
            again.close()


def test_a_lost_online_shim_keeps_offline_work_held_until_it_reconnects(
    tmp_path: Path, sock_path: Path
) -> None:
    _lost_online_shim_is_held(
        tmp_path, sock_path, held_for_s=0.5, why="offline work ran over a lost online shim"
    )


def _stall(d: AgentDaemon, seconds: float) -> None:
    """Block the agent's event loop for ``seconds`` (a loaded node); returns once it is."""
    assert d.server is not None and d.server._loop is not None
    stalled = threading.Event()

    def stall() -> None:
        stalled.set()
        time.sleep(seconds)

    d.server._loop.call_soon_threadsafe(stall)
    assert stalled.wait(10)


@pytest.mark.parametrize("gate_loop", [True, False], ids=["loop", "socket"])
def test_an_agent_stall_never_lets_offline_work_run_before_a_lost_online_shim_is_read(
    tmp_path: Path, sock_path: Path, gate_loop: bool
) -> None:
    # The agent stalls longer than the gate segment's staleness bound (1 s): the offline
    # shim closes on the stale heartbeat, and asks for an enable once the agent beats again.
    # Meanwhile an online process turned busy and went away, its frames still unread. The
    # enable must wait for them: with them read, the lost online process holds the gate.
    _lost_online_shim_is_held(
        tmp_path,
        sock_path,
        gate_loop=gate_loop,
        stall_s=1.6,
        held_for_s=2.5,
        why="offline work ran before the agent read a lost online shim",
    )
