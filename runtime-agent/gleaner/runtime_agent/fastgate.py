"""The agent's side of the native gate path: the shared-memory gate segment.

Contract. :class:`GateSegment` creates ``<socket dir>/GATE_SEGMENT_NAME`` (one file of
:data:`SIZE` bytes,
mode 0666, written to a temporary name and renamed into place so that a shim never maps a
half-filled one) with the layout of ``runtime-agent/shim/include/gleaner_fastgate.h``
(:class:`SegmentLayout` mirrors it; a test compares the two). One slot per node GPU (its
UUID and index). The agent, single writer of its fields, then:

- :meth:`GateSegment.beat` stores its ``CLOCK_MONOTONIC`` time as the heartbeat (the daemon
  every 100 ms, the server at every enable); offline shims close their gate when it is
  older than ``stale_s`` (1 s by default), so an agent whose loop stalls fails closed;
- :meth:`GateSegment.allow` stores a GPU's ``open_seq`` just before an enable is sent: the
  ``busy_seq`` the server read when it handled that GPU's latest busy frame (online shims
  bump before they send, so every bump up to that frame's is counted); an offline shim
  refuses an enable while ``busy_seq`` differs, i.e. while a busy edge is in the segment
  whose frame the agent had not handled when it decided;
- :meth:`GateSegment.retire` zeroes the magic (shims close their gates) and removes the file.

Online shims bump ``busy_seq`` and wake the offline shims' watch threads themselves, and
put every busy, idle and decode-gap edge into the segment's edge ring, which the native gate
loop (:class:`gleaner.runtime_agent.gatelib.GateLoop`) consumes, and (version 3) keep a busy
word per connection that the ring cannot lose (set before a busy edge, cleared before an
idle edge's entry; docs/shim.md, "The native gate loop"). :meth:`GateSegment.set_busy_word`
does what a shim does to its word, for tests.
:meth:`GateSegment.online_edge`, :meth:`GateSegment.online_idle` and
:meth:`GateSegment.online_gap` do what an online shim does, for tests and the benchmark
(one writer at a time: Python's increment is not an atomic read-modify-write).

Stores are single aligned 4- or 8-byte writes through ctypes views of the mapping, which
the shims read with C11 atomics.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path

from gleaner.protocol.node import GATE_SEGMENT_NAME

MAGIC = 0x47464C47
"""``GL_FG_MAGIC`` ("GLFG")."""
VERSION = 3
SLOTS = 64
UUID_LEN = 48
RING = 4096
"""``GL_FG_RING``: edges in the ring."""
SOURCES = 64
"""``GL_FG_SOURCES``: online connections' busy words."""
EDGE_BUSY, EDGE_IDLE, EDGE_GAP = 1, 2, 3
LOOP_NONE, LOOP_RUNNING, LOOP_STOPPED = 0, 1, 2
"""``GL_FG_LOOP_*``: the native gate loop's state in the segment."""
DEFAULT_STALE_S = 1.0
"""A heartbeat older than this closes the offline gates."""
BEAT_INTERVAL_S = 0.1
"""How often the daemon beats (a tenth of the stale limit)."""

_FUTEX_WAKE = 1
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}


class Slot(ctypes.Structure):
    """``gl_fg_slot``: one GPU, one cache line."""

    _fields_ = [
        ("uuid", ctypes.c_char * UUID_LEN),
        ("index", ctypes.c_int32),
        ("busy_seq", ctypes.c_uint32),
        ("open_seq", ctypes.c_uint32),
        ("open_gen", ctypes.c_uint32),
    ]


class Edge(ctypes.Structure):
    """``gl_fg_edge``: one online edge in the ring."""

    _fields_ = [
        ("commit", ctypes.c_uint32),
        ("kind", ctypes.c_uint16),
        ("reserved0", ctypes.c_uint16),
        ("source", ctypes.c_uint32),
        ("reserved1", ctypes.c_uint32),
        ("mask", ctypes.c_uint64),
        ("t_ns", ctypes.c_uint64),
        ("request", ctypes.c_uint64),
        ("gap_ns", ctypes.c_uint64),
    ]


class Source(ctypes.Structure):
    """``gl_fg_source``: one online connection's busy word (``state``: id << 32 | busy)."""

    _fields_ = [
        ("state", ctypes.c_uint64),
        ("mask", ctypes.c_uint64),
    ]


class SegmentLayout(ctypes.Structure):
    """``gl_fg_segment``: the header, then ``SLOTS`` slots."""

    _fields_ = [
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("nslots", ctypes.c_uint32),
        ("agent_pid", ctypes.c_uint32),
        ("wake", ctypes.c_uint32),
        ("loop_state", ctypes.c_uint32),
        ("heartbeat_ns", ctypes.c_uint64),
        ("stale_ns", ctypes.c_uint64),
        ("loop_beat_ns", ctypes.c_uint64),
        ("edge_head", ctypes.c_uint32),
        ("edge_tail", ctypes.c_uint32),
        ("reserved1", ctypes.c_uint64),
        ("slot", Slot * SLOTS),
        ("open_at_ns", ctypes.c_uint64 * SLOTS),
        ("source", Source * SOURCES),
        ("edge", Edge * RING),
    ]


SIZE = ctypes.sizeof(SegmentLayout)


def segment_path(socket_dir: Path) -> Path:
    """Where the agent listening in ``socket_dir`` keeps its segment (the shims' rule)."""
    return Path(socket_dir) / GATE_SEGMENT_NAME


class GateSegment:
    """See the module docstring."""

    def __init__(self, path: Path, mapping: mmap.mmap, slots: dict[int, int]) -> None:
        self.path = path
        self._map = mapping
        self._view = SegmentLayout.from_buffer(mapping)
        self._slots = slots
        """Node GPU index → slot."""
        self._libc: ctypes.CDLL | None = None
        self._inode = 0
        """The file's inode: retire removes the path only while it is still this file."""

    @classmethod
    def create(
        cls, path: Path, gpus: Sequence[tuple[int, str]], *, stale_s: float = DEFAULT_STALE_S
    ) -> GateSegment:
        """A filled segment at ``path`` for ``gpus`` (node index, UUID), beating now."""
        if not gpus or len(gpus) > SLOTS:
            raise ValueError(f"a gate segment holds 1 to {SLOTS} GPUs, not {len(gpus)}")
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        try:
            os.ftruncate(fd, SIZE)
            os.fchmod(fd, 0o666)  # shims in pods run as arbitrary users (as for the socket)
            mapping = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        seg = cls(path, mapping, {index: k for k, (index, _) in enumerate(gpus)})
        v = seg._view
        v.version = VERSION
        v.nslots = len(gpus)
        v.agent_pid = os.getpid()
        v.stale_ns = int(stale_s * 1e9)
        for k, (index, uuid) in enumerate(gpus):
            v.slot[k].uuid = uuid.encode()[: UUID_LEN - 1]
            v.slot[k].index = index
        seg.beat()
        v.magic = MAGIC  # last: a shim maps only a filled segment
        seg._inode = tmp.stat().st_ino
        tmp.replace(path)
        return seg

    @classmethod
    def open(cls, path: Path) -> GateSegment:
        """Map an existing segment read-write (tests and the benchmark play online shims)."""
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            mapping = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        view = SegmentLayout.from_buffer(mapping)
        if view.magic != MAGIC or view.version != VERSION:
            del view
            mapping.close()
            raise ValueError(f"{path} is not a filled gate segment")
        slots = {int(view.slot[k].index): k for k in range(view.nslots)}
        del view
        return cls(Path(path), mapping, slots)

    def beat(self) -> None:
        """Store the heartbeat (``CLOCK_MONOTONIC``, the shims' clock)."""
        self._view.heartbeat_ns = time.monotonic_ns()

    def allow(self, gpu: int, seen: int | None = None) -> None:
        """Before an enable of ``gpu``: the busy edges up to ``seen`` (a ``busy_seq`` value;
        None: the current one) are accounted for; a shim refuses the enable while
        ``busy_seq`` differs."""
        slot = self._view.slot[self._slots[gpu]]
        slot.open_seq = slot.busy_seq if seen is None else seen & 0xFFFFFFFF

    def busy_seq(self, gpu: int) -> int:
        return int(self._view.slot[self._slots[gpu]].busy_seq)

    def open_seq(self, gpu: int) -> int:
        return int(self._view.slot[self._slots[gpu]].open_seq)

    @property
    def heartbeat_ns(self) -> int:
        return int(self._view.heartbeat_ns)

    def set_heartbeat_ns(self, value: int) -> None:
        """Store an arbitrary heartbeat (tests: a stale one)."""
        self._view.heartbeat_ns = value

    @property
    def loop_state(self) -> int:
        """``LOOP_NONE``, ``LOOP_RUNNING`` or ``LOOP_STOPPED``."""
        return int(self._view.loop_state)

    @property
    def loop_beat_ns(self) -> int:
        return int(self._view.loop_beat_ns)

    def open_at_ns(self, gpu: int) -> int:
        """The native loop's pending enable of ``gpu`` (``CLOCK_MONOTONIC`` ns; 0: none)."""
        return int(self._view.open_at_ns[self._slots[gpu]])

    def open_gen(self, gpu: int) -> int:
        """The native loop's decisions on ``gpu`` (odd: its gate is open)."""
        return int(self._view.slot[self._slots[gpu]].open_gen)

    def edge(self, ticket: int) -> Edge:
        """A copy of the ring entry of ``ticket`` (the n-th edge written, from 0)."""
        return Edge.from_buffer_copy(bytes(self._view.edge[ticket % RING]))

    @property
    def edges_written(self) -> int:
        """Tickets the online writers have taken (``edge_head``; wraps at 2**32)."""
        return int(self._view.edge_head)

    @property
    def edges_pending(self) -> int:
        """Ring entries the native loop has not consumed yet."""
        return (int(self._view.edge_head) - int(self._view.edge_tail)) & 0xFFFFFFFF

    def _mask(self, gpu: int | None) -> int:
        if gpu is None:
            return (1 << int(self._view.nslots)) - 1
        return 1 << self._slots[gpu]

    def online_edge(
        self,
        gpu: int | None = None,
        *,
        t_ns: int | None = None,
        source: int | None = None,
        request: int = 0,
        gap_ns: int = 0,
    ) -> None:
        """What an online shim does at a busy edge (``gpu`` None: every GPU): bump, wake,
        then the decode gap before it (``gap_ns`` > 0) and the edge into the ring, from
        busy source ``source`` (the connection's id; None: this process's pid)."""
        v = self._view
        mask = self._mask(gpu)
        for k in range(int(v.nslots)):
            if mask >> k & 1:
                v.slot[k].busy_seq = (v.slot[k].busy_seq + 1) & 0xFFFFFFFF
        v.wake = (v.wake + 1) & 0xFFFFFFFF
        self._futex_wake(SegmentLayout.wake.offset)
        t = time.monotonic_ns() if t_ns is None else t_ns
        if gap_ns:
            self._push(EDGE_GAP, mask, t, source, 0, gap_ns)
        self._push(EDGE_BUSY, mask, t, source, request, 0)

    def online_idle(
        self,
        gpu: int | None = None,
        *,
        t_ns: int | None = None,
        source: int | None = None,
        request: int = 0,
    ) -> None:
        """What an online shim does at an idle edge (``request``: the request that finished)."""
        t = time.monotonic_ns() if t_ns is None else t_ns
        self._push(EDGE_IDLE, self._mask(gpu), t, source, request, 0)

    def set_busy_word(self, source: int, gpu: int | None = None, *, busy: bool = True) -> None:
        """What an online shim does to its busy word (tests: claimed on first use; ``gpu``
        None: every GPU): set before a busy edge, cleared before an idle edge's entry."""
        v = self._view
        entry = next((e for e in v.source if e.state >> 32 == source), None)
        if entry is None:
            entry = next(e for e in v.source if e.state == 0)
            entry.state = source << 32
            entry.mask = self._mask(gpu)
        entry.state = source << 32 | int(busy)

    def busy_word(self, source: int) -> int | None:
        """The busy bit of ``source``'s word (None: it has none, or it was freed)."""
        entry = next((e for e in self._view.source if e.state >> 32 == source), None)
        return None if entry is None else int(entry.state & 1)

    def _push(
        self, kind: int, mask: int, t_ns: int, source: int | None, request: int, gap_ns: int
    ) -> None:
        # One writer: the entry is whole before the ticket is taken, so the loop never sees
        # it half written (the shims, many writers, take the ticket first and commit last).
        v = self._view
        ticket = int(v.edge_head)
        e = v.edge[ticket % RING]
        e.kind = kind
        e.source = os.getpid() if source is None else source
        e.mask = mask
        e.t_ns = t_ns
        e.request = request
        e.gap_ns = gap_ns
        e.commit = (ticket + 1) & 0xFFFFFFFF
        v.edge_head = (ticket + 1) & 0xFFFFFFFF
        if kind == EDGE_IDLE and v.loop_state == LOOP_RUNNING:  # only idle edges wake it
            self._futex_wake(SegmentLayout.edge_head.offset)

    def _futex_wake(self, offset: int) -> None:
        nr = _SYS_FUTEX.get(platform.machine())
        if nr is None:
            return  # the watchers still see the edge at their next 100 ms check
        if self._libc is None:
            self._libc = ctypes.CDLL(None, use_errno=True)
        addr = ctypes.addressof(self._view) + offset
        self._libc.syscall(nr, ctypes.c_void_p(addr), _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)

    @property
    def address(self) -> int:
        """The mapping's address (the native gate loop works on the agent's own mapping)."""
        return ctypes.addressof(self._view)

    def close(self) -> None:
        """Unmap without retiring (a reader's view)."""
        if not self._map.closed:
            del self._view
            self._map.close()

    def retire(self) -> None:
        """Zero the magic (the shims' gates close) and remove the file; idempotent."""
        if self._map.closed:
            return
        self._view.magic = 0
        with contextlib.suppress(FileNotFoundError):
            if self.path.stat().st_ino == self._inode:
                self.path.unlink()
        del self._view
        self._map.close()
