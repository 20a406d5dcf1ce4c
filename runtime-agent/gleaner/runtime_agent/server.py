"""The nvidia backend's control server: shims connect over a Unix socket (docs/protocol.md).

Contract. :class:`ShimServer` listens on ``<socket dir>/agent.sock`` (SOCK_STREAM) inside a
running asyncio loop, reads frames with :mod:`gleaner.protocol.wire` (``recvmsg`` so that
an FD_PASS's descriptor is received), and feeds a :class:`~gleaner.runtime_agent.core.NodeAgent`:

- HELLO registers a process (role, GPUs mapped to node indices by UUID, else by index; job)
  and is answered with HELLO_ACK (an offline process learns whether its GPUs' gates are
  open); CHANNEL_ADD/FREE and MEM_HANDLES keep its channel and memory-handle tables;
- ONLINE_BUSY/IDLE drive the gate (each connection is one busy source; a non-zero
  ``request_id`` names the request: on ONLINE_IDLE it means that request finished);
  DECODE_GAP raises G_max; an online process that disconnects counts as idle (and, like
  every event, lets the shell re-arm its timers through ``on_event``);
- GATE_ACK, STATUS and HEARTBEAT are recorded; FD_PASS descriptors are kept per process and
  closed when it goes; :meth:`ShimServer.offline_status` summarizes the offline processes'
  last STATUS (why their work is held, and for how long) for the metrics.

As the agent's :class:`~gleaner.runtime_agent.core.Sink`, the server turns gate commands into GATE
frames, written synchronously from the reading callback (the reaction path has no await):
disable goes to every offline process using that GPU; enable only to processes whose GPUs
are all enabled (multi-GPU jobs run in lockstep).

The reaction path is lean: one ``recvmsg`` per readable event; ONLINE_BUSY/IDLE and GATE_ACK
frames are unpacked in place by :mod:`gleaner.runtime_agent.fastwire` (no message objects), every
other frame is decoded by :func:`gleaner.protocol.wire.decode` (a partial frame waits in
the process's buffer; an FD_PASS takes the oldest descriptor received); GATE frames are
packed in one call and sent to the GPU's offline processes, indexed per GPU; no logging on
the hot path. What offline processes send after their HELLO (GATE_ACK, channel
and memory tables, STATUS, HEARTBEAT, FD_PASS, their disconnect) needs no prompt reaction,
so those connections are not watched by the loop: a poll reads them every
``offline_poll_s`` (20 ms), which spares the loop two wakeups per gate cycle (the acks).
Online and framework connections, and every connection until its HELLO, are event-driven.

Memory. ONLINE_MEMORY reports (KV bytes in use per GPU, summed over the online
connections) feed :meth:`NodeAgent.set_online_memory`, so the MIAD reservation sees pressure;
OFFLINE_PAGE_GROUPS frames (or OFFLINE_HANDLES, the older per-page form) build each
offline hook's page table (:func:`fold_page_groups`, :func:`fold_handles`), served to the
agent as :meth:`ShimServer.offline_handle_map` (``NodeAgent.offline_handles``). A
reclamation plan is carried out in docs/agent.md's order, asynchronously, one at a time per GPU:

1. compute off: the agent's forced disable sent GATE; wait until every offline process on the
   GPU acknowledged a disable (GATE_ACK ``enabled=0``, ``ok=1``) — re-enables of that GPU are
   held back until the reclamation ends;
2. RECLAIM (the plan's handles) to the offline process that owns them (same pid as the
   reporting hook, else the same job on that GPU); wait for every RECLAIM_ACK;
3. only if every ack says ``ok``: INVALIDATE_BLOCKS per request to the framework connections
   of the GPU whose HELLO named the job placed there (or no job), the handles leave the
   table, and :meth:`NodeAgent.reclaim_completed` counts the bytes and blocks;
4. the gate hold ends (an enable the gate policy wants now is sent).

A failed ack (``ok=0``), a vanished owner or no ack within ``reclaim_timeout_s`` abandons the
reclamation: nothing is reported invalidated and nothing counted (``reclaims_failed``).

A completed reclamation names, per page, the offline process that released it (its busy-source
name, ``conn-<id>``): the agent keeps the page quarantined under it. As the sink's
``restore``, the server sends RESTORE for those pages to that process (no gate needed: the
pages hold no live blocks) and reports the RESTORE_ACK through
:meth:`NodeAgent.restore_completed`: ok → the page is back; ``ok=0`` → it stays quarantined,
except with ``ENOENT`` (the process holds no such quarantined page: forgotten); no ack within
``restore_timeout_s`` counts as a failure (a late ack is ignored). An offline process that
disconnects takes its quarantined pages with it (:meth:`NodeAgent.drop_quarantine`).

What a restart forgets comes back from the hooks. OFFLINE_PAGE_GROUPS names the pages the
engine holds quarantined; those of a hook connection's first report (up to its second
RESET), and the hook's latest ones when an offline process connects, are given to
:meth:`NodeAgent.adopt_quarantine` under the offline process on that GPU with the hook's pid
(the shim and the hook share the process). Later reports are not adopted: the agent knows
what it reclaimed since, and a report sent while a restore was under way would bring a
restored page back (were one adopted anyway, its RESTORE answers ``ENOENT`` and it is
forgotten).

Event times are this process's ``time.monotonic()`` at receipt (the same clock as the loop's).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import dataclasses
import errno
import itertools
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gleaner.protocol import wire as p
from gleaner.protocol.node import ENV_KV_PAGE_BYTES, SOCKET_NAME
from gleaner.runtime_agent import fastwire as fw
from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.policy import HandleMap, KvSpan, ReclaimPlan

log = logging.getLogger("gleaner.runtime_agent.server")

HEADER_SIZE = p.HEADER_SIZE
MAX_FDS = 8
_ANCILLARY = socket.CMSG_SPACE(MAX_FDS * 4)
_RECV_SIZE = 65536


PageTable = dict[int, Sequence[KvSpan]]
"""Page handle → the spans it holds (one hook connection, one GPU)."""


def fold_handles(table: PageTable, entries: Sequence[p.HandleSpan]) -> None:
    """Add OFFLINE_HANDLES entries to ``table`` (an entry with no request and no blocks is
    an empty page)."""
    for span in entries:
        spans = table.get(span.handle)
        if not isinstance(spans, list):  # new, or a group's shared tuple: a list of its own
            spans = table[span.handle] = list(spans or ())
        if span.request_id or span.block_ids:
            spans.append(KvSpan(span.request_id, span.block_ids, span.tokens))


def fold_page_groups(
    table: PageTable, quarantined: dict[int, int], groups: Sequence[p.PageGroup]
) -> None:
    """Add OFFLINE_PAGE_GROUPS records to ``table``: one span tuple per group, shared by its
    pages (nothing per page but the dict entry); a page in several records holds all their
    spans. Quarantined records go to ``quarantined`` (page → bytes), out of the table."""
    for group in groups:
        if group.quarantined:
            for page in group.pages:
                quarantined[page] = group.page_bytes
                table.pop(page, None)
            continue
        spans = tuple(KvSpan(sp.request_id, sp.block_ids, sp.tokens) for sp in group.spans)
        for page in group.pages:
            old = table.get(page)
            table[page] = spans if not old else (*old, *spans)


@dataclass(slots=True)
class Process:
    """One connected shim or framework hook."""

    conn_id: int
    sock: socket.socket
    source: str = ""
    """This connection's busy-source name (``conn-<id>``)."""
    pending: bytearray = field(default_factory=bytearray)
    """Bytes of a partial frame, waiting for the rest."""
    fd_queue: list[int] = field(default_factory=list)
    """Descriptors received (SCM_RIGHTS) and not yet claimed by an FD_PASS."""
    hello: p.Hello | None = None
    gpus: tuple[int, ...] = ()
    channels: dict[tuple[int, int], p.Channel] = field(default_factory=dict)
    mem_handles: dict[tuple[int, int], p.MemHandle] = field(default_factory=dict)
    fds: list[int] = field(default_factory=list)
    out: bytearray = field(default_factory=bytearray)
    seq: int = 0
    gate_open: bool = False
    gate_acks: int = 0
    gate_sent_seq: int = 0
    """The gate_seq of the last GATE sent to it."""
    last_ack_seq: int = 0
    last_ack_enabled: bool = False
    last_ack_ok: bool = True
    kv_used: dict[int, int] = field(default_factory=dict)
    """GPU → online KV bytes in use (ONLINE_MEMORY)."""
    handles: dict[int, PageTable] = field(default_factory=dict)
    """GPU → page handle → the spans it holds, in report order (OFFLINE_HANDLES, or
    OFFLINE_PAGE_GROUPS: one span tuple shared by every page of a group)."""
    quarantined: dict[int, dict[int, int]] = field(default_factory=dict)
    """GPU → page → bytes: pages the hook reports quarantined (OFFLINE_PAGE_GROUPS)."""
    resets: dict[int, int] = field(default_factory=dict)
    """GPU → OFFLINE_PAGE_GROUPS frames with RESET so far (the first report ends at the
    second): quarantined pages of the first report are offered for adoption."""
    page_bytes_warned: bool = False
    last_ack_failed: p.GateAck | None = None
    last_status: p.Status | None = None
    last_status_at: float = 0.0
    """When ``last_status`` arrived (this server's clock)."""
    last_heartbeat: float = 0.0
    offline: bool = False
    """Whether its HELLO said role OFFLINE."""
    polled: bool = False
    """Whether the poll reads it (not the loop)."""

    def __post_init__(self) -> None:
        if not self.source:
            self.source = f"conn-{self.conn_id}"

    @property
    def role(self) -> p.Role | None:
        return None if self.hello is None else self.hello.role


@dataclass(slots=True)
class PendingReclaim:
    """A reclamation under way on one GPU (see the module docstring)."""

    plan: ReclaimPlan
    targets: dict[int, tuple[int, ...]]
    """Offline connection → the plan's handles it is to release."""
    reclaim_seq: int = 0
    sent: bool = False
    acks: dict[int, p.ReclaimAck] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class PendingRestore:
    """A RESTORE sent to one offline process, waiting for its RESTORE_ACK."""

    gpu: int
    conn_id: int
    handles: tuple[int, ...]
    restore_seq: int
    timer: asyncio.TimerHandle | None = None


class ShimServer:
    """See the module docstring."""

    def __init__(
        self,
        agent: NodeAgent,
        socket_dir: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_event: Callable[[], None] | None = None,
        offline_poll_s: float = 0.02,
        reclaim_timeout_s: float = 5.0,
        restore_timeout_s: float = 5.0,
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
        self._offline_by_gpu: dict[int, list[Process]] = {}
        """GPU → the offline processes using it (GATE recipients)."""
        self.offline_poll_s = offline_poll_s
        self._polled: dict[int, Process] = {}
        """Offline processes read by the poll, not by the loop (after their HELLO)."""
        self._poll_timer: asyncio.TimerHandle | None = None
        self.reclaim_timeout_s = reclaim_timeout_s
        self._reclaims: dict[int, list[PendingReclaim]] = {}
        """GPU → reclamations under way (the first one runs)."""
        self._reclaim_seq = itertools.count(1)
        self.reclaims_done = 0
        self.reclaims_failed = 0
        self.restore_timeout_s = restore_timeout_s
        self._restores: dict[int, PendingRestore] = {}
        """restore_seq → a RESTORE waiting for its ack."""
        self._restore_seq = itertools.count(1)
        self.restores_done = 0
        self.restores_failed = 0

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
        if self._poll_timer is not None:
            self._poll_timer.cancel()
            self._poll_timer = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    # -- Sink -----------------------------------------------------------------------------

    def set_gate(self, gpu: int, enable: bool, t: float) -> None:
        procs = self._offline_by_gpu.get(gpu)
        if not procs:
            return
        for proc in tuple(procs):  # a failed send drops the process from the list
            if enable:
                if proc.gate_open or not all(self.agent.gates[g].enabled for g in proc.gpus):
                    continue
                if self._reclaims and any(self._reclaims.get(g) for g in proc.gpus):
                    continue  # memory is being taken from it: compute stays off until done
            elif not proc.gate_open:
                continue
            proc.gate_open = enable
            proc.seq += 1
            gseq = next(self.gate_seq)
            proc.gate_sent_seq = gseq
            self._send_bytes(proc, fw.encode_gate(proc.seq, gseq, enable))

    def reclaim(self, plan: ReclaimPlan, t: float) -> bool:
        """Start carrying ``plan`` out (module docstring); always False: it ends later."""
        owners: dict[int, Process] = {}
        for h in plan.handles:
            for q in self.processes.values():
                if h in q.handles.get(plan.gpu, {}):
                    owners[h] = q
                    break
        targets: dict[int, list[int]] = {}
        offline = self._offline_by_gpu.get(plan.gpu, [])
        for h in plan.handles:
            hook = owners.get(h)
            if hook is None or hook.hello is None:
                continue
            same_pid = [q for q in offline if q.hello is not None and q.hello.pid == hook.hello.pid]
            chosen = same_pid or [
                q for q in offline if q.hello is not None and q.hello.job == hook.hello.job
            ]
            for q in chosen:
                targets.setdefault(q.conn_id, []).append(h)
        if not targets:
            self.reclaims_failed += 1
            log.warning("reclamation on GPU %s: no offline process owns its handles", plan.gpu)
            return False
        pending = PendingReclaim(plan, {c: tuple(hs) for c, hs in targets.items()})
        queue = self._reclaims.setdefault(plan.gpu, [])
        queue.append(pending)
        if len(queue) == 1:
            self._start_reclaim(plan.gpu)
        return False

    def restore(self, gpu: int, owner: str, handles: tuple[int, ...], t: float) -> bool:
        """Send RESTORE to ``owner`` (module docstring); False: its ack finishes it."""
        proc = next((q for q in self.processes.values() if q.offline and q.source == owner), None)
        if proc is None:
            self.restores_failed += 1
            self.agent.restore_completed(self.clock(), gpu, handles, ok=False, forget=True)
            return False
        pending = PendingRestore(gpu, proc.conn_id, handles, next(self._restore_seq))
        self._restores[pending.restore_seq] = pending
        if self._loop is not None:
            pending.timer = self._loop.call_later(
                self.restore_timeout_s, self._restore_timed_out, pending.restore_seq
            )
        self._send(proc, p.Restore(pending.restore_seq, gpu, handles))
        return False

    def _restore_ack(self, proc: Process, msg: p.RestoreAck) -> None:
        pending = self._restores.get(msg.restore_seq)
        if pending is None or pending.conn_id != proc.conn_id:
            return  # late (timed out) or not ours
        self._end_restore(pending)
        ok = msg.ok and msg.restored >= len(pending.handles)
        if ok:
            self.restores_done += 1
        else:
            self.restores_failed += 1
            log.warning("RESTORE on GPU %s refused (err %s)", pending.gpu, msg.err)
        self.agent.restore_completed(
            self.clock(),
            pending.gpu,
            pending.handles,
            ok=ok,
            forget=not msg.ok and msg.err == errno.ENOENT,
        )

    def _restore_timed_out(self, restore_seq: int) -> None:
        pending = self._restores.get(restore_seq)
        if pending is None:
            return
        pending.timer = None
        self._end_restore(pending)
        self.restores_failed += 1
        log.warning("RESTORE on GPU %s not acknowledged in time", pending.gpu)
        self.agent.restore_completed(self.clock(), pending.gpu, pending.handles, ok=False)

    def _end_restore(self, pending: PendingRestore) -> None:
        self._restores.pop(pending.restore_seq, None)
        if pending.timer is not None:
            pending.timer.cancel()
            pending.timer = None

    def offline_handle_map(self, gpu: int) -> HandleMap:
        """The offline page handles on ``gpu`` (report order), minus those being reclaimed."""
        busy = {h for r in self._reclaims.get(gpu, ()) for h in r.plan.handles}
        table: dict[int, list[KvSpan]] = {}
        for q in self.processes.values():
            for h, spans in q.handles.get(gpu, {}).items():
                if h not in busy:
                    table.setdefault(h, []).extend(spans)
        return table

    def _start_reclaim(self, gpu: int) -> None:
        queue = self._reclaims.get(gpu)
        if not queue:
            return
        pending = queue[0]
        if self._loop is not None and pending.timer is None:
            pending.timer = self._loop.call_later(
                self.reclaim_timeout_s, self._finish_reclaim, gpu, pending, "timed out"
            )
        self._advance_reclaim(gpu)

    def _advance_reclaim(self, gpu: int) -> None:
        """Move the running reclamation on ``gpu`` forward if what it waits for came."""
        queue = self._reclaims.get(gpu)
        if not queue:
            return
        pending = queue[0]
        if not pending.sent:
            for q in self._offline_by_gpu.get(gpu, []):
                if q.gate_open or q.last_ack_seq < q.gate_sent_seq:
                    return  # a disable not yet acknowledged
                if q.gate_sent_seq and (q.last_ack_enabled or not q.last_ack_ok):
                    self._finish_reclaim(gpu, pending, f"process {q.conn_id} did not disable")
                    return
            pending.sent = True
            pending.reclaim_seq = next(self._reclaim_seq)
            for conn_id, handles in pending.targets.items():
                proc = self.processes.get(conn_id)
                if proc is None:
                    self._finish_reclaim(gpu, pending, f"process {conn_id} went away")
                    return
                self._send(proc, p.Reclaim(pending.reclaim_seq, gpu, handles))
            return
        if any(c not in pending.acks for c in pending.targets):
            return
        failed = [a for a in pending.acks.values() if not a.ok]
        if failed:
            self._finish_reclaim(gpu, pending, f"RECLAIM refused (err {failed[0].err})")
        else:
            self._finish_reclaim(gpu, pending, None)

    def _finish_reclaim(self, gpu: int, pending: PendingReclaim, error: str | None) -> None:
        queue = self._reclaims.get(gpu, [])
        if pending not in queue:
            return
        queue.remove(pending)
        if not queue:
            self._reclaims.pop(gpu, None)
        if pending.timer is not None:
            pending.timer.cancel()
        now = self.clock()
        plan = pending.plan
        if error is None:
            self.reclaims_done += 1
            gone = set(plan.handles)
            for q in self.processes.values():
                table = q.handles.get(gpu)
                if table:
                    for h in gone & table.keys():
                        del table[h]
            self.send_invalidations(plan)
            owners: dict[int, str] = {}
            for conn_id, handles in pending.targets.items():
                proc = self.processes.get(conn_id)
                for h in handles:
                    if proc is not None:
                        owners.setdefault(h, proc.source)
            self.agent.reclaim_completed(now, plan, owners)
        else:
            self.reclaims_failed += 1
            log.warning("reclamation on GPU %s abandoned: %s", gpu, error)
        if self.agent.gates[gpu].enabled:
            self.set_gate(gpu, True, now)  # the enable held back meanwhile
        if self.on_event is not None:
            self.on_event()
        self._start_reclaim(gpu)

    def _reclaim_ack(self, proc: Process, msg: p.ReclaimAck) -> None:
        for gpu, queue in list(self._reclaims.items()):
            pending = queue[0]
            if pending.sent and pending.reclaim_seq == msg.reclaim_seq:
                if proc.conn_id in pending.targets:
                    pending.acks[proc.conn_id] = msg
                    self._advance_reclaim(gpu)
                return

    def send_invalidations(self, plan: ReclaimPlan) -> None:
        # Block ids mean something only in the engine that holds them: a hook that named
        # its job hears only about the job on the plan's GPU.
        job = self.agent.offline_jobs.get(plan.gpu)
        frameworks = [
            q
            for q in self.processes.values()
            if q.role == p.Role.FRAMEWORK
            and q.hello is not None
            and plan.gpu in q.gpus
            and (not q.hello.job or q.hello.job == job)
        ]
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
            conn_id = next(self._ids)
            proc = Process(conn_id=conn_id, sock=sock, source=f"conn-{conn_id}")
            self.processes[proc.conn_id] = proc
            self._loop.add_reader(sock.fileno(), self._readable, proc)

    def _readable(self, proc: Process) -> bool:
        """Read once and handle what came; False when nothing did (or the process went)."""
        try:
            data, ancillary, _flags, _addr = proc.sock.recvmsg(_RECV_SIZE, _ANCILLARY)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            self._drop(proc)
            return False
        fds = _received_fds(ancillary) if ancillary else []
        if not data:
            for fd in fds:
                os.close(fd)
            self._drop(proc)
            return False
        if fds:
            proc.fd_queue.extend(fds)
        if proc.pending:
            proc.pending += data
            data = bytes(proc.pending)
            proc.pending.clear()
        if not self._consume(proc, data, self.clock()):
            return False
        if self.on_event is not None:
            self.on_event()
        if proc.offline and not proc.polled:
            self._poll_instead(proc)
        return True

    def _poll_instead(self, proc: Process) -> None:
        """Stop watching an offline connection; the poll reads it from now on."""
        assert self._loop is not None
        self._loop.remove_reader(proc.sock.fileno())
        proc.polled = True
        self._polled[proc.conn_id] = proc
        if self._poll_timer is None:
            self._poll_timer = self._loop.call_later(self.offline_poll_s, self._poll)

    def _poll(self) -> None:
        self._poll_timer = None
        for proc in list(self._polled.values()):
            for _ in range(64):  # drain, but let a flooding process not hold the loop
                if not self._readable(proc):
                    break
        if self._polled and self._loop is not None:
            self._poll_timer = self._loop.call_later(self.offline_poll_s, self._poll)

    def _consume(self, proc: Process, data: bytes, now: float) -> bool:
        """Handle every complete frame of ``data``, keep a partial one (False: dropped)."""
        agent = self.agent
        header, fast_sizes = fw.HEADER.unpack_from, fw.FAST_SIZES
        offset, size = 0, len(data)
        while offset < size:
            # The frames fastwire takes: complete, well-formed, of a hot type (else mtype 0).
            mtype = 0
            if size - offset >= HEADER_SIZE:
                magic, version, mtype, _flags, length, _seq = header(data, offset)
                body = offset + HEADER_SIZE
                end = body + length
                if (
                    magic != p.MAGIC
                    or version != p.VERSION
                    or fast_sizes.get(mtype) != length
                    or end > size
                ):
                    mtype = 0
            if not mtype:
                try:
                    msg, used = p.decode(memoryview(data)[offset:])
                except p.ProtocolError as exc:
                    self.protocol_errors += 1
                    log.warning("dropping connection %s: %s", proc.conn_id, exc)
                    self._drop(proc)
                    return False
                if msg is None:
                    proc.pending += data[offset:]
                    return True
                offset += used
                if isinstance(msg, p.FdPass) and proc.fd_queue:
                    msg = dataclasses.replace(msg, fd=proc.fd_queue.pop(0))
                self.frames_in += 1
                self._handle(proc, msg, now)
                if proc.conn_id not in self.processes:
                    return False
                continue
            offset = end
            self.frames_in += 1
            if mtype == fw.T_GATE_ACK:
                gate_seq, _lat, _gpu, enabled, ok = fw.GATE_ACK_HEAD.unpack_from(data, body)
                proc.gate_acks += 1
                proc.last_ack_seq = gate_seq
                proc.last_ack_enabled = bool(enabled)
                proc.last_ack_ok = bool(ok)
                if not ok:
                    self._ack_failed(proc, p.GateAck.from_payload(data[body:end], 0))
                if self._reclaims:
                    self._gate_acked(proc)
                continue
            gpu, _mono, request = fw.EDGE.unpack_from(data, body)
            gpus = proc.gpus if gpu == p.GPU_ALL else self._edge_gpus(proc, gpu)
            if mtype == fw.T_BUSY:
                name = f"{proc.source}/{request}" if request else None
                for g in gpus:
                    agent.online_busy(now, g, proc.source, name)
            else:
                done = (f"{proc.source}/{request}",) if request else ()
                for g in gpus:
                    agent.online_idle(now, g, proc.source, done)
            if proc.conn_id not in self.processes:
                return False
        return True

    def _ack_failed(self, proc: Process, msg: p.GateAck) -> None:
        self.gate_acks_failed += 1
        proc.last_ack_failed = msg
        log.warning("process %s could not apply gate %s", proc.conn_id, msg.gate_seq)

    def _send(self, proc: Process, msg: p.Message) -> None:
        proc.seq += 1
        self._send_bytes(proc, msg.encode(proc.seq))

    def _send_bytes(self, proc: Process, data: bytes) -> None:
        """Write one whole frame (``proc.seq`` already counted); the rest is queued."""
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
        polled = self._polled.pop(proc.conn_id, None) is not None
        if self._loop is not None:
            if not polled:
                self._loop.remove_reader(proc.sock.fileno())
            if proc.out:
                self._loop.remove_writer(proc.sock.fileno())
        for fd in proc.fds + proc.fd_queue:
            with contextlib.suppress(OSError):
                os.close(fd)
        proc.sock.close()
        self._unindex(proc)
        if proc.role == p.Role.ONLINE:
            self.agent.drop_source(self.clock(), proc.source)
        if proc.role == p.Role.OFFLINE:
            self._refresh_jobs()
            self.agent.drop_quarantine(proc.source)  # its quarantined pages went with it
            for pending_restore in list(self._restores.values()):
                if pending_restore.conn_id == proc.conn_id:
                    self._end_restore(pending_restore)
        for gpu in proc.kv_used:
            self._online_memory(gpu, self.clock())
        for gpu, queue in list(self._reclaims.items()):
            if queue and proc.conn_id in queue[0].targets:
                self._finish_reclaim(gpu, queue[0], f"process {proc.conn_id} went away")
            elif queue and not queue[0].sent:
                self._advance_reclaim(gpu)  # it may have been the one not yet acknowledged
        if self.on_event is not None:
            self.on_event()  # a disconnect is an event: an idle edge arms its cooldown timer

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
            proc.gate_acks += 1
            proc.last_ack_seq = msg.gate_seq
            proc.last_ack_enabled = msg.enabled
            proc.last_ack_ok = msg.ok
            if not msg.ok:
                self._ack_failed(proc, msg)
            if self._reclaims:
                self._gate_acked(proc)
        elif isinstance(msg, p.ReclaimAck):
            self._reclaim_ack(proc, msg)
        elif isinstance(msg, p.RestoreAck):
            self._restore_ack(proc, msg)
        elif isinstance(msg, p.OnlineMemory):
            for gpu in self._edge_gpus(proc, msg.gpu):
                proc.kv_used[gpu] = msg.kv_used_bytes
                self._online_memory(gpu, now)
        elif isinstance(msg, p.OfflineHandles):
            for gpu in self._edge_gpus(proc, msg.gpu):
                table = proc.handles.setdefault(gpu, {})
                if msg.reset:
                    table.clear()
                fold_handles(table, msg.entries)
        elif isinstance(msg, p.OfflinePageGroups):
            self._page_groups(proc, msg, now)
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
            proc.last_status_at = now
        elif isinstance(msg, p.Heartbeat):
            proc.last_heartbeat = now
            self._send(proc, p.Heartbeat(mono_ns=time.monotonic_ns(), pid=os.getpid()))

    def _page_groups(self, proc: Process, msg: p.OfflinePageGroups, now: float) -> None:
        """OFFLINE_PAGE_GROUPS: the hook's page table by group; quarantined groups are kept
        apart, and those of the connection's first report are offered for adoption (later
        ones the agent knows: it reclaimed them; a report racing a restore is not trusted)."""
        handle_bytes = self.agent.memory_config.handle_bytes
        odd = next((g.page_bytes for g in msg.groups if g.page_bytes != handle_bytes), None)
        if odd is not None and not proc.page_bytes_warned:
            proc.page_bytes_warned = True
            log.warning(
                "%s reports %d-byte KV pages; the agent plans in %d-byte handles, so its "
                "reclaimed and restored byte counts will be off (leave %s at its default)",
                proc.source,
                odd,
                handle_bytes,
                ENV_KV_PAGE_BYTES,
            )
        for gpu in self._edge_gpus(proc, msg.gpu):
            table = proc.handles.setdefault(gpu, {})
            held = proc.quarantined.setdefault(gpu, {})
            if msg.reset:
                table.clear()
                held.clear()
                proc.resets[gpu] = proc.resets.get(gpu, 0) + 1
            fold_page_groups(table, held, msg.groups)
            if held and proc.resets.get(gpu, 0) <= 1:
                self._adopt(proc, gpu, now)

    def _adopt(self, hook: Process, gpu: int, now: float) -> None:
        """Give the agent the quarantined pages ``hook`` reported on ``gpu`` that it does not
        know, under the offline process of the same pid (the one that holds them)."""
        pages = hook.quarantined.get(gpu)
        if not pages or hook.hello is None:
            return
        owner = next(
            (
                q
                for q in self._offline_by_gpu.get(gpu, [])
                if q.hello is not None and q.hello.pid == hook.hello.pid
            ),
            None,
        )
        if owner is None:
            return  # its HELLO adopts them when it (re)connects
        adopted = self.agent.adopt_quarantine(now, gpu, owner.source, pages)
        if adopted:
            log.info(
                "GPU %s: %d quarantined pages of pid %d taken back (agent restart or reconnect)",
                gpu,
                adopted,
                hook.hello.pid,
            )

    def _gate_acked(self, proc: Process) -> None:
        for g in proc.gpus:
            if g in self._reclaims:
                self._advance_reclaim(g)

    def _online_memory(self, gpu: int, now: float) -> None:
        used = sum(q.kv_used.get(gpu, 0) for q in self.processes.values())
        self.agent.set_online_memory(now, gpu, dynamic_bytes=used)

    def _hello(self, proc: Process, msg: p.Hello) -> None:
        self._unindex(proc)
        proc.hello = msg
        proc.offline = msg.role == p.Role.OFFLINE
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
            for g in proc.gpus:
                self._offline_by_gpu.setdefault(g, []).append(proc)
            self._refresh_jobs()
            # A reconnecting process: its hook still knows the pages it holds quarantined.
            now = self.clock()
            for hook in list(self.processes.values()):
                hello = hook.hello
                if hello is not None and hello.role == p.Role.FRAMEWORK and hello.pid == msg.pid:
                    for g in proc.gpus:
                        self._adopt(hook, g, now)

    def _unindex(self, proc: Process) -> None:
        for procs in self._offline_by_gpu.values():
            if proc in procs:
                procs.remove(proc)

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

    def offline_status(self, now: float) -> OfflineStatus:
        """What the connected offline processes last said about their state (for metrics)."""
        return summarize_offline_status(
            [
                (q.hello.job if q.hello is not None else "", q.last_status, q.last_status_at)
                for q in self.processes.values()
                if q.role == p.Role.OFFLINE
            ],
            now,
        )

    def connections(self) -> dict[str, int]:
        """Connected processes by role (for metrics)."""
        out = {r.name.lower(): 0 for r in p.Role}
        for proc in self.processes.values():
            if proc.role is not None:
                out[proc.role.name.lower()] += 1
        return out


UNREPORTED = "unreported"
"""The status of an offline process that has sent no STATUS yet."""


@dataclass(frozen=True, slots=True)
class OfflineStatus:
    """Offline processes by their last STATUS, and how long each job's work has been held."""

    processes: dict[str, int]
    """Status name (``ok``, ``gated_by_agent``, ``no_agent``, ``no_handles``,
    ``control_refused``, ``protocol_error``, ``unreported``) → processes; every name present."""
    held_seconds: dict[str, float]
    """Job (``namespace/name``) → the longest time one of its processes has had GPU work
    held, as of now (0 when none is held)."""


def summarize_offline_status(
    procs: list[tuple[str, p.Status | None, float]], now: float
) -> OfflineStatus:
    """Pure: ``(job, last STATUS, its arrival time)`` per offline process → :class:`OfflineStatus`.

    A process holds work while its last STATUS is not OK and names blocked threads; the hold
    has lasted ``blocked_ns`` at that STATUS plus the time since it arrived (the shim repeats
    STATUS at least every 5 s while blocked, and at once when its state changes).
    """
    counts = {c.name.lower(): 0 for c in p.StatusCode}
    counts[UNREPORTED] = 0
    held: dict[str, float] = {}
    for job, st, at in procs:
        counts[UNREPORTED if st is None else st.code.name.lower()] += 1
        seconds = 0.0
        if st is not None and st.code != p.StatusCode.OK and st.blocked_threads > 0:
            seconds = st.blocked_ns / 1e9 + max(0.0, now - at)
        if job:
            held[job] = max(held.get(job, 0.0), seconds)
    return OfflineStatus(processes=counts, held_seconds=held)


def _received_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """Descriptors carried by SCM_RIGHTS control messages."""
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % 4
            fds.extend(array.array("i", payload[:usable]))
    return fds
