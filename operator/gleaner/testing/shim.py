"""Test harness for the C shim: build it, run scripted RM clients under it, play the agent.

- :func:`build_shim` runs ``make -C runtime-agent/shim`` and returns the build folder
  (``libgleaner_shim.so``, ``libfake_rm.so``, ``libfake_cuda.so``, ``rm_client``,
  ``proto_dump``).
- :class:`AgentStub` is a protocol server on a Unix socket built on
  :mod:`gleaner.agent.protocol`: it records every frame each shim sends, answers HELLO
  with a configurable HELLO_ACK, sends heartbeats, and lets a test send GATE / FD_REQUEST.
- :class:`ShimProcess` runs ``rm_client`` (a scripted stand-in for libcuda's RM traffic)
  with the shim and the fake RM preloaded, one command per call.

No GPU is involved: the fake RM (``tests/fake_rm.c``) answers RM ioctls on a regular file
that stands in for /dev/nvidiactl and logs every call it receives.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from gleaner.agent import protocol as p

REPO = Path(__file__).resolve().parents[3]
SHIM_DIR = REPO / "runtime-agent" / "shim"
BUILD = SHIM_DIR / "build"

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
                    )
                    p.send_message(c, ack)
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


class ShimProcess:
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
        preload = [str(build / "libfake_rm.so")]
        if preload_shim:
            preload.insert(0, str(build / "libgleaner_shim.so"))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LD_PRELOAD": " ".join(preload),
            "GLEANER_ROLE": role,
            "GLEANER_SOCKET": str(socket_path),
            "GLEANER_JOB": "team-a/job-1",
            "NVIDIA_VISIBLE_DEVICES": "GPU-11111111-2222-3333-4444-555555555555",
            "GLEANER_GPU_INDICES": "3",
            "GLEANER_NVIDIACTL_PATH": str(self.ctl),
            "GLEANER_FAKE_RM_LOG": str(self.rm_log),
            "GLEANER_TEST_LIBCUDA": str(build / "libfake_cuda.so"),
            "GLEANER_SHIM_RECONNECT_MS": "50",
            "GLEANER_SHIM_HOLD_LOG_MS": "200",
            **(extra_env or {}),
        }
        self.stderr_path = tmp / f"shim_stderr_{id(self)}.log"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [str(build / "rm_client")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def reply(self, timeout: float = 5.0) -> dict[str, str]:
        """The next reply line parsed: ``{"result": "ok", "cmd": ..., key: value...}``."""
        line = self._lines.get(timeout=timeout)
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

    def no_reply_within(self, seconds: float) -> bool:
        try:
            line = self._lines.get(timeout=seconds)
        except queue.Empty:
            return True
        self._lines.put(line)
        return False

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

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=5)
        self._stderr.close()

    def __enter__(self) -> ShimProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_until(pred: Callable[[], bool], timeout: float = 5.0, step: float = 0.01) -> bool:
    """Poll ``pred`` until true or ``timeout``; returns the last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()
