"""The real shim against the real agent: ``rm_client`` (libcuda-like RM traffic through the
shim and the fake RM) connected to ``AgentDaemon`` with the nvidia backend, no stubs between.

An online client (protocol v1 over the same socket) turns busy: the agent's GATE reaches the
shim, which disables the channel group on libcuda's own fd, and launches wait until the
agent re-enables after the cooldown. When the RM refuses the control, the process stays
held (fail closed) and the agent's /metrics say so (status and ack-failure counters).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gleaner.agent import protocol as p
from gleaner.agent.daemon import AgentDaemon, AgentOptions
from gleaner.agent.policy import GateConfig
from gleaner.testing.shim import ShimProcess, wait_until

NODE = "shim-node"
GPU = 3  # rm_client's GLEANER_GPU_INDICES; its UUID is unknown to the synthetic inventory


@pytest.fixture
def daemon(sock_path: Path) -> Iterator[AgentDaemon]:
    options = AgentOptions(
        backend="nvidia",
        node=NODE,
        metrics_host="127.0.0.1",
        metrics_port=0,
        socket_dir=sock_path.parent,
        gpus=4,
        kube=False,
        gate=GateConfig(cool_floor_s=0.05, cool_ceiling_s=0.05),
        shim_source=sock_path.parent / "absent.so",
    )
    d = AgentDaemon(options)
    runner = threading.Thread(target=lambda: asyncio.run(d.run()), daemon=True)
    runner.start()
    assert wait_until(lambda: sock_path.exists() and d.metrics_port is not None, timeout=20)
    assert wait_until(lambda: all(d.health()["gates"].values()))  # one cooldown after start
    try:
        yield d
    finally:
        d.stop()
        runner.join(10)


def _metrics(d: AgentDaemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"http://127.0.0.1:{d.metrics_port}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


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
            assert time.monotonic() - t_gone < 0.5  # the memory timer (T = 1 s) is later
        finally:
            online.close()
        m = _metrics(daemon)
        assert m[("gleaner_preemptions_total", (("gpu", str(GPU)), ("node", NODE)))] == 2
        assert m[("gleaner_gate_ack_failures_total", (("node", NODE),))] == 0
        assert m[("gleaner_agent_connections", (("node", NODE), ("role", "offline")))] == 1


def test_refused_control_keeps_work_held_and_shows_in_the_agents_metrics(
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
            assert wait_until(lambda: _metrics(daemon).get(key) == 1)
            m = _metrics(daemon)
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
                _metrics(daemon).get(
                    ("gleaner_offline_processes", (("node", NODE), ("status", "ok")))
                )
                == 1
            )
        )
