"""The node's accounting with the native gate loop on, for online edges that reach the agent
as frames: a framework hook naming its requests over the socket (the vLLM hook's way), whose
first busy edge comes before its HELLO_ACK, beside a real C online shim that writes its edges
into the segment's ring, on the same GPU. The real agent reports the same busy time,
preemptions and finished requests as with ``--no-native-gate-loop``, where its own gates hear
every edge, for the same seeded edge sequence.

Timing: the gaps are either far shorter or far longer than the cooldown (0.3 s), so both runs
make the same gate decisions on a loaded machine; busy seconds are compared with a tolerance
for the sleeps' jitter. The test waits until the agent has read each of the hook's edges
before it goes on. Waits poll; nothing asserts a duration.
"""

from __future__ import annotations

import random
import socket
import time
from pathlib import Path

import pytest

from gleaner.protocol import wire as p
from gleaner.runtime_agent.daemon import AgentDaemon
from gleaner.runtime_agent.policy import GateConfig, GpuTotals, InstrumentationConfig
from gleaner.testing.shim import ShimProcess, running_agent, wait_until

GPU = 3  # rm_client's GLEANER_GPU_INDICES
GATE = GateConfig(cool_floor_s=0.3, cool_ceiling_s=0.3, request_timeout_s=None)
SHORT_S, LONG_S = 0.02, 0.8
"""A gap the cooldown outlasts (no enable in between), and one it does not."""


def _hook_edge(d: AgentDaemon, hook: socket.socket, busy: bool, request: int) -> None:
    """The hook's edge, then a wait until the agent has read it: the sequence's order is the
    one the agent sees (a frame from one connection and the shim's edge from another, sent
    within a frame's latency, may reach it in either order, on either path)."""
    edge = p.OnlineBusy if busy else p.OnlineIdle
    p.send_message(hook, edge(gpu=p.GPU_ALL, mono_ns=time.monotonic_ns(), request_id=request))
    assert wait_until(lambda: d.agent.is_busy(GPU) == busy, timeout=10)


def _run(tmp_path: Path, sock_path: Path, seed: int, *, gate_loop: bool) -> GpuTotals:
    """One seeded sequence against the real agent; its totals for the GPU."""
    rng = random.Random(seed)
    steps = ["hook", "shim", "both", "hook", *rng.choices(["hook", "shim", "both"], k=3)]
    rng.shuffle(steps)
    gaps = [rng.choice([SHORT_S, LONG_S]) for _ in steps]
    holds = [rng.uniform(0.1, 0.2) for _ in steps]
    guard = InstrumentationConfig(enforce=False)
    env = {"GLEANER_FAKE_KERNEL_US": "20000"}
    with (
        running_agent(
            sock_path, node="acct", gate=GATE, instrumentation=guard, gate_loop=gate_loop
        ) as d,
        ShimProcess(tmp_path, role="online", socket_path=sock_path, extra_env=env) as shim,
    ):
        if gate_loop:
            assert wait_until(lambda: (d.health()["gate_loop"] or {}).get("running") is True)
        shim.cmd("open")
        time.sleep(1.2)  # the online shim looks for the segment at most once a second
        hook = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        hook.connect(str(sock_path))
        try:
            # Its first busy edge right behind its HELLO, before any HELLO_ACK is read.
            p.send_message(hook, p.Hello(pid=4321, role=p.Role.ONLINE, gpu_indices=(GPU,)))
            _hook_edge(d, hook, True, 1)
            time.sleep(0.15)
            _hook_edge(d, hook, False, 1)
            for i, (step, gap, hold) in enumerate(zip(steps, gaps, holds, strict=True)):
                time.sleep(gap)
                request = i + 2
                if step == "shim":
                    assert shim.cmd("launch 1", timeout=10)["rc"] == "0"
                    time.sleep(0.1)  # its kernel (20 ms) done before the next edge
                    continue
                _hook_edge(d, hook, True, request)
                if step == "both":  # the shim's kernel inside the hook's request
                    assert shim.cmd("launch 1", timeout=10)["rc"] == "0"
                time.sleep(hold)
                _hook_edge(d, hook, False, request)
            time.sleep(LONG_S)  # the last kernel's idle edge, the cooldown, the log drained
            if gate_loop:
                health = d.health()["gate_loop"]
                hook_edges = 2 + 2 * sum(step != "shim" for step in steps)
                assert health["framed_edges"] >= hook_edges, "the hook's edges are not in the loop"
                assert health["edges"] >= hook_edges + 2 * steps.count("shim")
            return d.agent.accounting.snapshot().gpus[GPU]
        finally:
            hook.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_with_the_loop_on_framed_and_ring_edges_are_accounted_as_on_the_socket_path(
    tmp_path: Path, sock_path: Path, seed: int
) -> None:
    runs: dict[bool, GpuTotals] = {}
    for gate_loop in (False, True):
        (tmp_path / str(gate_loop)).mkdir()
        runs[gate_loop] = _run(tmp_path / str(gate_loop), sock_path, seed, gate_loop=gate_loop)
    socket_path, loop = runs[False], runs[True]
    assert socket_path.preemptions >= 2  # the sequence preempted (a long gap, then busy)
    assert loop.preemptions == socket_path.preemptions
    assert loop.online_requests == socket_path.online_requests
    assert loop.max_preemptions_per_request == socket_path.max_preemptions_per_request <= 1
    assert loop.online_busy_s == pytest.approx(socket_path.online_busy_s, rel=0.25)
    # The hook's requests (the first, two "hook" steps, a "both": at least 0.1 s each), not
    # only the shim's kernels (20 ms each).
    assert loop.online_busy_s >= 4 * 0.1
