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
Online and framework connections, and every connection until its HELLO, are event-driven;
so are offline ones while a native gate loop runs (they are quiet then, and the poll would
be the event loop's main cost).

The native gate path. :meth:`ShimServer.start` also creates the shared-memory gate segment
(:class:`~gleaner.runtime_agent.fastgate.GateSegment`, ``<socket dir>/gate.shm``): online
shims bump it at a busy edge and offline shims close their own gates on it, without this
loop (docs/shim.md, "The native gate path"). At every busy frame the server notes the
segment's ``busy_seq`` of its GPUs; before every enable it sends (GATE, or an open
HELLO_ACK) it stores that as the GPUs' ``open_seq`` and beats the heartbeat, so a shim
refuses an enable decided before a busy edge whose frame this loop has not read yet; :meth:`beat` is
the daemon's periodic heartbeat; :meth:`close` retires the segment.

The native gate loop (``gate_loop``; docs/shim.md, "The native gate loop"): :meth:`start`
starts :class:`~gleaner.runtime_agent.gatelib.GateLoop` on the segment and becomes the
agent's :class:`~gleaner.runtime_agent.core.NativeGates` (holds and reclamation closes go
to the loop too); the loop owns ``open_seq``; :meth:`beat` also drains the loop's accounting
log into the agent (``NodeAgent.absorb_native``) and notes a loop that stopped
(``loop_error``); :meth:`close` stops the loop before it retires the segment.

Memory. ONLINE_MEMORY reports (KV bytes in use per GPU, summed over the online
connections) feed :meth:`NodeAgent.set_online_memory`, so the MIAD reservation sees pressure;
OFFLINE_PAGE_GROUPS frames (or OFFLINE_HANDLES, the older per-page form) build each
offline hook's page table (:func:`fold_page_groups`, :func:`fold_handles`), served to the
agent as :meth:`ShimServer.offline_handle_map` (``NodeAgent.offline_handles``; pages being
reclaimed left out).

Reclamation and restore are decided by a pure state machine,
:class:`~gleaner.runtime_agent.policy.reclaim_sequence.ReclaimSequence` (its docstring has
the order and the guarantees; docs/agent.md, "Limits" and "Memory given back"). As the sink's
``reclaim`` the server picks the offline processes that are to release the plan's pages
(:func:`~gleaner.runtime_agent.policy.reclaim_sequence.reclaim_targets`: the process with the
reporting hook's pid, else those of its job on that GPU) and hands the plan over; as the
sink's ``restore`` it hands over the page's holder. It feeds the machine every HELLO of an
offline process, every GATE it sends and every GATE_ACK, RECLAIM_ACK and RESTORE_ACK it
reads, every disconnect, and calls its ``tick`` from one loop timer kept at its next
deadline. It carries out what comes back, in order: RECLAIM and RESTORE frames; for a
completed reclamation, the pages leave the tables, INVALIDATE_BLOCKS goes per request to the
framework connections of the GPU whose HELLO named the job placed there (or no job), and
:meth:`NodeAgent.reclaim_completed` counts it with, per page, the process that holds it
quarantined (its busy-source name, ``conn-<id>``); an abandoned one is logged; at each end
of a reclamation an enable the gate wants now is sent (:meth:`ShimServer.set_gate` holds
enables back while the machine says ``holding``); a restore's end goes to
:meth:`NodeAgent.restore_completed`. An offline process that disconnects takes its
quarantined pages with it (:meth:`NodeAgent.drop_quarantine`).

What a restart forgets comes back from the hooks. OFFLINE_PAGE_GROUPS names the pages the
engine holds quarantined; those of a hook connection's first report (up to its second
RESET), and the hook's latest ones when an offline process connects, are given to
:meth:`NodeAgent.adopt_quarantine` under the offline process on that GPU with the hook's pid
(the shim and the hook share the process), and to the reclaim sequence (which sends RESTORE
only for pages it knows that process holds). Later reports are not adopted: the agent knows
what it reclaimed since, and a report sent while a restore was under way would bring a
restored page back (were one adopted anyway, its RESTORE answers ``ENOENT`` and it is
forgotten).

Every HELLO, read and disconnect is told to ``instrumentation`` (when set), which holds the
gates of GPUs with processes no connected shim accounts for (docs/agent.md, "Uninstrumented
processes").

Event times are this process's ``time.monotonic()`` at receipt (the same clock as the loop's).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gleaner.protocol import wire as p
from gleaner.protocol.node import ENV_KV_PAGE_BYTES, SOCKET_NAME
from gleaner.runtime_agent import fastwire as fw
from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.fastgate import (
    DEFAULT_STALE_S,
    EDGE_BUSY,
    EDGE_GAP,
    EDGE_IDLE,
    GateSegment,
    segment_path,
)
from gleaner.runtime_agent.gatelib import GateLibraryError, GateLoop
from gleaner.runtime_agent.instrumented import InstrumentationWatch
from gleaner.runtime_agent.policy import HandleMap, KvSpan, ReclaimPlan
from gleaner.runtime_agent.policy.instrumented import Role
from gleaner.runtime_agent.policy.reclaim_sequence import (
    HoldEnded,
    ReclaimAbandoned,
    ReclaimCommand,
    ReclaimCompleted,
    ReclaimSequence,
    RestoreEnd,
    SendReclaim,
    SendRestore,
    reclaim_targets,
)

log = logging.getLogger("gleaner.runtime_agent.server")

REGATE_INTERVAL_S = 1.0
"""At most this often, an enable is re-sent to an offline shim that holds work the server
told it to run (see :meth:`ShimServer._regate`)."""
_REGATE_CODES = frozenset({p.StatusCode.GATED_BY_AGENT, p.StatusCode.NO_AGENT})
"""STATUS codes of a shim that would open on an enable (not CONTROL_REFUSED: it refuses)."""

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
    """Whether the last gate it was told (HELLO_ACK, then GATE) was open."""
    gate_acks: int = 0
    last_ack_seq: int = 0
    """The gate_seq its last GATE_ACK named (the reclaim sequence keeps what it decides on)."""
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
    regate_at: float = float("-inf")
    """When the server last re-sent this process an enable it had refused (at most 1/s)."""
    regate_timer: asyncio.TimerHandle | None = None
    """A re-send deferred to the end of the interval (a STATUS that came too early for one)."""
    offline: bool = False
    """Whether its HELLO said role OFFLINE."""
    polled: bool = False
    """Whether the poll reads it (not the loop)."""
    peer_pid: int | None = None
    """The peer's pid from the socket's credentials (this process's pid namespace; None:
    unknown, e.g. a peer in a pid namespace this one cannot see)."""

    def __post_init__(self) -> None:
        if not self.source:
            self.source = f"conn-{self.conn_id}"

    @property
    def role(self) -> p.Role | None:
        return None if self.hello is None else self.hello.role


_ROLE_NAMES: dict[p.Role, Role] = {p.Role.ONLINE: "online", p.Role.OFFLINE: "offline"}


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
        gate_segment: bool = True,
        gate_stale_s: float = DEFAULT_STALE_S,
        gate_loop: bool = False,
    ) -> None:
        self.agent = agent
        self.path = Path(socket_dir) / SOCKET_NAME
        self.gate_segment = gate_segment
        self.gate_loop = gate_loop
        self.framed_edges = 0
        """Online edges that came as frames and went into the native gate loop's ring."""
        self.loop: GateLoop | None = None
        """The native gate loop (docs/shim.md, "The native gate loop") on the segment, when
        ``gate_loop`` and the segment exists; None otherwise (``loop_error`` says why)."""
        self.loop_error: str | None = None
        self._slot = {g.index: k for k, g in enumerate(agent.inventory)}
        """GPU → its slot in the segment (the inventory's order, as created)."""
        self.gate_stale_s = gate_stale_s
        self.segment: GateSegment | None = None
        """The shared-memory gate segment (docs/shim.md, "The native gate path"), once
        started; None when disabled or its creation failed (logged, shown in /healthz)."""
        self.segment_error: str | None = None
        self._seen_seq: dict[int, int] = {}
        """GPU → the segment's busy_seq as read at its latest busy frame (its open_seq at
        the next enable)."""
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
        self.sequence = ReclaimSequence(reclaim_timeout_s, restore_timeout_s)
        """What RECLAIM and RESTORE go where, and when they are over (the decisions)."""
        self._sequence_timer: asyncio.TimerHandle | None = None
        self._sequence_timer_at: float | None = None
        self.instrumentation: InstrumentationWatch | None = None
        """Told of every HELLO, frame and disconnect (uninstrumented-process guard)."""

    @property
    def reclaims_done(self) -> int:
        return self.sequence.reclaims_done

    @property
    def reclaims_failed(self) -> int:
        return self.sequence.reclaims_failed

    @property
    def restores_done(self) -> int:
        return self.sequence.restores_done

    @property
    def restores_failed(self) -> int:
        return self.sequence.restores_failed

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
        if self.gate_segment:
            gpus = [(g.index, g.uuid) for g in self.agent.inventory]
            try:
                self.segment = GateSegment.create(
                    segment_path(self.path.parent), gpus, stale_s=self.gate_stale_s
                )
            except (OSError, ValueError) as exc:
                # The socket path alone still gates (every GATE goes out as before).
                self.segment_error = str(exc)
                log.warning("no shared-memory gate segment (%s): busy edges take the socket", exc)
        if self.gate_loop and self.segment is None:
            self.loop_error = "no shared-memory gate segment"
        elif self.gate_loop and self.segment is not None:
            try:
                self.loop = GateLoop(self.segment.address, self.agent.gate_config.native())
            except GateLibraryError as exc:
                self.loop_error = str(exc)
                log.warning("no native gate loop (%s): the agent's event loop gates", exc)
            else:
                self.agent.native = self
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
        if self._sequence_timer is not None:
            self._sequence_timer.cancel()
            self._sequence_timer = self._sequence_timer_at = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        if self.loop is not None:
            self.loop.stop()  # the segment says it stopped: offline gates close
            self.agent.absorb_native(self.loop.drain_log())
            self.loop.close()
            self.loop = None
        if self.segment is not None:
            self.segment.retire()
            self.segment = None

    def beat(self) -> None:
        """The segment's heartbeat (the daemon calls it every ``BEAT_INTERVAL_S``); with a
        native gate loop, also its accounting, drained in one batch."""
        if self.segment is not None:
            self.segment.beat()
        loop = self.loop
        if loop is not None:
            self.agent.absorb_native(loop.drain_log())
            if not loop.alive and not self.loop_error:
                self.loop_error = "the native gate loop stopped: offline GPU work is held"
                log.error("%s", self.loop_error)

    # -- NativeGates ------------------------------------------------------------------------

    def hold(self, gpu: int, held: bool) -> None:
        if self.loop is not None:
            self.loop.hold(self._slot[gpu], held)

    def force_disable(self, gpu: int) -> None:
        if self.loop is not None:
            self.loop.force_disable(self._slot[gpu])

    def _loop_edge(
        self, proc: Process, kind: int, gpus: Sequence[int], request: int = 0, gap_ns: int = 0
    ) -> None:
        """An online edge that came as a frame while the native gate loop runs (a connection
        without the ring: before its HELLO_ACK, without a free busy word, or a framework hook
        naming requests): into the loop's ring as this connection's, with the shims' writer,
        so the loop's accounting, the node's, covers it (one accounting: docs/agent.md). The
        agent's own gates still gate it too (GATE frames, which the offline shims AND with
        the loop's word)."""
        loop = self.loop
        assert loop is not None
        mask = 0
        for g in gpus:
            if (k := self._slot.get(g)) is not None:
                mask |= 1 << k
        if mask:  # the loop's time base is CLOCK_MONOTONIC, whatever clock the agent reads
            loop.edge(proc.conn_id, kind, mask, time.monotonic_ns(), request, gap_ns)
            self.framed_edges += 1

    def _saw_busy(self, gpus: Sequence[int]) -> None:
        """A busy frame: every bump up to its own is in the segment now (shims bump first)."""
        seg = self.segment
        assert seg is not None
        for g in gpus:
            self._seen_seq[g] = seg.busy_seq(g)

    def _allow(self, gpus: Sequence[int]) -> None:
        """Before telling a process its gate is open: open_seq = the busy edges handled.
        (Not the segment's busy_seq now: a bump whose frame is still unread in a socket
        would be let through, and offline work would run beside that online burst.)"""
        seg = self.segment
        if seg is not None:
            if self.loop is None:  # a native gate loop owns open_seq
                for g in gpus:
                    seg.allow(g, self._seen_seq.get(g, 0))
            seg.beat()

    # -- Sink -----------------------------------------------------------------------------

    def set_gate(self, gpu: int, enable: bool, t: float) -> None:
        procs = self._offline_by_gpu.get(gpu)
        if not procs:
            return
        for proc in tuple(procs):  # a failed send drops the process from the list
            if enable:
                if proc.gate_open or not all(self.agent.gates[g].enabled for g in proc.gpus):
                    continue
                seq = self.sequence
                if seq.active and any(seq.holding(g) for g in proc.gpus):
                    continue  # memory is being taken from it: compute stays off until done
            elif not proc.gate_open:
                continue
            proc.gate_open = enable
            proc.seq += 1
            gseq = next(self.gate_seq)
            if enable:
                self._allow(proc.gpus)
            self._send_bytes(proc, fw.encode_gate(proc.seq, gseq, enable))
            self.sequence.gate_sent(proc.conn_id, gseq, enable)  # after the send: off the path

    def _regate(self, proc: Process) -> None:
        """The shim holds work while this server told it open (it refused an enable decided
        before an edge's frame was read, or its segment's heartbeat went stale and came
        back): send the enable again, with a fresh ``open_seq``, if the policy still wants it.

        What the other connections already sent is read first: after a stall (the STATUS that
        asks for this enable can be read before them), an online busy edge or a disconnect
        still unread would otherwise reach the policy after the enable, and offline work
        would run beside that online burst or over a lost online process."""
        self._read_others_first(proc)
        if not proc.gate_open or self.processes.get(proc.conn_id) is not proc:
            return  # what was read closed it (a busy edge, a held GPU) or it went
        if not all(self.agent.gates[g].enabled for g in proc.gpus):
            return
        seq = self.sequence
        if seq.active and any(seq.holding(g) for g in proc.gpus):
            return
        proc.seq += 1
        gseq = next(self.gate_seq)
        self._allow(proc.gpus)
        self._send_bytes(proc, fw.encode_gate(proc.seq, gseq, True))
        self.sequence.gate_sent(proc.conn_id, gseq, True)

    def _read_others_first(self, proc: Process) -> None:
        """Handle what every connection but the offline ones (and ``proc``) has sent so far,
        connections still waiting to be accepted included: online edges, HELLOs and
        disconnects (bounded, as the poll: a flooding connection does not hold the loop)."""
        if self._listener is not None:
            self._accept()
        for other in list(self.processes.values()):
            if other is proc or other.offline or other.polled:
                continue
            for _ in range(64):
                if self.processes.get(other.conn_id) is not other or not self._readable(other):
                    break

    def _regate_due(self, proc: Process) -> None:
        """A deferred re-send: only if the process is still here, still told open, and still
        holding work by its latest STATUS."""
        proc.regate_timer = None
        st = proc.last_status
        if (
            self.processes.get(proc.conn_id) is proc
            and proc.gate_open
            and st is not None
            and st.code in _REGATE_CODES
        ):
            proc.regate_at = self.clock()
            self._regate(proc)

    def reclaim(self, plan: ReclaimPlan, t: float) -> bool:
        """Start carrying ``plan`` out (module docstring); always False: it ends later."""
        reporters: dict[int, tuple[int, str]] = {}
        for h in plan.handles:
            for q in self.processes.values():
                if h in q.handles.get(plan.gpu, {}):
                    if q.hello is not None:
                        reporters[h] = (q.hello.pid, q.hello.job)
                    break
        offline = [
            (q.conn_id, q.hello.pid, q.hello.job)
            for q in self._offline_by_gpu.get(plan.gpu, [])
            if q.hello is not None
        ]
        targets = reclaim_targets(plan.handles, reporters, offline)
        self._carry_out(self.sequence.reclaim(self.clock(), plan, targets))
        return False

    def restore(self, gpu: int, owner: str, handles: tuple[int, ...], t: float) -> bool:
        """Send RESTORE to ``owner`` (module docstring); False: its ack finishes it."""
        proc = next((q for q in self.processes.values() if q.offline and q.source == owner), None)
        conn = None if proc is None else proc.conn_id
        self._carry_out(self.sequence.restore(self.clock(), gpu, conn, handles))
        return False

    def _carry_out(self, commands: list[ReclaimCommand]) -> None:
        """Do what the reclaim sequence decided, in order, then re-arm its timer."""
        for cmd in commands:
            if isinstance(cmd, SendReclaim):
                proc = self.processes.get(cmd.conn)
                if proc is not None:
                    self._send(proc, p.Reclaim(cmd.reclaim_seq, cmd.gpu, cmd.handles))
            elif isinstance(cmd, SendRestore):
                proc = self.processes.get(cmd.conn)
                if proc is not None:
                    self._send(proc, p.Restore(cmd.restore_seq, cmd.gpu, cmd.handles))
            elif isinstance(cmd, ReclaimCompleted):
                self._reclaim_completed(cmd)
            elif isinstance(cmd, ReclaimAbandoned):
                log.warning("reclamation on GPU %s abandoned: %s", cmd.gpu, cmd.describe())
            elif isinstance(cmd, HoldEnded):
                if self.agent.gates[cmd.gpu].enabled:
                    self.set_gate(cmd.gpu, True, self.clock())  # the enable held back meanwhile
                if self.on_event is not None:
                    self.on_event()
            else:
                if cmd.reason is RestoreEnd.REFUSED:
                    log.warning("RESTORE on GPU %s refused (err %s)", cmd.gpu, cmd.err)
                elif cmd.reason is RestoreEnd.TIMED_OUT:
                    log.warning("RESTORE on GPU %s not acknowledged in time", cmd.gpu)
                self.agent.restore_completed(
                    self.clock(), cmd.gpu, cmd.handles, ok=cmd.ok, forget=cmd.forget
                )
        self._rearm_sequence()

    def _reclaim_completed(self, cmd: ReclaimCompleted) -> None:
        """The pages leave the tables, the frameworks hear which blocks went, the agent counts."""
        gone = set(cmd.plan.handles)
        for q in self.processes.values():
            table = q.handles.get(cmd.gpu)
            if table:
                for h in gone & table.keys():
                    del table[h]
        self.send_invalidations(cmd.plan)
        owners: dict[int, str] = {}
        for h, conn in cmd.owners.items():
            proc = self.processes.get(conn)
            if proc is not None:
                owners[h] = proc.source
        self.agent.reclaim_completed(self.clock(), cmd.plan, owners)

    def _rearm_sequence(self) -> None:
        """One loop timer at the sequence's next deadline (replaced when that moves)."""
        deadline = self.sequence.next_deadline()
        if deadline == self._sequence_timer_at:
            return
        if self._sequence_timer is not None:
            self._sequence_timer.cancel()
        self._sequence_timer = self._sequence_timer_at = None
        if deadline is not None and self._loop is not None:
            delay = max(0.0, deadline - self.clock())
            self._sequence_timer = self._loop.call_later(delay, self._sequence_due)
            self._sequence_timer_at = deadline

    def _sequence_due(self) -> None:
        # A timer that fires a little early finds nothing due and is armed again.
        self._sequence_timer = self._sequence_timer_at = None
        self._carry_out(self.sequence.tick(self.clock()))

    def offline_handle_map(self, gpu: int) -> HandleMap:
        """The offline page handles on ``gpu`` (report order), minus those being reclaimed."""
        busy = self.sequence.reclaiming(gpu)
        table: dict[int, list[KvSpan]] = {}
        for q in self.processes.values():
            for h, spans in q.handles.get(gpu, {}).items():
                if h not in busy:
                    table.setdefault(h, []).extend(spans)
        return table

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
            proc = Process(
                conn_id=conn_id, sock=sock, source=f"conn-{conn_id}", peer_pid=_peer_pid(sock)
            )
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
        now = self.clock()
        if self.instrumentation is not None:
            self.instrumentation.policy.heard(now, proc.source)
        if not self._consume(proc, data, now):
            return False
        if self.on_event is not None:
            self.on_event()
        if proc.offline and not proc.polled and self.loop is None:
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
                if not ok:
                    self._ack_failed(proc, p.GateAck.from_payload(data[body:end], 0))
                acked = self.sequence.gate_acked(now, proc.conn_id, gate_seq, enabled != 0, ok != 0)
                if acked:
                    self._carry_out(acked)
                continue
            gpu, _mono, request = fw.EDGE.unpack_from(data, body)
            gpus = proc.gpus if gpu == p.GPU_ALL else self._edge_gpus(proc, gpu)
            if mtype == fw.T_BUSY:
                name = f"{proc.source}/{request}" if request else None
                if self.segment is not None:
                    self._saw_busy(gpus)
                if self.loop is not None:
                    self._loop_edge(proc, EDGE_BUSY, gpus, request)
                for g in gpus:
                    agent.online_busy(now, g, proc.source, name)
            else:
                done = (f"{proc.source}/{request}",) if request else ()
                if self.loop is not None:
                    self._loop_edge(proc, EDGE_IDLE, gpus, request)
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
        if proc.regate_timer is not None:
            proc.regate_timer.cancel()
            proc.regate_timer = None
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
        if self.instrumentation is not None:
            now = self.clock()
            self.instrumentation.policy.disconnected(now, proc.source)
            self.instrumentation.apply(now)  # a lost online shim closes its GPUs at once
        if proc.role == p.Role.ONLINE:
            self.agent.drop_source(self.clock(), proc.source)
            if self.loop is not None:  # its busy periods in the loop end too
                self.loop.drop_source(proc.conn_id)
        if proc.role == p.Role.OFFLINE:
            self._refresh_jobs()
            self.agent.drop_quarantine(proc.source)  # its quarantined pages went with it
        for gpu in proc.kv_used:
            self._online_memory(gpu, self.clock())
        # Its restores end silently (the agent dropped its pages); a reclamation it was to
        # release pages for is abandoned, one waiting for its gate ack may go on.
        self._carry_out(self.sequence.left(self.clock(), proc.conn_id))
        if self.on_event is not None:
            self.on_event()  # a disconnect is an event: an idle edge arms its cooldown timer

    # -- messages -------------------------------------------------------------------------

    def _handle(self, proc: Process, msg: p.Message, now: float) -> None:
        if isinstance(msg, p.OnlineBusy):
            if self.segment is not None:
                self._saw_busy(self._edge_gpus(proc, msg.gpu))
            if self.loop is not None:
                self._loop_edge(proc, EDGE_BUSY, self._edge_gpus(proc, msg.gpu), msg.request_id)
            for gpu in self._edge_gpus(proc, msg.gpu):
                req = None if msg.request_id == 0 else f"{proc.source}/{msg.request_id}"
                self.agent.online_busy(now, gpu, proc.source, req)
        elif isinstance(msg, p.OnlineIdle):
            done = [] if msg.request_id == 0 else [f"{proc.source}/{msg.request_id}"]
            if self.loop is not None:
                self._loop_edge(proc, EDGE_IDLE, self._edge_gpus(proc, msg.gpu), msg.request_id)
            for gpu in self._edge_gpus(proc, msg.gpu):
                self.agent.online_idle(now, gpu, proc.source, done)
        elif isinstance(msg, p.DecodeGap):
            if self.loop is not None:
                gpus = self._edge_gpus(proc, msg.gpu)
                self._loop_edge(proc, EDGE_GAP, gpus, gap_ns=msg.gap_ns)
            for gpu in self._edge_gpus(proc, msg.gpu):
                self.agent.decode_gap(now, gpu, msg.gap_ns / 1e9)
        elif isinstance(msg, p.Hello):
            self._hello(proc, msg)
        elif isinstance(msg, p.GateAck):
            proc.gate_acks += 1
            proc.last_ack_seq = msg.gate_seq
            if not msg.ok:
                self._ack_failed(proc, msg)
            self._gate_acked(proc, msg.gate_seq, msg.enabled, msg.ok, now)
        elif isinstance(msg, p.ReclaimAck):
            self._carry_out(
                self.sequence.reclaim_acked(now, proc.conn_id, msg.reclaim_seq, msg.ok, msg.err)
            )
        elif isinstance(msg, p.RestoreAck):
            self._carry_out(
                self.sequence.restore_acked(
                    now, proc.conn_id, msg.restore_seq, msg.ok, msg.restored, msg.err
                )
            )
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
            if (
                proc.offline
                and proc.gate_open
                and self.segment is not None
                and msg.code in _REGATE_CODES
            ):
                wait = proc.regate_at + REGATE_INTERVAL_S - now
                if wait <= 0:
                    proc.regate_at = now
                    self._regate(proc)
                elif proc.regate_timer is None and self._loop is not None:
                    # Not dropped: the shim may have no other reason to report again (no
                    # thread blocked, its watch thread already on the agent's new segment).
                    proc.regate_timer = self._loop.call_later(wait, self._regate_due, proc)
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
        self.sequence.adopt(gpu, owner.conn_id, pages)
        adopted = self.agent.adopt_quarantine(now, gpu, owner.source, pages)
        if adopted:
            log.info(
                "GPU %s: %d quarantined pages of pid %d taken back (agent restart or reconnect)",
                gpu,
                adopted,
                hook.hello.pid,
            )

    def _gate_acked(
        self, proc: Process, gate_seq: int, enabled: bool, ok: bool, now: float
    ) -> None:
        commands = self.sequence.gate_acked(now, proc.conn_id, gate_seq, enabled, ok)
        if commands:
            self._carry_out(commands)

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
        if self.instrumentation is not None:  # before the ack: it tells the gate's state
            now = self.clock()
            role = _ROLE_NAMES.get(msg.role, "framework")
            self.instrumentation.policy.connected(
                now, proc.source, msg.pid, role, proc.gpus, proc.peer_pid
            )
            self.instrumentation.apply(now)
        accepted = bool(proc.gpus) or msg.role == p.Role.FRAMEWORK
        gate_open = accepted and all(self.agent.gates[g].enabled for g in proc.gpus)
        proc.gate_open = gate_open and msg.role == p.Role.OFFLINE
        if proc.gate_open:
            self._allow(proc.gpus)
        self._send(
            proc,
            p.HelloAck(
                accepted=accepted,
                gate_open=proc.gate_open,
                gate_mode=p.GateMode.SHIM,
                source_id=proc.conn_id,  # its edges in the segment's ring carry it
            ),
        )
        self.sequence.offline_joined(
            proc.conn_id, proc.gpus if proc.offline else (), proc.gate_open
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

    def held_offline(self) -> list[dict[str, object]]:
        """Offline processes whose last STATUS says their work is held, with the shim's
        reason (a stale shared-memory heartbeat, a stopped watch thread, the agent's gate)."""
        out: list[dict[str, object]] = []
        for q in self.processes.values():
            st = q.last_status
            if q.role == p.Role.OFFLINE and st is not None and st.code != p.StatusCode.OK:
                out.append(
                    {
                        "pid": q.hello.pid if q.hello is not None else 0,
                        "job": q.hello.job if q.hello is not None else "",
                        "status": st.code.name.lower(),
                        "reason": st.reason,
                    }
                )
        return out

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


def _peer_pid(sock: socket.socket) -> int | None:
    """The connected peer's pid (SO_PEERCRED, Linux); None where unknown (0: another pid
    namespace that this one cannot see)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    except OSError:
        return None
    pid = int(struct.unpack("3i", creds)[0])
    return pid if pid > 0 else None


def _received_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """Descriptors carried by SCM_RIGHTS control messages."""
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % 4
            fds.extend(array.array("i", payload[:usable]))
    return fds
