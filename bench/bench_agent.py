"""Gate reaction time and agent CPU at 1,000 online transitions per second: the socket path,
the native (shared-memory) close path and the native gate loop (fed by this script's writer
and by the real online shim), idle and under load, in one invocation.

Starts ``gleaner agent --backend nvidia --gpus 4 --no-kube`` as its own process (a synthetic
inventory: no GPU needed, the control path is the real one). The offline process is the
real shim: ``rm_client`` under ``LD_PRELOAD="libgleaner_shim.so libfake_rm.so"`` with one
channel group on GPU 3, as in tests/runtime-agent/shim. The online side is a socket client
speaking protocol v1 that sends ONLINE_BUSY / ONLINE_IDLE on a fixed schedule (each cycle of
``2 / rate`` seconds: busy, idle an eighth later, the agent re-enables a quarter period after
the idle edge, next busy). Five paths, same agent, same offline shim:

- ``socket`` (the old path): the busy frame → the agent's event loop → its gate policy →
  GATE frame → the shim's control thread → the RM disable control;
- ``native``: before the frame, the busy edge is written into the agent's shared-memory
  segment as an online shim writes it (:meth:`GateSegment.online_edge`: bump the GPU's
  busy counter, FUTEX_WAKE) → the offline shim's watch thread → the RM disable control.
  The frame still goes: the agent's policy decides the re-enable as before.
- ``loop``: the agent runs with ``--native-gate-loop``. The busy and idle edges go only into
  the segment (bump, ring entry, FUTEX_WAKE), as an online shim writes them while a loop
  runs; no edge frame. The close is the ``native`` path's; the re-enable is the loop's
  (the offline shim's watch thread opens at the loop's word): the agent's Python event
  loop is not on either path.
- ``shim``: the ``loop`` path with the real C online shim writing the edges (``rm_client``
  with ``role=online`` over the fake libcuda, one launch per cycle whose fake kernel runs
  for the busy eighth; the shim's tracker writes the idle edge when it completes). Its
  reaction starts at the shim's own timestamp of the busy edge (the ring entry's time), so
  no Python sits between the stamp and the futex.
- ``tuned``: the ``shim`` path while ``gleaner cpu-latency --max-wakeup-us 0`` holds a CPU
  wakeup-latency request (what the chart's ``agent.cpuWakeupLatency`` runs beside the
  agent): the machine's idle CPUs poll instead of sleeping, so no edge waits for a CPU to
  wake. It needs write access to ``/dev/cpu_dma_latency`` (root); without it the path is
  left out and the bench says so. The targets are checked on ``loop`` and on ``tuned``.

Measured, per run: reaction = the busy edge's ``CLOCK_MONOTONIC`` time (taken before the
bump and the frame) → the fake RM's timestamp of the disable control (``ns=`` in its log,
the same clock, stamped as its ioctl enters the fake RM): the whole path to the control that
stops the GPU's channel group, short of the GPU itself; the agent's CPU (each thread's time
on a CPU, from /proc/PID/task/*/schedstat, in nanoseconds, over the interval, as a share of
one core and per online cycle; split into the event loop's thread, the native gate loop's
and the rest: the kubelet client's and the HTTP server's; utime/stime for the user/system
split); the offline
process's CPU the same way (its watch and control threads, plus the fake RM's log line per
control: the native paths move work there, so the trade-off is shown); busy edges that
found the gate still closed (the re-enable came late; no disable needed) — a disable counts
only for an edge that found the gate open and while it stayed open (:func:`reactions`). The
online side here is Python (ctypes for the futex), slower than the shim's C, so the native
figures bound the shim's from above.

Each configuration (load 0 and ``--load N`` CPU hogs × socket and native) runs ``--runs``
times (default 1) for ``--seconds`` (default 5). Hogs are processes at the default priority
sweeping ~40 MB of Python objects (the caches as well as the CPUs); they start after the
clients connected and stop after the interval. ``--agent-prefix "taskset -c 1"`` wraps the
agent command; ``--client-cpu N`` pins this process; ``--client-rt`` runs it SCHED_FIFO (not
its children); ``--event-loop`` picks the agent's loop. The shim's watch thread asks for
SCHED_FIFO 1 itself and gets it where the process may (docs/shim.md).

Targets (docs/benchmarks.md), for the loop and tuned paths: reaction p99 <= 100 µs idle and
<= 500 µs under load, max <= 2 ms under load, agent CPU <= 3 % of a core. ``python -m bench
agent``; options: ``python -m bench agent --runs 3 --load 2``. Returns 1 when a target is
missed.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import math
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gleaner.protocol import node as pn
from gleaner.protocol import wire as p
from gleaner.runtime_agent.cpulatency import DEVICE
from gleaner.runtime_agent.fastgate import EDGE_BUSY, GateSegment, segment_path
from gleaner.testing.shim import ShimProcess

GPU = 3
"""rm_client's GPU (GLEANER_GPU_INDICES in the shim harness)."""
TARGET_P99_IDLE_S = 100e-6
TARGET_P99_LOAD_S = 500e-6
TARGET_MAX_LOAD_S = 2e-3
TARGET_CPU = 0.03
PATHS = ("socket", "native", "loop", "shim", "tuned")
TARGET_PATH = "loop"
"""The path the ratio is taken on; ``shim`` is the same path with the real C online shim
writing the edges, ``tuned`` the ``shim`` path with a CPU wakeup-latency request held (see
:func:`run_once`)."""
TARGET_PATHS = ("loop", "tuned")
"""The paths the targets are checked on."""
SHIM_PATHS = ("shim", "tuned")
"""The paths whose online side is the real C online shim."""
LOOP_PATHS = ("loop", "shim", "tuned")
"""The paths on which the agent runs its native gate loop and the edges go only into the
shared-memory segment."""


@dataclass(frozen=True)
class Run:
    """One run's measurements."""

    path: str
    load: int
    transitions_per_s: float
    busy_edges: int
    disables: int
    p50_s: float
    p99_s: float
    max_s: float
    cpu: float
    user: float
    system: float
    cpu_per_cycle_s: float
    cpu_event_loop: float
    """The agent's event-loop (main) thread, a share of one core."""
    cpu_gate_loop: float
    """The agent's native gate loop thread."""
    offline_cpu: float
    """The offline process's CPU (its gate watch thread, control thread and the fake RM), as a
    share of one core: what the native paths move into the offline side."""

    @property
    def closed(self) -> int:
        return self.busy_edges - self.disables


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def _schedstat_ns(task: Path) -> int:
    """A thread's time on a CPU so far, nanoseconds (``task``: its /proc task directory)."""
    return int((task / "schedstat").read_text().split()[0])


def _thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each of a process's threads so far (schedstat: nanoseconds, not clock
    ticks), by role: ``event loop`` (the main thread), ``gate loop`` (``gleaner-gate``) and
    ``other``."""
    out = {"event loop": 0.0, "gate loop": 0.0, "other": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            ns = _schedstat_ns(task)
            comm = (task / "comm").read_text().strip()
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended between the listing and the read
        role = "event loop" if task.name == str(pid) else "other"
        if comm == "gleaner-gate":
            role = "gate loop"
        out[role] += ns / 1e9
    return out


def _connect(path: Path, hello: p.Hello, timeout: float = 30.0) -> socket.socket:
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
    return sock


def _sleep_until(t: float) -> None:
    # Sleep, never spin: a spinning client would take a CPU from the agent and the shim.
    delay = t - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def _quantile(xs: list[float], q: float) -> float:
    if not xs:
        return math.nan  # no busy edge found the gate open: the run says so (closed)
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


HOG = """
import random
table = {i: i for i in range(1 << 19)}
keys = list(table)
random.shuffle(keys)
while True:
    for k in keys:
        table[k] += 1
"""
"""A CPU hog that also sweeps ~40 MB of Python objects in random order, as real work on a
loaded node does: a bare spin loop would leave the caches to the agent."""


def _start_hogs(n: int) -> list[subprocess.Popen[bytes]]:
    """N processes that run :data:`HOG` on a CPU until terminated."""
    return [
        subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL) for _ in range(n)
    ]


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(10)


def _hold_cpu_latency() -> subprocess.Popen[bytes]:
    """``gleaner cpu-latency --max-wakeup-us 0``, once its request is in force."""
    holder = subprocess.Popen(
        [sys.executable, "-m", "gleaner.cli.main", "cpu-latency", "--max-wakeup-us", "0"],
        stderr=subprocess.PIPE,
    )
    assert holder.stderr is not None
    line = holder.stderr.readline().decode()  # written once the request is in force
    if "holding" not in line:
        holder.wait(10)
        raise RuntimeError(f"gleaner cpu-latency did not start: {line.strip()}")
    return holder


def _can_tune() -> str | None:
    """Why the ``tuned`` path cannot run here, or None."""
    if not DEVICE.exists():
        return f"{DEVICE} does not exist"
    if not os.access(DEVICE, os.W_OK):
        return f"{DEVICE} is not writable (needs root)"
    return None


def kernel_preemption(
    debugfs: Path = Path("/sys/kernel/debug/sched/preempt"),
    dmesg: Callable[[], str] | None = None,
) -> str:
    """The running kernel's preemption model, as far as this process may read it: the
    active mode of a PREEMPT_DYNAMIC kernel (debugfs, else the boot log's "Dynamic Preempt"
    line), else the build's from ``uname -v``. Under ``none`` (and ``voluntary``) a real-time
    thread that wakes waits for kernel code running on its CPU to reach a preemption point,
    which no priority shortens (docs/agent.md, "The kernel's preemption model")."""
    with contextlib.suppress(OSError):
        # "none voluntary (full) lazy": the active mode in parentheses.
        for word in debugfs.read_text().split():
            if word.startswith("(") and word.endswith(")"):
                return f"{word[1:-1]} (PREEMPT_DYNAMIC, {debugfs})"
    read_log = dmesg or _dmesg
    for line in read_log().splitlines():
        if "Dynamic Preempt:" in line:
            return f"{line.rsplit(':', 1)[1].strip()} (PREEMPT_DYNAMIC, boot log)"
    build = os.uname().version
    for model in ("PREEMPT_RT", "PREEMPT_DYNAMIC", "PREEMPT"):
        if model in build.split():
            return f"{model} build (uname -v), mode not readable"
    return "none or voluntary build (uname -v)"


def _unit_of_work(n: int = 2000) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def wakeup_cost(sleeps_s: tuple[float, ...] = (0.001, 0.1), budget_s: float = 2.0) -> list[str]:
    """What one wakeup costs on this machine: a thread sleeps, then runs the same small unit
    of work (tens of microseconds); the CPU time it is charged per wakeup, after short and
    after long sleeps. On a machine of its own the two are close; on a virtual machine whose
    host runs other guests, a vCPU that slept long comes back to cold caches (or is charged
    for the host's delays) and every wakeup costs more. The agent's beats and timers are
    such wakeups, so this is the yardstick for its CPU column on the machine at hand."""
    _unit_of_work()  # warm
    t0 = time.perf_counter()
    for _ in range(50):
        _unit_of_work()
    work_us = (time.perf_counter() - t0) / 50 * 1e6
    lines = [f"one unit of work, back to back: {work_us:.0f} µs"]
    this_thread = Path(f"/proc/self/task/{threading.get_native_id()}")
    for sleep in sleeps_s:
        n = max(5, int(budget_s / sleep / 2) if sleep < 0.05 else int(budget_s / sleep))
        before = _schedstat_ns(this_thread)
        for _ in range(n):
            time.sleep(sleep)
            _unit_of_work()
        per = (_schedstat_ns(this_thread) - before) / n / 1e3
        lines.append(f"after a {sleep * 1000:g} ms sleep: {per:.0f} µs of CPU per wakeup")
    return lines


def _dmesg() -> str:
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _controls(sp: ShimProcess) -> list[tuple[int, bool]]:
    """(CLOCK_MONOTONIC time, enable) of the fake RM's schedule controls, in time order."""
    rows = [(int(c["ns"]), c.get("enable") == "1") for c in sp.rm_calls("control")]
    return sorted(rows)


def reactions(busy: list[int], controls: list[tuple[int, bool]]) -> list[float]:
    """Seconds from each busy edge that found the gate open to the disable that answered it.

    A disable answers the latest busy edge before it, if the gate was open at that edge (the
    last control before it was an enable) and stayed open until the disable. A disable after
    an enable that came after the edge answers nothing in progress: the gate was closed at
    the edge, and the agent's policy opened it later (a late GATE disable then follows).
    """
    out: list[float] = []
    times = [t for t, _ in controls]
    for k, (t, enable) in enumerate(controls):
        if enable:
            continue
        i = bisect.bisect_right(busy, t) - 1
        if i < 0:
            continue
        j = bisect.bisect_left(times, busy[i]) - 1  # the last control before the edge
        if j < 0 or not controls[j][1] or any(e for _, e in controls[j + 1 : k]):
            continue
        out.append((t - busy[i]) / 1e9)
    return out


class _RingReader:
    """The busy edges the online shim wrote into the segment's ring, with the shim's own
    timestamps; read often enough that the ring (4,096 entries) never laps the reader."""

    def __init__(self, seg: GateSegment) -> None:
        self._seg = seg
        self._next = seg.edges_written
        self.busy: list[int] = []

    def read(self) -> None:
        head = self._seg.edges_written
        while self._next != head:
            e = self._seg.edge(self._next)
            if e.commit == (self._next + 1) & 0xFFFFFFFF and e.kind == EDGE_BUSY:
                self.busy.append(int(e.t_ns))
            self._next = (self._next + 1) & 0xFFFFFFFF


def run_once(
    seconds: float, rate: float, prefix: list[str], event_loop: str, load: int, path: str
) -> Run:
    """Start an agent and a shim, drive them for ``seconds`` at ``rate`` transitions/s."""
    period = 2.0 / rate  # one busy and one idle edge per period
    busy_for = period / 8
    # The agent re-enables a quarter period after the idle edge, leaving headroom for the
    # event loop's timer resolution before the next busy edge.
    cool = period / 4
    tmp = Path(tempfile.mkdtemp(prefix="glb", dir="/tmp"))  # sun_path: 108 bytes at most
    holder = _hold_cpu_latency() if path == "tuned" else None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent = subprocess.Popen(
        [
            *prefix, sys.executable, "-m", "gleaner.cli.main", "agent",
            "--backend", "nvidia", "--node", "bench", "--gpus", "4", "--no-kube",
            "--socket-dir", str(tmp), "--metrics-host", "127.0.0.1",
            "--metrics-port", str(port), "--cool-floor", f"{cool * 1000:.3f}ms",
            "--cool-ceiling", f"{cool * 1000:.3f}ms", "--log-level", "error",
            "--event-loop", event_loop, "--allow-uninstrumented",
            *(["--native-gate-loop"] if path in LOOP_PATHS else ["--no-native-gate-loop"]),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    hogs: list[subprocess.Popen[bytes]] = []
    sock_path = tmp / "agent.sock"
    env = {pn.ENV_SHIM_LOG: "quiet"}
    on_tmp = Path(tempfile.mkdtemp(prefix="glo", dir="/tmp"))
    try:
        with (
            ShimProcess(tmp, role="offline", socket_path=sock_path, extra_env=env) as sp,
            contextlib.ExitStack() as stack,
        ):
            for cmd in ("open", "client", f"device {GPU}", "tsg", "chan c86f"):
                sp.cmd(cmd, timeout=30)
            sp.cmd("launch 1", timeout=30)  # returns once the agent opened the gate
            online_shim = None
            if path in SHIM_PATHS:  # the real C online shim: a fake kernel of busy_for per launch
                kernel = {**env, "GLEANER_FAKE_KERNEL_US": str(round(busy_for * 1e6))}
                online_shim = stack.enter_context(
                    ShimProcess(on_tmp, role="online", socket_path=sock_path, extra_env=kernel)
                )
                online_shim.cmd("open", timeout=30)
            else:
                on = _connect(
                    sock_path, p.Hello(pid=os.getpid(), role=p.Role.ONLINE, gpu_indices=(GPU,))
                )
            seg = GateSegment.open(segment_path(tmp)) if path != "socket" else None
            frames = path not in LOOP_PATHS  # with the loop, edges only in the segment
            hogs = _start_hogs(load)
            busy_sent: list[int] = []
            ring = _RingReader(seg) if online_shim is not None and seg is not None else None
            warmup = int(0.5 / period)
            n_cycles = int(seconds / period)
            cpu0, off0, wall0, mono0 = (0.0, 0.0), (0.0, 0.0), 0.0, 0
            start = time.perf_counter()
            for i in range(warmup + n_cycles):
                if i == warmup:
                    cpu0, wall0 = _cpu_seconds(agent.pid), time.perf_counter()
                    threads0 = _thread_cpu(agent.pid)
                    off0 = _cpu_seconds(sp.proc.pid)
                    mono0 = time.monotonic_ns()
                    busy_sent.clear()
                t_busy = start + i * period
                _sleep_until(t_busy)
                if online_shim is not None:
                    # The shim stamps its own busy edge (the ring entry's time); its tracker
                    # writes the idle edge when the fake kernel is done.
                    online_shim.send("launch 1")
                    if ring is not None and i % 64 == 0:
                        ring.read()
                    continue
                now = time.monotonic_ns()
                busy_sent.append(now)
                if seg is not None:
                    if not frames:  # as the online shim: its busy word, then the edge
                        seg.set_busy_word(os.getpid(), GPU)
                    seg.online_edge(GPU, t_ns=now)
                if frames:
                    p.send_message(on, p.OnlineBusy(gpu=p.GPU_ALL, mono_ns=now))
                _sleep_until(t_busy + busy_for)
                if frames:
                    p.send_message(on, p.OnlineIdle(gpu=p.GPU_ALL, mono_ns=time.monotonic_ns()))
                elif seg is not None:
                    seg.set_busy_word(os.getpid(), GPU, busy=False)  # the word first
                    seg.online_idle(GPU)
            time.sleep(0.05)
            cpu1, wall1 = _cpu_seconds(agent.pid), time.perf_counter()
            threads1 = _thread_cpu(agent.pid)
            off1 = _cpu_seconds(sp.proc.pid)
            _stop(hogs)
            hogs = []
            if ring is not None:
                ring.read()
                busy_sent = [t for t in ring.busy if t >= mono0]
            else:
                on.close()
            if seg is not None:
                seg.close()
            lat = reactions(busy_sent, _controls(sp))
    finally:
        _stop(hogs)
        agent.terminate()
        agent.wait(10)
        if holder is not None:
            _stop([holder])
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(on_tmp, ignore_errors=True)
    elapsed = wall1 - wall0
    user = (cpu1[0] - cpu0[0]) / elapsed
    system = (cpu1[1] - cpu0[1]) / elapsed
    share = {role: (threads1[role] - threads0[role]) / elapsed for role in threads1}
    cpu = sum(share.values())
    return Run(
        path=path,
        load=load,
        transitions_per_s=2 * len(busy_sent) / elapsed,
        busy_edges=len(busy_sent),
        disables=len(lat),
        p50_s=_quantile(lat, 0.50),
        p99_s=_quantile(lat, 0.99),
        max_s=max(lat, default=math.nan),
        cpu=cpu,
        user=user,
        system=system,
        cpu_per_cycle_s=cpu * elapsed / max(1, len(busy_sent)),
        cpu_event_loop=share["event loop"],
        cpu_gate_loop=share["gate loop"],
        offline_cpu=(off1[0] + off1[1] - off0[0] - off0[1]) / elapsed,
    )


def _median(runs: list[Run], key: str) -> float:
    return statistics.median(float(getattr(r, key)) for r in runs)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench agent", description=__doc__)
    ap.add_argument("--seconds", type=float, default=5.0, help="measured interval per run")
    ap.add_argument("--rate", type=float, default=1000.0, help="online transitions per second")
    ap.add_argument("--runs", type=int, default=1, help="repetitions per configuration")
    ap.add_argument("--agent-prefix", default="", help='wrap the agent, e.g. "taskset -c 1"')
    ap.add_argument("--client-cpu", type=int, default=None, help="pin this process to a CPU")
    ap.add_argument("--event-loop", choices=["auto", "asyncio", "uvloop"], default="auto")
    ap.add_argument("--load", type=int, default=2, help="CPU hogs of the loaded configuration")
    ap.add_argument(
        "--client-rt",
        action="store_true",
        help="run this process SCHED_FIFO 1 (reset on fork: the agent, shim and hogs are not)",
    )
    ap.add_argument(
        "--paths",
        default=",".join(PATHS),
        help=f"comma-separated paths to run (default: all of {', '.join(PATHS)})",
    )
    args = ap.parse_args(argv)
    chosen = [x.strip() for x in args.paths.split(",") if x.strip()]
    unknown = sorted(set(chosen) - set(PATHS))
    if unknown or not chosen:
        ap.error(f"--paths: unknown {', '.join(unknown) or 'nothing'}; choose from {PATHS}")
    if args.client_cpu is not None:
        os.sched_setaffinity(0, {args.client_cpu})
    if args.client_rt:
        # The online shim's bump is ~0.1 µs of C in the launching thread; this Python client
        # takes microseconds and can be preempted between its timestamp and the futex wake.
        # Real-time here takes the client's own delays out of both paths alike.
        policy = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
        os.sched_setscheduler(0, policy, os.sched_param(1))
    prefix = shlex.split(args.agent_prefix)
    loads = [0, args.load] if args.load else [0]
    why_not = _can_tune()
    paths = tuple(x for x in PATHS if x in chosen and (why_not is None or x != "tuned"))
    if why_not is not None and "tuned" in chosen:
        print(f"the tuned path is left out: {why_not}")
    print(f"kernel preemption: {kernel_preemption()}")
    print("wakeup cost on this machine: " + "; ".join(wakeup_cost()))
    runs: list[Run] = []
    for _ in range(args.runs):  # interleaved: a change of the machine's load hits all alike
        for load in loads:
            for path in paths:
                runs.append(run_once(args.seconds, args.rate, prefix, args.event_loop, load, path))
    print(f"{'path':7} {'load':>4} {'trans/s':>8} {'closed':>7} {'p50 µs':>7} {'p99 µs':>7} "
          f"{'max µs':>7} {'CPU %':>6} {'user/sys %':>11} {'loop/gate %':>11} {'µs/cycle':>9} "
          f"{'offline CPU %':>13}")  # fmt: skip
    for r in runs:
        print(
            f"{r.path:7} {r.load:4d} {r.transitions_per_s:8.0f} {r.closed:7d} "
            f"{r.p50_s * 1e6:7.0f} {r.p99_s * 1e6:7.0f} {r.max_s * 1e6:7.0f} {r.cpu * 100:6.1f} "
            f"{r.user * 100:5.1f}/{r.system * 100:<5.1f} "
            f"{r.cpu_event_loop * 100:5.1f}/{r.cpu_gate_loop * 100:<5.1f} "
            f"{r.cpu_per_cycle_s * 1e6:9.0f} "
            f"{r.offline_cpu * 100:13.1f}"
        )
    ok = True
    print(f"\nmedian of {args.runs} run(s) per cell; reaction = busy edge -> RM disable control")
    header = f"{'':22}"
    for load in loads:
        header += f" {'idle' if load == 0 else f'--load {load}':>{9 * len(paths) + 8}}"
    print(header)
    cols = "".join("".join(f" {path:>8}" for path in paths) + f" {'ratio':>7}" for _ in loads)
    print(f"{'':22}{cols}")
    for name, key, scale in (
        ("reaction p50 (µs)", "p50_s", 1e6),
        ("reaction p99 (µs)", "p99_s", 1e6),
        ("reaction max (µs)", "max_s", 1e6),
        ("agent CPU (% core)", "cpu", 100),
        ("  its event loop", "cpu_event_loop", 100),
        ("  its gate loop", "cpu_gate_loop", 100),
        ("offline CPU (% core)", "offline_cpu", 100),
    ):
        line = f"{name:22}"
        for load in loads:
            cell = {
                path: _median([r for r in runs if r.load == load and r.path == path], key)
                for path in paths
            }
            ratio = "-"
            if "socket" in cell and TARGET_PATH in cell:
                old, new = cell["socket"], cell[TARGET_PATH]
                ratio = f"{old / new:.1f}x" if new else "inf"
            line += "".join(f" {cell[path] * scale:8.1f}" for path in paths) + f" {ratio:>7}"
        print(line)
    print(
        f"ratio: socket / {TARGET_PATH}; shim: the {TARGET_PATH} path with the real C online "
        "shim; tuned: the shim path with idle CPUs kept awake (gleaner cpu-latency)"
    )
    for target_path, load in ((tp, ld) for tp in TARGET_PATHS if tp in paths for ld in loads):
        native = [r for r in runs if r.load == load and r.path == target_path]
        p99, mx, cpu = (_median(native, k) for k in ("p99_s", "max_s", "cpu"))
        # (what, value, target, unit scale, unit): printed in the table's units.
        checks = [
            ("reaction p99", p99, TARGET_P99_IDLE_S if load == 0 else TARGET_P99_LOAD_S, 1e6, "µs")
        ]
        if load:
            checks.append(("reaction max", mx, TARGET_MAX_LOAD_S, 1e6, "µs"))
        checks.append(("agent CPU", cpu, TARGET_CPU, 100.0, "% of a core"))
        for what, value, target, unit_scale, unit in checks:
            met = value <= target
            ok = ok and met
            label = "idle" if load == 0 else f"--load {load}"
            verdict = "met" if met else "MISSED"
            print(
                f"target {target_path} {label} {what}: {value * unit_scale:.1f} {unit} "
                f"(target <= {target * unit_scale:g} {unit}): {verdict}"
            )
    if any(r.disables < 0.5 * r.busy_edges for r in runs):
        ok = False
        print("fewer disables than half the busy edges in some run: the cycle does not fit")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
