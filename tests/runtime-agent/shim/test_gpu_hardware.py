"""Hardware test: gate a real CUDA kernel through the shim and measure preemption latency.

Skipped unless /dev/nvidiactl exists and nvcc is on PATH (the skip reason gives the command).
Run on a GPU machine with:

    make -C runtime-agent/shim && \
    python -m pytest -q -n 0 -m gpu -s tests/runtime-agent/shim/test_gpu_hardware.py

It builds ``runtime-agent/shim/tests/gpu_busy.cu`` (one persistent kernel incrementing a
counter in mapped host memory), runs it as the offline process under
``LD_PRELOAD=libgleaner_shim.so`` with a Python agent (``AgentStub``), and for several
cycles disables the process's channel groups (GATE enable=0) and re-enables them. It
measures: stop latency = last counter change after the GATE was sent (the kernel made no
progress afterwards), the shim's own control latency (GATE_ACK.latency_ns), and resume
latency = first counter change after the enabling GATE was sent. Results (with the driver
version from nvidia-smi) go to stdout and to ``$GLEANER_GPU_RESULTS``
(default runtime-agent/shim/build/gpu_results.json) for docs/shim.md.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gleaner.protocol import wire as p
from gleaner.simulator.costs import measured_costs
from gleaner.testing.shim import BUILD, SHIM_DIR, AgentStub

RUN_COMMAND = (
    "make -C runtime-agent/shim && "
    "python -m pytest -q -n 0 -m gpu -s tests/runtime-agent/shim/test_gpu_hardware.py"
)
"""How to run it on a GPU machine (also in docs/shim.md; the skip reason repeats it)."""

ROOT = Path(__file__).resolve().parents[3]

NO_GPU = pytest.mark.skipif(
    not Path("/dev/nvidiactl").exists(), reason=f"no NVIDIA GPU here; run: {RUN_COMMAND}"
)
NO_NVCC = pytest.mark.skipif(
    shutil.which("nvcc") is None, reason=f"nvcc not on PATH; run: {RUN_COMMAND}"
)


class Busy:
    def __init__(self, exe: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.readline(120) == "ready"

    def readline(self, timeout: float = 10) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = self.proc.stdout.readline().strip()
        assert time.monotonic() < deadline, "gpu_busy did not answer"
        return line

    def ask(self, cmd: str) -> dict[str, int]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        line = self.readline()
        return {k: int(v) for k, v in (t.split("=") for t in line.split()[1:] if "=" in t)}


def _seq(n: int) -> Callable[[p.GateAck], bool]:
    return lambda m: m.gate_seq == n


def _driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def test_the_command_to_run_it_is_documented() -> None:
    doc = (ROOT / "docs" / "shim.md").read_text()
    assert " ".join(RUN_COMMAND.split()) in " ".join(doc.replace("\\\n", " ").split())


@pytest.mark.gpu
@NO_GPU
@NO_NVCC
def test_disable_enable_a_running_kernel(sock_path: Path, shim_build: Path) -> None:
    exe = BUILD / "gpu_busy"
    subprocess.run(
        ["nvcc", "-O2", "-o", str(exe), str(SHIM_DIR / "tests" / "gpu_busy.cu")], check=True
    )
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=str(shim_build / "libgleaner_shim.so"),
        GLEANER_ROLE="offline",
        GLEANER_SOCKET=str(sock_path),
        GLEANER_JOB="gpu/test",
    )
    cycles = int(os.environ.get("GLEANER_GPU_CYCLES", "10"))
    stop_ns: list[int] = []
    ack_ns: list[int] = []
    resume_ns: list[int] = []
    with AgentStub(sock_path, gate_open=True, heartbeat_ms=500) as agent:
        busy = Busy(exe, env)
        try:
            tsgs = [m for m in agent.all_of(p.ChannelAdd) if m.kind == p.Kind.TSG]
            assert tsgs, "the shim registered no channel group"
            for i in range(cycles):
                time.sleep(0.2)
                before = busy.ask("probe")
                t_req = time.monotonic_ns()
                agent.send(p.Gate(gate_seq=2 * i + 1, enable=False))
                ack = agent.wait_for(p.GateAck, _seq(2 * i + 1))
                assert ack.ok, ack
                ack_ns.append(ack.latency_ns)
                time.sleep(0.3)
                a = busy.ask("probe")
                time.sleep(0.1)
                b = busy.ask("probe")
                assert a["counter"] == b["counter"], "the kernel still makes progress"
                assert a["counter"] > before["counter"]
                stop_ns.append(max(0, a["last_change_ns"] - t_req))
                t_en = time.monotonic_ns()
                busy.ask(f"mark {t_en}")
                agent.send(p.Gate(gate_seq=2 * i + 2, enable=True))
                agent.wait_for(p.GateAck, _seq(2 * i + 2))
                deadline = time.monotonic() + 5
                while (f := busy.ask("probe")["first_after_mark_ns"]) == 0:
                    assert time.monotonic() < deadline, "the kernel did not resume"
                    time.sleep(0.001)
                resume_ns.append(f - t_en)
        finally:
            busy.ask("probe")
            if busy.proc.stdin is not None:
                busy.proc.stdin.write("quit\n")
                busy.proc.stdin.flush()
            busy.proc.wait(timeout=30)
    result = {
        "driver": _driver_version(),
        "cycles": cycles,
        "tsgs": len(tsgs),
        "stop_latency_us": {"median": statistics.median(stop_ns) / 1e3, "max": max(stop_ns) / 1e3},
        "gate_ack_latency_us": {
            "median": statistics.median(ack_ns) / 1e3,
            "max": max(ack_ns) / 1e3,
        },
        "resume_latency_us": {
            "median": statistics.median(resume_ns) / 1e3,
            "max": max(resume_ns) / 1e3,
        },
    }
    # The same measurements in the simulator's cost-model units (docs/simulator.md, "Cost
    # model"): paste under a node scenario's `costs:` to replace the guessed defaults.
    result["simulator_costs"] = measured_costs(stop_ns, resume_ns)
    out = Path(os.environ.get("GLEANER_GPU_RESULTS", str(BUILD / "gpu_results.json")))
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    assert max(stop_ns) < 100_000_000  # preempted within 100 ms, every cycle
