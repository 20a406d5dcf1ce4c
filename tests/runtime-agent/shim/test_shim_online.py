"""The shim in an online process (fail open) and its CUDA entry-point interposition.

Launches go through a fake libcuda (``tests/fake_cuda.c``) found the way the CUDA runtime
finds libcuda (dlopen + dlsym("cuGetProcAddress_v2") + cuGetProcAddress), so the shim's
dlsym and cuGetProcAddress interposition and its event-based completion tracking run
exactly as they would against the real driver; a fake kernel occupies its stream for
GLEANER_FAKE_KERNEL_US microseconds.
"""

from __future__ import annotations

import time
from pathlib import Path

from gleaner.protocol import wire as p
from gleaner.testing.shim import AgentStub, ShimProcess, wait_until


def test_online_never_waits_without_an_agent(tmp_path: Path, sock_path: Path) -> None:
    with ShimProcess(tmp_path, role="online", socket_path=sock_path) as sp:
        sp.cmd("open")
        t0 = time.monotonic()
        r = sp.cmd("launch 200", timeout=10)
        assert r["rc"] == "0"
        assert time.monotonic() - t0 < 5
        assert "held" not in sp.stderr()


def test_online_never_waits_on_a_stalled_agent(tmp_path: Path, sock_path: Path) -> None:
    # The agent accepts but never reads nor answers.
    with (
        AgentStub(sock_path, read=False) as agent,
        ShimProcess(
            tmp_path,
            role="online",
            socket_path=sock_path,
            extra_env={"GLEANER_FAKE_KERNEL_US": "50"},
        ) as sp,
    ):
        sp.cmd("open")
        assert wait_until(lambda: len(agent.conns) == 1)
        for _ in range(20):
            assert sp.cmd("launch 50", timeout=10)["rc"] == "0"
            sp.cmd("sleep 1")


def test_busy_idle_transitions_and_decode_gaps(tmp_path: Path, sock_path: Path) -> None:
    env = {"GLEANER_FAKE_KERNEL_US": "3000"}
    with (
        AgentStub(sock_path) as agent,
        ShimProcess(tmp_path, role="online", socket_path=sock_path, extra_env=env) as sp,
    ):
        sp.cmd("open")
        hello = agent.wait_for(p.Hello)
        assert hello.role == p.Role.ONLINE and hello.caps & p.CAP_BUSY_TRACK
        r = sp.cmd("launch 1")
        busy = agent.wait_for(p.OnlineBusy)
        idle = agent.wait_for(p.OnlineIdle)
        # The fake kernel runs 3 ms after its launch; idle is seen after it completes.
        assert 3_000_000 <= idle.mono_ns - int(r["start_ns"]) < 500_000_000
        assert busy.mono_ns <= idle.mono_ns
        mark = agent.mark()
        sp.cmd("sleep 30")
        sp.cmd("graph 1")  # a decode step as vLLM issues it: one graph launch
        gap = agent.wait_for(p.DecodeGap, after=mark)
        assert 25_000_000 <= gap.gap_ns < 1_000_000_000
        agent.wait_for(p.OnlineBusy, after=mark)
        agent.wait_for(p.OnlineIdle, after=mark)


def test_a_burst_of_launches_is_one_busy_period(tmp_path: Path, sock_path: Path) -> None:
    # Kernels of 50 ms: the burst stays queued even if the launching thread is descheduled
    # for tens of milliseconds on a loaded machine (with 2 ms kernels a 3 ms stall between
    # two launches really does drain the fake GPU, and the shim rightly reports idle).
    env = {"GLEANER_FAKE_KERNEL_US": "50000"}
    with (
        AgentStub(sock_path) as agent,
        ShimProcess(tmp_path, role="online", socket_path=sock_path, extra_env=env) as sp,
    ):
        sp.cmd("open")
        agent.wait_for(p.Hello)
        r = sp.cmd("launch-ex 6")  # 6 kernels queue for 300 ms of fake GPU time
        assert int(r["end_ns"]) - int(r["start_ns"]) < 50_000_000, "the launch loop stalled"
        idle = agent.wait_for(p.OnlineIdle)
        assert idle.mono_ns - int(r["start_ns"]) >= 6 * 50_000_000
        assert len(agent.all_of(p.OnlineBusy)) == 1


def test_without_a_role_the_shim_only_forwards(tmp_path: Path, sock_path: Path) -> None:
    with AgentStub(sock_path) as agent, ShimProcess(tmp_path, role="", socket_path=sock_path) as sp:
        sp.cmd("open")
        sp.cmd("client")
        assert sp.cmd("launch 3")["rc"] == "0"
        time.sleep(0.3)
        assert agent.conns == []


def test_rtld_next_lookups_still_see_their_caller(tmp_path: Path, sock_path: Path) -> None:
    # The fake RM, preloaded after the shim, looks up dlsym(RTLD_NEXT, "ioctl") through the
    # shim's dlsym: it must get libc's ioctl, not its own (the shim tail-calls glibc).
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        sp.cmd("open")
        assert wait_until(lambda: any("rtld_next" in r for r in sp.rm_calls()))
        assert all(r["rtld_next"] == "ok" for r in sp.rm_calls() if "rtld_next" in r)
