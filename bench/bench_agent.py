"""Agent gate reaction time and CPU use under 1,000 online transitions per second.

Starts ``gleaner agent --backend nvidia --gpus 1 --no-kube`` as its own process (a synthetic
one-GPU inventory: no GPU needed, the control path is the real one), then connects two real
socket clients speaking protocol v1: an *offline* shim that receives GATE frames and answers
GATE_ACK, and an *online* shim that sends ONLINE_BUSY / ONLINE_IDLE on a fixed schedule.
Each cycle of ``2 / rate`` seconds is busy → idle → (cooldown, the agent re-enables) → next
busy, so every busy edge must produce one disable.

Measured:
- reaction time: ONLINE_BUSY written by the online client → GATE(disable) read by the offline
  client (both in this process, one clock). This includes two kernel socket hops and this
  process's reader thread, so it bounds the agent's own arrival-to-departure time from above;
- the agent's CPU use: utime + stime of its process from /proc over the measured interval,
  as a share of one core.

Targets (issue 6): p99 < 1 ms, CPU < 10% of one core. ``python -m bench agent [--seconds S]
[--rate R]``; returns 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import bisect
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from gleaner.agent import protocol as p

TARGET_P99_S = 1e-3
TARGET_CPU = 0.10


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def _connect(
    path: Path, hello: p.Hello, timeout: float = 20.0
) -> tuple[socket.socket, p.FrameDecoder]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(path))
            break
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    p.send_message(sock, hello)
    return sock, p.FrameDecoder()


def _sleep_until(t: float) -> None:
    # Sleep, never spin: a spinning thread would hold the GIL and delay the reader thread.
    delay = t - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench agent", description=__doc__)
    ap.add_argument("--seconds", type=float, default=10.0, help="measured interval")
    ap.add_argument("--rate", type=float, default=1000.0, help="online transitions per second")
    args = ap.parse_args(argv)
    period = 2.0 / args.rate  # one busy and one idle edge per period
    busy_for = period / 8
    # The agent re-enables a quarter period after the idle edge, leaving headroom for the
    # event loop's timer resolution (epoll waits in whole milliseconds) before the next busy.
    cool = period / 4

    tmp = Path(tempfile.mkdtemp(prefix="gleaner-bench-agent-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent = subprocess.Popen(
        [
            sys.executable, "-m", "gleaner.cli.main", "agent",
            "--backend", "nvidia", "--node", "bench", "--gpus", "1", "--no-kube",
            "--socket-dir", str(tmp), "--metrics-host", "127.0.0.1",
            "--metrics-port", str(port), "--cool-floor", f"{cool * 1000:.3f}ms",
            "--cool-ceiling", f"{cool * 1000:.3f}ms", "--log-level", "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        path = tmp / "agent.sock"
        off, off_dec = _connect(path, p.Hello(pid=os.getpid(), role=p.Role.OFFLINE, job="b/off"))
        on, _ = _connect(path, p.Hello(pid=os.getpid(), role=p.Role.ONLINE))
        disables: list[int] = []
        enables = 0
        stop = threading.Event()

        def offline_reader() -> None:
            nonlocal enables
            off.settimeout(0.2)
            while not stop.is_set():
                try:
                    msgs = p.recv_messages(off, off_dec)
                except TimeoutError:
                    continue
                now = time.perf_counter_ns()
                if msgs is None:
                    return
                for m in msgs:
                    if isinstance(m, p.Gate):
                        if m.enable:
                            enables += 1
                        else:
                            disables.append(now)
                        ack = p.GateAck(gate_seq=m.gate_seq, enabled=m.enable, ok=True)
                        p.send_message(off, ack)

        reader = threading.Thread(target=offline_reader, daemon=True)
        reader.start()
        on.setblocking(True)
        # Wait for the first enable (the gate opens one cooldown after start).
        deadline = time.monotonic() + 20
        while enables == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        busy_sent: list[int] = []
        warmup = int(0.5 / period)
        n_cycles = int(args.seconds / period)
        cpu0, wall0 = (0.0, 0.0), 0.0
        start = time.perf_counter()
        for i in range(warmup + n_cycles):
            if i == warmup:
                cpu0, wall0 = _cpu_seconds(agent.pid), time.perf_counter()
                disables.clear()
                busy_sent.clear()
            t_busy = start + i * period
            _sleep_until(t_busy)
            busy_sent.append(time.perf_counter_ns())
            p.send_message(on, p.OnlineBusy(gpu=p.GPU_ALL, mono_ns=time.monotonic_ns()))
            _sleep_until(t_busy + busy_for)
            p.send_message(on, p.OnlineIdle(gpu=p.GPU_ALL, mono_ns=time.monotonic_ns()))
        time.sleep(0.05)
        cpu1, wall1 = _cpu_seconds(agent.pid), time.perf_counter()
        stop.set()
        reader.join(1)
        lat: list[float] = []
        for d in disables:
            # A disable answers the latest busy edge written before it was read.
            i = bisect.bisect_right(busy_sent, d) - 1
            if i >= 0:
                lat.append((d - busy_sent[i]) / 1e9)
        user = (cpu1[0] - cpu0[0]) / (wall1 - wall0)
        system = (cpu1[1] - cpu0[1]) / (wall1 - wall0)
        cpu = user + system
        missed = len(busy_sent) - len(lat)
    finally:
        agent.terminate()
        agent.wait(10)
    p50, p99 = _quantile(lat, 0.50), _quantile(lat, 0.99)
    transitions = 2 * len(busy_sent) / (wall1 - wall0)
    rows = [
        ("online transitions/s", f"{transitions:.0f}", f"{args.rate:.0f}", ""),
        ("busy edges / disables", f"{len(busy_sent)} / {len(lat)}", "", ""),
        ("busy edges, gate closed", f"{missed}", "(not reopened yet)", ""),
        ("reaction p50", f"{p50 * 1e6:.0f} µs", "", ""),
        ("reaction p99", f"{p99 * 1e6:.0f} µs", "< 1000 µs", f"{p99 / TARGET_P99_S:.2f}"),
        ("reaction max", f"{max(lat) * 1e6:.0f} µs", "", ""),
        ("agent CPU", f"{cpu * 100:.1f} % of a core", "< 10 %", f"{cpu / TARGET_CPU:.2f}"),
        ("  of which user / system", f"{user * 100:.1f} % / {system * 100:.1f} %", "", ""),
    ]
    print(f"{'measure':24} {'value':24} {'target':12} ratio")
    for r in rows:
        print(f"{r[0]:24} {r[1]:24} {r[2]:12} {r[3]}")
    ok = p99 < TARGET_P99_S and cpu < TARGET_CPU and len(lat) >= 0.9 * len(busy_sent)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
