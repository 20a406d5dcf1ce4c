"""The nvidia backend's control server: shims connect over a Unix socket (docs/protocol.md).

Contract. :class:`ShimServer` listens on ``<socket dir>/agent.sock`` (SOCK_STREAM) inside a
running asyncio loop, reads frames with :mod:`gleaner.agent.protocol` (``recv_fds`` so that
an FD_PASS's descriptor is received), and feeds a :class:`~gleaner.agent.core.NodeAgent`:

- HELLO registers a process (role, GPUs mapped to node indices by UUID, else by index; job)
  and is answered with HELLO_ACK (an offline process learns whether its GPUs' gates are
  open); CHANNEL_ADD/FREE and MEM_HANDLES keep its channel and memory-handle tables;
- ONLINE_BUSY/IDLE drive the gate (each connection is one busy source; a non-zero
  ``request_id`` names the request: on ONLINE_IDLE it means that request finished);
  DECODE_GAP raises G_max; an online process that disconnects counts as idle;
- GATE_ACK, STATUS and HEARTBEAT are recorded; FD_PASS descriptors are kept per process and
  closed when it goes.

As the agent's :class:`~gleaner.agent.core.Sink`, the server turns gate commands into GATE
frames, written synchronously from the reading callback (the reaction path has no await):
disable goes to every offline process using that GPU; enable only to processes whose GPUs
are all enabled (multi-GPU jobs run in lockstep). Reclamation plans send the invalidated
block ids to the framework connections (INVALIDATE_BLOCKS); protocol v1 has no quarantine
remap command, so the memory side of a plan is recorded but not executed on hardware.

Event times are this process's ``time.monotonic()`` at receipt (the same clock as the loop's).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gleaner.agent import protocol as p
from gleaner.agent.core import NodeAgent
from gleaner.agent.policy import ReclaimPlan

log = logging.getLogger("gleaner.agent.server")

SOCKET_NAME = "agent.sock"


@dataclass(slots=True)
class Process:
    """One connected shim or framework hook."""

    conn_id: int
    sock: socket.socket
    decoder: p.FrameDecoder = field(default_factory=p.FrameDecoder)
    hello: p.Hello | None = None
    gpus: tuple[int, ...] = ()
    channels: dict[tuple[int, int], p.Channel] = field(default_factory=dict)
    mem_handles: dict[tuple[int, int], p.MemHandle] = field(default_factory=dict)
    fds: list[int] = field(default_factory=list)
    out: bytearray = field(default_factory=bytearray)
    seq: int = 0
    gate_open: bool = False
    last_ack: p.GateAck | None = None
    last_status: p.Status | None = None
    last_heartbeat: float = 0.0

    @property
    def role(self) -> p.Role | None:
        return None if self.hello is None else self.hello.role

    @property
    def source(self) -> str:
        return f"conn-{self.conn_id}"


class ShimServer:
    """See the module docstring."""

    def __init__(
        self,
        agent: NodeAgent,
        socket_dir: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_event: Callable[[], None] | None = None,
    ) -> None:
        self.agent = agent
        self.path = Path(socket_dir) / SOCKET_NAME
        self.clock = clock
        self.on_event = on_event
        self.processes: dict[int, Process] = {}
        self.gate_seq = itertools.count(1)
        self.frames_in = 0
        self.frames_out = 0
        self.protocol_errors = 0
        self.gate_acks_failed = 0
        self._listener: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ids = itertools.count(1)
        self._uuid_index = {g.uuid: g.index for g in agent.inventory}

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lst.bind(str(self.path))
        # Offline pods run as arbitrary users: the socket must be connectable by them.
        self.path.chmod(0o666)
        lst.listen(128)
        lst.setblocking(False)
        self._listener = lst
        self._loop.add_reader(lst.fileno(), self._accept)

    def close(self) -> None:
        if self._listener is not None and self._loop is not None:
            self._loop.remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
        for proc in list(self.processes.values()):
            self._drop(proc)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    # -- Sink -----------------------------------------------------------------------------

    def set_gate(self, gpu: int, enable: bool, t: float) -> None:
        for proc in self.processes.values():
            if proc.role != p.Role.OFFLINE or gpu not in proc.gpus:
                continue
            if enable:
                if proc.gate_open or not all(self.agent.gates[g].enabled for g in proc.gpus):
                    continue
            elif not proc.gate_open:
                continue
            proc.gate_open = enable
            self._send(proc, p.Gate(gate_seq=next(self.gate_seq), enable=enable))

    def reclaim(self, plan: ReclaimPlan, t: float) -> None:
        frameworks = [q for q in self.processes.values() if q.role == p.Role.FRAMEWORK]
        for request, blocks in plan.invalidated.items():
            msg = p.InvalidateBlocks(request_id=request[: p.REQUEST_ID_LEN - 1], block_ids=blocks)
            for proc in frameworks:
                self._send(proc, msg)

    # -- I/O ------------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None and self._loop is not None
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            proc = Process(conn_id=next(self._ids), sock=sock)
            self.processes[proc.conn_id] = proc
            self._loop.add_reader(sock.fileno(), self._readable, proc)

    def _readable(self, proc: Process) -> None:
        try:
            data, fds, _flags, _addr = socket.recv_fds(proc.sock, 65536, 8)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(proc)
            return
        if not data:
            for fd in fds:
                os.close(fd)
            self._drop(proc)
            return
        try:
            messages = proc.decoder.feed(data, fds)
        except p.ProtocolError as exc:
            self.protocol_errors += 1
            log.warning("dropping connection %s: %s", proc.conn_id, exc)
            self._drop(proc)
            return
        now = self.clock()
        for msg in messages:
            self.frames_in += 1
            self._handle(proc, msg, now)
            if proc.conn_id not in self.processes:
                return
        if self.on_event is not None:
            self.on_event()

    def _send(self, proc: Process, msg: p.Message) -> None:
        proc.seq += 1
        data = msg.encode(proc.seq)
        self.frames_out += 1
        if proc.out:
            proc.out += data
            return
        try:
            sent = proc.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._drop(proc)
            return
        if sent < len(data):
            proc.out += data[sent:]
            assert self._loop is not None
            self._loop.add_writer(proc.sock.fileno(), self._writable, proc)

    def _writable(self, proc: Process) -> None:
        try:
            sent = proc.sock.send(proc.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(proc)
            return
        del proc.out[:sent]
        if not proc.out and self._loop is not None:
            self._loop.remove_writer(proc.sock.fileno())

    def _drop(self, proc: Process) -> None:
        if self.processes.pop(proc.conn_id, None) is None:
            return
        if self._loop is not None:
            self._loop.remove_reader(proc.sock.fileno())
            if proc.out:
                self._loop.remove_writer(proc.sock.fileno())
        for fd in proc.fds + proc.decoder.pending_fds():
            with contextlib.suppress(OSError):
                os.close(fd)
        proc.sock.close()
        if proc.role == p.Role.ONLINE:
            self.agent.drop_source(self.clock(), proc.source)
        if proc.role == p.Role.OFFLINE:
            self._refresh_jobs()

    # -- messages -------------------------------------------------------------------------

    def _handle(self, proc: Process, msg: p.Message, now: float) -> None:
        if isinstance(msg, p.OnlineBusy):
            for gpu in self._edge_gpus(proc, msg.gpu):
                req = None if msg.request_id == 0 else f"{proc.source}/{msg.request_id}"
                self.agent.online_busy(now, gpu, proc.source, req)
        elif isinstance(msg, p.OnlineIdle):
            done = [] if msg.request_id == 0 else [f"{proc.source}/{msg.request_id}"]
            for gpu in self._edge_gpus(proc, msg.gpu):
                self.agent.online_idle(now, gpu, proc.source, done)
        elif isinstance(msg, p.DecodeGap):
            for gpu in self._edge_gpus(proc, msg.gpu):
                self.agent.decode_gap(now, gpu, msg.gap_ns / 1e9)
        elif isinstance(msg, p.Hello):
            self._hello(proc, msg)
        elif isinstance(msg, p.GateAck):
            proc.last_ack = msg
            if not msg.ok:
                self.gate_acks_failed += 1
                log.warning("process %s could not apply gate %s", proc.conn_id, msg.gate_seq)
        elif isinstance(msg, p.ChannelFree):
            proc.channels.pop((msg.h_client, msg.h_object), None)
        elif isinstance(msg, p.Channel):
            proc.channels[(msg.h_client, msg.h_object)] = msg
        elif isinstance(msg, p.MemHandles):
            for e in msg.entries:
                if e.flags & p.MEM_FREED:
                    proc.mem_handles.pop((e.h_client, e.h_memory), None)
                else:
                    proc.mem_handles[(e.h_client, e.h_memory)] = e
        elif isinstance(msg, p.FdPass):
            if msg.fd is not None:
                proc.fds.append(msg.fd)
        elif isinstance(msg, p.Status):
            proc.last_status = msg
        elif isinstance(msg, p.Heartbeat):
            proc.last_heartbeat = now
            self._send(proc, p.Heartbeat(mono_ns=time.monotonic_ns(), pid=os.getpid()))

    def _hello(self, proc: Process, msg: p.Hello) -> None:
        proc.hello = msg
        gpus: list[int] = []
        for i in range(max(len(msg.gpu_uuids), len(msg.gpu_indices))):
            uuid = msg.gpu_uuids[i] if i < len(msg.gpu_uuids) else ""
            if uuid in self._uuid_index:
                gpus.append(self._uuid_index[uuid])
            elif i < len(msg.gpu_indices) and msg.gpu_indices[i] in self.agent.gates:
                gpus.append(msg.gpu_indices[i])
        if not gpus and not msg.gpu_uuids and not msg.gpu_indices:
            gpus = list(self.agent.gates)  # no GPU list: the process sees the whole node
        proc.gpus = tuple(sorted(set(gpus)))
        accepted = bool(proc.gpus) or msg.role == p.Role.FRAMEWORK
        gate_open = accepted and all(self.agent.gates[g].enabled for g in proc.gpus)
        proc.gate_open = gate_open and msg.role == p.Role.OFFLINE
        self._send(
            proc,
            p.HelloAck(accepted=accepted, gate_open=proc.gate_open, gate_mode=p.GateMode.SHIM),
        )
        if msg.role == p.Role.OFFLINE:
            self._refresh_jobs()

    def _edge_gpus(self, proc: Process, gpu: int) -> tuple[int, ...]:
        if gpu == p.GPU_ALL:
            return proc.gpus
        if proc.gpus and gpu < len(proc.gpus):
            return (proc.gpus[gpu],)
        return (gpu,) if gpu in self.agent.gates else ()

    def _refresh_jobs(self) -> None:
        jobs: dict[int, str] = {}
        for proc in self.processes.values():
            if proc.role == p.Role.OFFLINE and proc.hello is not None and proc.hello.job:
                for g in proc.gpus:
                    jobs[g] = proc.hello.job
        self.agent.set_offline_jobs(self.clock(), jobs)

    def connections(self) -> dict[str, int]:
        """Connected processes by role (for metrics)."""
        out = {r.name.lower(): 0 for r in p.Role}
        for proc in self.processes.values():
            if proc.role is not None:
                out[proc.role.name.lower()] += 1
        return out
