"""Test harness for the C shim: build it, run scripted RM clients under it, play the agent.

- :func:`build_shim` runs ``make -C runtime-agent/shim`` and returns the build folder
  (``libgleaner_shim.so``, ``libfake_rm.so``, ``libfake_cuda.so``, ``rm_client``,
  ``proto_dump``).
- :class:`AgentStub` is a protocol server on a Unix socket built on
  :mod:`gleaner.protocol.wire`: it records every frame each shim sends, answers HELLO
  with a configurable HELLO_ACK, sends heartbeats, and lets a test send GATE / FD_REQUEST.
- :class:`ShimProcess` runs ``rm_client`` (a scripted stand-in for libcuda's RM traffic)
  with the shim and the fake RM preloaded, one command per call.
- :class:`PreloadedPython` runs ``python -c DRIVER`` with the shim preloaded over the fake
  libcuda (named by ``GLEANER_LIBCUDA``): one JSON command per stdin line, one JSON reply
  per stdout line (:meth:`PreloadedPython.request`).
- :func:`running_agent` runs the real :class:`~gleaner.runtime_agent.daemon.AgentDaemon` (nvidia
  backend, no cluster, metrics on a free loopback port) on a thread, with its socket in the
  folder of a given path; :func:`agent_metrics` reads its /metrics as
  ``{(name, sorted labels): value}``.

Both child processes pump their stdout into a queue on a thread (a wait has a deadline and
a timeout names the child's stderr, kept in a file) and are killed on ``close()``.

No GPU is involved: the fake RM (``runtime-agent/shim/tests/fake_rm.c``) answers RM ioctls
on a regular file that stands in for /dev/nvidiactl and logs every call it receives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

from gleaner.protocol import node as pn
from gleaner.protocol import wire as p
from gleaner.runtime_agent.daemon import AgentDaemon, AgentOptions
from gleaner.runtime_agent.policy import GateConfig, InstrumentationConfig, MemoryConfig

REPO = Path(__file__).resolve().parents[3]
SHIM_DIR = REPO / "runtime-agent" / "shim"
BUILD = SHIM_DIR / "build"

FAKE_GPU_UUID = "GPU-11111111-2222-3333-4444-555555555555"
"""The ``NVIDIA_VISIBLE_DEVICES`` the shim's test children see (unknown to any inventory)."""
FAST_GATE = GateConfig(cool_floor_s=0.05, cool_ceiling_s=0.05)
"""A gate cooldown short enough for tests to wait through."""

M = TypeVar("M", bound=p.Message)


def build_shim() -> Path:
    """Build the shim and its test programs (fast when up to date); the build folder."""
    subprocess.run(["make", "-s", "-C", str(SHIM_DIR)], check=True, capture_output=True)
    return BUILD


class AgentStub:
    """A minimal agent: accepts shims, records their frames, answers HELLO."""

    def __init__(
        self,
        path: Path,
        *,
        gate_open: bool = True,
        gate_mode: p.GateMode = p.GateMode.SHIM,
        heartbeat_ms: int = 200,
        auto_ack: bool = True,
        read: bool = True,
    ) -> None:
        self.path = path
        self.gate_open = gate_open
        self.gate_mode = gate_mode
        self.heartbeat_ms = heartbeat_ms
        self.auto_ack = auto_ack
        self.read = read
        self.messages: list[tuple[int, p.Message]] = []
        self.conns: list[socket.socket] = []
        self._cv = threading.Condition()
        self._stop = threading.Event()
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(path))
        self._srv.listen(16)
        self._srv.settimeout(0.1)
        self._threads = [
            threading.Thread(target=self._accept, daemon=True),
            threading.Thread(target=self._beat, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def __enter__(self) -> AgentStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        # Stop listening first: a shim that sees its connection drop reconnects at once,
        # and must find no agent (not a half-closed one that accepts and never answers).
        self._srv.close()
        self.path.unlink(missing_ok=True)
        with self._cv:
            conns = list(self.conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def drop(self, conn: int = -1) -> None:
        """Close one shim's connection (as if the agent had died)."""
        with self._cv:
            c = self.conns[conn]
        c.shutdown(socket.SHUT_RDWR)
        c.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self._srv.accept()
            except (TimeoutError, OSError):
                continue
            with self._cv:
                self.conns.append(c)
                idx = len(self.conns) - 1
            if self.read:
                threading.Thread(target=self._reader, args=(idx, c), daemon=True).start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_ms / 1000):
            with self._cv:
                conns = list(self.conns)
            for c in conns:
                with contextlib.suppress(OSError):
                    p.send_message(c, p.Heartbeat(mono_ns=time.monotonic_ns()))

    def _reader(self, idx: int, c: socket.socket) -> None:
        dec = p.FrameDecoder()
        while not self._stop.is_set():
            try:
                batch = p.recv_messages(c, dec)
            except (OSError, p.ProtocolError):
                return
            if batch is None:
                return
            for msg in batch:
                if isinstance(msg, p.Hello) and self.auto_ack:
                    ack = p.HelloAck(
                        gate_open=self.gate_open,
                        gate_mode=self.gate_mode,
                        heartbeat_ms=self.heartbeat_ms,
                        source_id=idx + 1,  # as the agent numbers its connections
                    )
                    try:
                        p.send_message(c, ack)
                    except OSError:
                        return  # the shim went away before its ack (a process that exited)
                with self._cv:
                    self.messages.append((idx, msg))
                    self._cv.notify_all()

    def send(self, msg: p.Message, conn: int = -1) -> None:
        with self._cv:
            c = self.conns[conn]
        p.send_message(c, msg)

    def wait_for(
        self,
        kind: type[M],
        pred: Callable[[M], bool] = lambda _m: True,
        timeout: float = 5.0,
        after: int = 0,
    ) -> M:
        """The first message of ``kind`` (from index ``after``) matching ``pred``."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for _, msg in self.messages[after:]:
                    if isinstance(msg, kind) and pred(msg):
                        return msg
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [type(m).__name__ for _, m in self.messages]
                    raise TimeoutError(f"no {kind.__name__} within {timeout}s; saw {seen}")
                self._cv.wait(left)

    def all_of(self, kind: type[M]) -> list[M]:
        with self._cv:
            return [m for _, m in self.messages if isinstance(m, kind)]

    def mark(self) -> int:
        """An index for ``wait_for(after=...)``: only messages from now on."""
        with self._cv:
            return len(self.messages)


class _LineChild:
    """A child process with text pipes: its stdout lines go to a queue (a thread pumps
    them; ``None`` marks the end), its stderr to ``stderr_path``."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("wb")
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=dict(env),
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def send(self, line: str) -> None:
        """Write one line to the child's stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def next_line(self, timeout: float, what: str = "a reply") -> str:
        """The child's next stdout line; TimeoutError (or ChildProcessError when the child
        closed its stdout) naming its stderr."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no {what} within {timeout}s; stderr: {self.stderr()}") from None
        if line is None:
            self._lines.put(None)  # every later read sees the end too
            raise ChildProcessError(f"the child exited before {what}; stderr: {self.stderr()}")
        return line

    def no_reply_within(self, seconds: float) -> bool:
        """True when the child writes no line for ``seconds`` (a line is kept for later)."""
        try:
            line = self._lines.get(timeout=seconds)
        except queue.Empty:
            return True
        self._lines.put(line)
        return False

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._stderr.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shim_env(
    *,
    preload: Sequence[Path],
    role: str,
    socket_path: Path,
    ctl: Path,
    job: str | None,
    visible_devices: str | None,
    gpu_index: int,
) -> dict[str, str]:
    """The environment a shim test child starts with (the caller adds its own variables)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LD_PRELOAD": " ".join(str(x) for x in preload),
        pn.ENV_ROLE: role,
        pn.ENV_SOCKET: str(socket_path),
        pn.ENV_GPU_INDICES: str(gpu_index),
        pn.ENV_NVIDIACTL_PATH: str(ctl),
        pn.ENV_SHIM_RECONNECT_MS: "50",
    }
    if job is not None:
        env[pn.ENV_JOB] = job
    if visible_devices is not None:
        env["NVIDIA_VISIBLE_DEVICES"] = visible_devices
    return env


class ShimProcess(_LineChild):
    """``rm_client`` under LD_PRELOAD="libgleaner_shim.so libfake_rm.so"."""

    def __init__(
        self,
        tmp: Path,
        *,
        role: str,
        socket_path: Path,
        extra_env: dict[str, str] | None = None,
        preload_shim: bool = True,
    ) -> None:
        build = build_shim()
        self.ctl = tmp / "nvidiactl"
        self.ctl.touch()
        self.rm_log = tmp / f"fake_rm_{id(self)}.log"
        preload = [build / "libfake_rm.so"]
        if preload_shim:
            preload.insert(0, build / "libgleaner_shim.so")
        env = _shim_env(
            preload=preload,
            role=role,
            socket_path=socket_path,
            ctl=self.ctl,
            job="team-a/job-1",
            visible_devices=FAKE_GPU_UUID,
            gpu_index=3,
        )
        env |= {
            "GLEANER_FAKE_RM_LOG": str(self.rm_log),
            "GLEANER_TEST_LIBCUDA": str(build / "libfake_cuda.so"),
            pn.ENV_SHIM_HOLD_LOG_MS: "200",
            **(extra_env or {}),
        }
        super().__init__([str(build / "rm_client")], env, tmp / f"shim_stderr_{id(self)}.log")

    def reply(self, timeout: float = 5.0) -> dict[str, str]:
        """The next reply line parsed: ``{"result": "ok", "cmd": ..., key: value...}``."""
        line = self.next_line(timeout)
        head, _, rest = line.partition(" ")
        cmd, _, kv = rest.partition(" ")
        out = {"result": head, "cmd": cmd}
        for tok in kv.split():
            k, _, v = tok.partition("=")
            out[k] = v
        if head != "ok":
            raise RuntimeError(f"rm_client failed: {line}")
        return out

    def cmd(self, command: str, timeout: float = 5.0) -> dict[str, str]:
        self.send(command)
        return self.reply(timeout)

    def rm_calls(self, op: str | None = None) -> list[dict[str, str]]:
        """The fake RM's log as dicts (``op=control``, ``cmd=0x...``, ``enable=0``...)."""
        if not self.rm_log.exists():
            return []
        rows = []
        for line in self.rm_log.read_text().splitlines():
            row = dict(tok.partition("=")[::2] for tok in line.split())
            if op is None or row.get("op") == op:
                rows.append(row)
        return rows


class PreloadedPython(_LineChild):
    """``python -c driver`` with the shim LD_PRELOADed over the fake libcuda.

    The driver reads one JSON command per stdin line and prints one JSON reply per
    command. The child's environment: the shim's variables for ``role``, ``socket_path``
    and GPU ``gpu_index`` (``NVIDIA_VISIBLE_DEVICES=visible_devices`` unless None,
    ``GLEANER_JOB=job`` unless None), ``GLEANER_LIBCUDA`` naming the fake libcuda, this
    interpreter's ``sys.path`` as PYTHONPATH, then ``env``.
    """

    def __init__(
        self,
        tmp: Path,
        driver: str,
        *,
        socket_path: Path,
        role: str = "offline",
        gpu_index: int = 0,
        visible_devices: str | None = FAKE_GPU_UUID,
        job: str | None = "team-a/job-1",
        env: Mapping[str, str] | None = None,
    ) -> None:
        build = build_shim()
        full = _shim_env(
            preload=[build / "libgleaner_shim.so"],
            role=role,
            socket_path=socket_path,
            ctl=tmp / "nvidiactl",
            job=job,
            visible_devices=visible_devices,
            gpu_index=gpu_index,
        )
        full |= {
            "PYTHONPATH": os.pathsep.join(sys.path),
            pn.ENV_LIBCUDA: str(build / "libfake_cuda.so"),
            **(env or {}),
        }
        argv = [sys.executable, "-c", driver]
        super().__init__(argv, full, tmp / f"python_stderr_{id(self)}.log")

    def request(self, cmd: Mapping[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        """Send ``cmd`` as one JSON line; the reply line, parsed."""
        self.send(json.dumps(cmd))
        out: dict[str, Any] = json.loads(self.next_line(timeout, f"reply to {dict(cmd)}"))
        return out


@contextlib.contextmanager
def running_agent(
    sock_path: Path,
    *,
    node: str,
    gpus: int = 4,
    gate: GateConfig = FAST_GATE,
    memory: MemoryConfig | None = None,
    nvml: bool = True,
    ready_timeout: float = 30.0,
    instrumentation: InstrumentationConfig | None = None,
    gate_loop: bool = True,
) -> Iterator[AgentDaemon]:
    """The real agent (nvidia backend, ``gpus`` synthetic GPUs, no cluster, no shim to
    copy) on a thread, its socket ``sock_path`` and metrics on a free loopback port; yields
    once both are up, stops it on exit. ``instrumentation``: the uninstrumented-process
    guard's settings (the default's, enforced, when None). ``gate_loop``: run the native gate
    loop (the agent's default; False: the socket path)."""
    options = AgentOptions(
        backend="nvidia",
        node=node,
        metrics_host="127.0.0.1",
        metrics_port=0,
        socket_dir=sock_path.parent,
        gpus=gpus,
        kube=False,
        gate=gate,
        memory=memory if memory is not None else MemoryConfig(),
        shim_source=sock_path.parent / "absent.so",
        nvml=nvml,
        instrumentation=instrumentation or InstrumentationConfig(),
        gate_loop=gate_loop,
    )
    d = AgentDaemon(options)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(d.run())
        except BaseException as e:
            failed.append(e)  # a failed start is raised in the test, below
            raise

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        up = wait_until(
            lambda: bool(failed) or (sock_path.exists() and d.metrics_port is not None),
            timeout=ready_timeout,
        )
        if failed:
            raise RuntimeError(f"the agent failed to start: {failed[0]!r}") from failed[0]
        assert up, f"the agent did not open {sock_path} and its metrics in {ready_timeout}s"
        yield d
    finally:
        d.stop()
        runner.join(10)


def agent_metrics(d: AgentDaemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The agent's /metrics: ``{(sample name, sorted labels): value}``."""
    import httpx

    from gleaner.testing.system import parse_metrics

    return parse_metrics(httpx.get(f"http://127.0.0.1:{d.metrics_port}/metrics", timeout=30).text)


def wait_until(pred: Callable[[], bool], timeout: float = 5.0, step: float = 0.01) -> bool:
    """Poll ``pred`` until true or ``timeout``; returns the last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()
