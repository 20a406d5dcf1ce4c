"""Benchmark the shim's CPU-side costs without a GPU (targets and results in docs/benchmarks.md).

Measures, with the fake libcuda (kernels of zero length) and the fake RM of the shim tests:
- per-launch overhead of the interposed ``cuLaunchKernel`` in an online process (busy
  tracking on) and in an offline process with the gate open, against the same launches
  without the shim;
- GATE → GATE_ACK round trip seen by a Python agent, with one channel group to disable
  through the fake RM (socket, control thread wake-up, one control ioctl, ack).

Targets: online launch overhead < 1 us per launch; offline gate-open overhead < 0.5 us;
GATE round trip (median) < 1 ms. The GPU-side preemption latency needs hardware:
tests/runtime-agent/shim/test_gpu_hardware.py.

Run: ``python -m bench shim`` (``--quick``: fewer launches and gates).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gleaner.protocol import wire as p
from gleaner.testing.shim import AgentStub, ShimProcess

ONLINE_TARGET_US = 1.0
OFFLINE_TARGET_US = 0.5
GATE_TARGET_MS = 1.0


def _launch_ns(tmp: Path, role: str, sock: Path, n: int, shim: bool) -> float:
    env = {"GLEANER_FAKE_KERNEL_US": "0", "GLEANER_SHIM_LOG": "quiet"}
    with ShimProcess(tmp, role=role, socket_path=sock, extra_env=env, preload_shim=shim) as sp:
        sp.cmd("open")
        sp.cmd("launch 1000")  # warm up: resolve symbols, start threads
        best = float("inf")
        for _ in range(3):
            r = sp.cmd(f"launch {n}", timeout=60)
            best = min(best, (int(r["end_ns"]) - int(r["start_ns"])) / n)
        return best


def _gate_round_trips(tmp: Path, sock: Path, count: int) -> list[float]:
    with (
        AgentStub(sock, gate_open=True) as agent,
        ShimProcess(
            tmp, role="offline", socket_path=sock, extra_env={"GLEANER_SHIM_LOG": "quiet"}
        ) as sp,
    ):
        for cmd in ("open", "client", "device 0", "tsg", "chan c86f"):
            sp.cmd(cmd)
        agent.wait_for(p.ChannelAdd, lambda m: m.kind == p.Kind.CHANNEL)
        out = []
        for i in range(count):
            t0 = time.perf_counter()
            agent.send(p.Gate(gate_seq=i, enable=i % 2 == 1))
            agent.wait_for(p.GateAck, lambda m, s=i: m.gate_seq == s)  # type: ignore[misc]
            out.append((time.perf_counter() - t0) * 1e3)
        return out


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    n = 20_000 if quick else 200_000
    gates = 20 if quick else 200
    d = Path(tempfile.mkdtemp(prefix="glb", dir="/tmp"))
    try:
        sock = d / "agent.sock"
        base = _launch_ns(d, "online", sock, n, shim=False)
        online = _launch_ns(d, "online", sock, n, shim=True)
        offline_env_sock = d / "agent2.sock"
        with AgentStub(offline_env_sock, gate_open=True):
            offline = _launch_ns(d, "offline", offline_env_sock, n, shim=True)
        rtts = _gate_round_trips(d, d / "agent3.sock", gates)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    on_us = (online - base) / 1e3
    off_us = (offline - base) / 1e3
    med = statistics.median(rtts)
    p99 = sorted(rtts)[int(0.99 * (len(rtts) - 1))]
    rows = [
        ("launch without shim (fake libcuda)", f"{base / 1e3:.3f} us", "-"),
        ("online launch overhead (busy tracking)", f"{on_us:.3f} us", f"< {ONLINE_TARGET_US} us"),
        ("offline launch overhead (gate open)", f"{off_us:.3f} us", f"< {OFFLINE_TARGET_US} us"),
        ("GATE -> GATE_ACK round trip, median", f"{med:.3f} ms", f"< {GATE_TARGET_MS} ms"),
        ("GATE -> GATE_ACK round trip, p99", f"{p99:.3f} ms", "-"),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, target in rows:
        print(f"  {name:<{width}}  {value:>12}  {target}")
    ok = on_us < ONLINE_TARGET_US and off_us < OFFLINE_TARGET_US and med < GATE_TARGET_MS
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
