"""The agent ⇄ shim wire protocol (version 1): a pure codec.

Contract:
- Every message is one frame: a 16-byte little-endian header (magic ``GLNR``, version,
  type, flags, payload length, sequence number) followed by a fixed-layout little-endian
  payload. Every layout is declared once, in the protocol table (:mod:`gleaner.protocol.spec`):
  the C header ``runtime-agent/shim/include/gleaner_proto.h`` is generated from it
  (:mod:`gleaner.protocol.cheader`) and each payload's ``struct`` format here is
  ``spec.fmt(<C struct>)``. ``c_constants()`` and ``STRUCT_SIZES`` are this codec's own view;
  tests compare them with the table and with a compiled C program.
- ``Message.encode()`` returns the whole frame; ``decode(buf)`` returns
  ``(message, consumed)`` for the first complete frame in ``buf`` or ``(None, 0)`` when more
  bytes are needed; it raises :class:`ProtocolError` on a malformed frame (the peer is then
  to be disconnected). :class:`FrameDecoder` does the same incrementally over a stream.
- Only the helpers :func:`send_message` and :func:`recv_messages` do I/O (with SCM_RIGHTS
  for :class:`FdPass`); everything else is pure.

docs/protocol.md describes each message, who sends it and when.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar, NamedTuple, TypeVar

from gleaner.protocol import spec

_C = spec.constants()
"""The protocol table's numbers (the C header's ``#define``s), by C name."""

MAGIC = _C["GL_PROTO_MAGIC"]  # b"GLNR" little-endian
VERSION = _C["GL_PROTO_VERSION"]
HEADER_SIZE = _C["GL_HEADER_SIZE"]
MAX_PAYLOAD = _C["GL_MAX_PAYLOAD"]
FLAG_HAS_FD = _C["GL_FLAG_HAS_FD"]

MAX_GPUS = _C["GL_MAX_GPUS"]
UUID_LEN = _C["GL_UUID_LEN"]
JOB_LEN = _C["GL_JOB_LEN"]
REASON_LEN = _C["GL_REASON_LEN"]
REQUEST_ID_LEN = _C["GL_REQUEST_ID_LEN"]
GPU_UNKNOWN = _C["GL_GPU_UNKNOWN"]
GPU_ALL = _C["GL_GPU_ALL"]

CAP_GATE_THREAD = _C["GL_CAP_GATE_THREAD"]
CAP_FD_PASS = _C["GL_CAP_FD_PASS"]
CAP_LAUNCH_HOOK = _C["GL_CAP_LAUNCH_HOOK"]
CAP_BUSY_TRACK = _C["GL_CAP_BUSY_TRACK"]

MEM_ADDED = _C["GL_MEM_ADDED"]
MEM_FREED = _C["GL_MEM_FREED"]

_HEADER = struct.Struct(spec.fmt("gl_header"))
_E = TypeVar("_E", bound=IntEnum)


class MsgType(IntEnum):
    """``header.type``; the comment says who sends it (S = shim/framework, A = agent)."""

    HELLO = 1  # S→A
    HELLO_ACK = 2  # A→S
    CHANNEL_ADD = 3  # S→A
    CHANNEL_FREE = 4  # S→A
    ONLINE_BUSY = 5  # S→A
    ONLINE_IDLE = 6  # S→A
    DECODE_GAP = 7  # S→A
    GATE = 8  # A→S
    GATE_ACK = 9  # S→A
    FD_REQUEST = 10  # A→S
    FD_PASS = 11  # S→A, carries one fd
    STATUS = 12  # S→A
    MEM_HANDLES = 13  # S→A
    INVALIDATE_BLOCKS = 14  # A→framework
    HEARTBEAT = 15  # both
    ONLINE_MEMORY = 16  # S→A (online shim or online framework hook)
    OFFLINE_HANDLES = 17  # S→A (offline framework hook)
    RECLAIM = 18  # A→offline shim
    RECLAIM_ACK = 19  # offline shim→A
    RESTORE = 20  # A→offline shim
    RESTORE_ACK = 21  # offline shim→A
    OFFLINE_PAGE_GROUPS = 22  # S→A (offline framework hook)


class Role(IntEnum):
    """Who is on the other end of a connection (``Hello.role``)."""

    OFFLINE = 1
    ONLINE = 2
    FRAMEWORK = 3


class GateMode(IntEnum):
    """Who issues the schedule controls (``HelloAck.gate_mode``)."""

    SHIM = 0
    AGENT = 1


class Kind(IntEnum):
    """What a :class:`Channel` record describes."""

    TSG = 1
    CHANNEL = 2


class FdKind(IntEnum):
    """What descriptor an :class:`FdPass` carries."""

    NVIDIACTL = 1


class StatusCode(IntEnum):
    """Why an offline process is (not) running (``Status.code``)."""

    OK = 0
    GATED_BY_AGENT = 1
    NO_AGENT = 2
    NO_HANDLES = 3
    CONTROL_REFUSED = 4
    PROTOCOL_ERROR = 5


class ProtocolError(ValueError):
    """A frame that cannot be decoded; the connection should be dropped."""


def _pad(text: str, size: int) -> bytes:
    raw = text.encode()
    if len(raw) >= size:
        raise ProtocolError(f"string of {len(raw)} bytes does not fit a {size}-byte field")
    return raw.ljust(size, b"\0")


def _unpad(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


@dataclass(frozen=True)
class Message:
    """Base of every message: ``seq`` is the sender's frame counter (header.seq)."""

    TYPE: ClassVar[MsgType]
    SIZE: ClassVar[int]  # fixed payload size; variable messages: the fixed head's size

    def payload(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Message:
        raise NotImplementedError

    @property
    def flags(self) -> int:
        return 0

    def encode(self, seq: int = 0) -> bytes:
        """The whole frame: header + payload."""
        body = self.payload()
        if len(body) > MAX_PAYLOAD:
            raise ProtocolError(f"payload of {len(body)} bytes exceeds {MAX_PAYLOAD}")
        return _HEADER.pack(MAGIC, VERSION, int(self.TYPE), self.flags, len(body), seq) + body


_S_HELLO = struct.Struct(spec.fmt("gl_hello"))


@dataclass(frozen=True)
class Hello(Message):
    """First frame on every connection: the process, its role, GPUs and job."""

    TYPE: ClassVar[MsgType] = MsgType.HELLO
    SIZE: ClassVar[int] = _S_HELLO.size
    pid: int
    role: Role
    gpu_uuids: tuple[str, ...] = ()
    gpu_indices: tuple[int, ...] = ()
    job: str = ""
    caps: int = 0

    def payload(self) -> bytes:
        if len(self.gpu_uuids) > MAX_GPUS or len(self.gpu_indices) > MAX_GPUS:
            raise ProtocolError(f"at most {MAX_GPUS} GPUs per process")
        ngpus = max(len(self.gpu_uuids), len(self.gpu_indices))
        indices = list(self.gpu_indices) + [-1] * (MAX_GPUS - len(self.gpu_indices))
        uuids = b"".join(_pad(u, UUID_LEN) for u in self.gpu_uuids)
        uuids = uuids.ljust(MAX_GPUS * UUID_LEN, b"\0")
        return _S_HELLO.pack(
            self.pid, int(self.role), ngpus, self.caps, *indices, uuids, _pad(self.job, JOB_LEN)
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Hello:
        pid, role, ngpus, caps, *rest = _S_HELLO.unpack(data)
        if ngpus > MAX_GPUS:
            raise ProtocolError(f"HELLO claims {ngpus} GPUs")
        indices: list[int] = rest[:MAX_GPUS]
        uuid_blob: bytes = rest[MAX_GPUS]
        job: bytes = rest[MAX_GPUS + 1]
        uuids = tuple(
            u
            for u in (_unpad(uuid_blob[i * UUID_LEN : (i + 1) * UUID_LEN]) for i in range(ngpus))
            if u
        )
        idx = tuple(i for i in indices[:ngpus] if i >= 0)
        return cls(
            pid=pid,
            role=_enum(Role, role),
            gpu_uuids=uuids,
            gpu_indices=idx,
            job=_unpad(job),
            caps=caps,
        )


_S_HELLO_ACK = struct.Struct(spec.fmt("gl_hello_ack"))


@dataclass(frozen=True)
class HelloAck(Message):
    """The agent's answer to HELLO: the initial gate state and who runs the controls."""

    TYPE: ClassVar[MsgType] = MsgType.HELLO_ACK
    SIZE: ClassVar[int] = _S_HELLO_ACK.size
    accepted: bool = True
    gate_open: bool = False
    gate_mode: GateMode = GateMode.SHIM
    heartbeat_ms: int = 1000

    def payload(self) -> bytes:
        return _S_HELLO_ACK.pack(
            self.heartbeat_ms, int(self.accepted), int(self.gate_open), int(self.gate_mode), 0, 0
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> HelloAck:
        hb, accepted, gate_open, mode, _r, _r2 = _S_HELLO_ACK.unpack(data)
        return cls(
            accepted=bool(accepted),
            gate_open=bool(gate_open),
            gate_mode=_enum(GateMode, mode),
            heartbeat_ms=hb,
        )


_S_CHANNEL = struct.Struct(spec.fmt("gl_channel"))


@dataclass(frozen=True)
class Channel(Message):
    """A channel group (TSG) or GPFIFO channel the process allocated (RM handles)."""

    TYPE: ClassVar[MsgType] = MsgType.CHANNEL_ADD
    SIZE: ClassVar[int] = _S_CHANNEL.size
    h_client: int
    h_parent: int
    h_object: int
    h_class: int
    kind: Kind
    gpu: int = GPU_UNKNOWN
    engine_type: int = 0

    def payload(self) -> bytes:
        return _S_CHANNEL.pack(
            self.h_client,
            self.h_parent,
            self.h_object,
            self.h_class,
            int(self.kind),
            self.gpu,
            self.engine_type,
            0,
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Channel:
        c, p, o, k, kind, gpu, eng, _r = _S_CHANNEL.unpack(data)
        return cls(
            h_client=c,
            h_parent=p,
            h_object=o,
            h_class=k,
            kind=_enum(Kind, kind),
            gpu=gpu,
            engine_type=eng,
        )


@dataclass(frozen=True)
class ChannelAdd(Channel):
    """CHANNEL_ADD: sent after the RM allocation succeeded."""

    TYPE: ClassVar[MsgType] = MsgType.CHANNEL_ADD


@dataclass(frozen=True)
class ChannelFree(Channel):
    """CHANNEL_FREE: sent after the RM free of that handle succeeded."""

    TYPE: ClassVar[MsgType] = MsgType.CHANNEL_FREE


_S_EDGE = struct.Struct(spec.fmt("gl_online_edge"))


@dataclass(frozen=True)
class OnlineEdge(Message):
    """A busy/idle transition of an online process (CLOCK_MONOTONIC nanoseconds)."""

    TYPE: ClassVar[MsgType] = MsgType.ONLINE_BUSY
    SIZE: ClassVar[int] = _S_EDGE.size
    gpu: int
    mono_ns: int
    request_id: int = 0

    def payload(self) -> bytes:
        return _S_EDGE.pack(self.gpu, self.mono_ns, self.request_id)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> OnlineEdge:
        gpu, mono, req = _S_EDGE.unpack(data)
        return cls(gpu=gpu, mono_ns=mono, request_id=req)


@dataclass(frozen=True)
class OnlineBusy(OnlineEdge):
    """ONLINE_BUSY: the online process launched work while idle."""

    TYPE: ClassVar[MsgType] = MsgType.ONLINE_BUSY


@dataclass(frozen=True)
class OnlineIdle(OnlineEdge):
    """ONLINE_IDLE: every tracked launch of the online process completed."""

    TYPE: ClassVar[MsgType] = MsgType.ONLINE_IDLE


_S_GAP = struct.Struct(spec.fmt("gl_decode_gap"))


@dataclass(frozen=True)
class DecodeGap(Message):
    """The idle gap between two busy periods (decode iterations) of an online process."""

    TYPE: ClassVar[MsgType] = MsgType.DECODE_GAP
    SIZE: ClassVar[int] = _S_GAP.size
    gpu: int
    mono_ns: int
    gap_ns: int

    def payload(self) -> bytes:
        return _S_GAP.pack(self.gpu, self.mono_ns, self.gap_ns)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> DecodeGap:
        gpu, mono, gap = _S_GAP.unpack(data)
        return cls(gpu=gpu, mono_ns=mono, gap_ns=gap)


_S_GATE = struct.Struct(spec.fmt("gl_gate"))


@dataclass(frozen=True)
class Gate(Message):
    """Agent → offline shim: enable (``enable=True``) or disable its channels."""

    TYPE: ClassVar[MsgType] = MsgType.GATE
    SIZE: ClassVar[int] = _S_GATE.size
    gate_seq: int
    enable: bool
    gpu: int = GPU_ALL

    def payload(self) -> bytes:
        return _S_GATE.pack(self.gate_seq, self.gpu, int(self.enable))

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Gate:
        gseq, gpu, enable = _S_GATE.unpack(data)
        return cls(gate_seq=gseq, enable=bool(enable), gpu=gpu)


_S_GATE_ACK = struct.Struct(spec.fmt("gl_gate_ack"))


@dataclass(frozen=True)
class GateAck(Message):
    """Shim → agent: what a GATE did; ``latency_ns`` from receipt to the last control."""

    TYPE: ClassVar[MsgType] = MsgType.GATE_ACK
    SIZE: ClassVar[int] = _S_GATE_ACK.size
    gate_seq: int
    enabled: bool
    ok: bool
    latency_ns: int = 0
    gpu: int = GPU_ALL
    n_objects: int = 0
    err: int = 0
    rm_status: int = 0
    n_failed: int = 0

    def payload(self) -> bytes:
        return _S_GATE_ACK.pack(
            self.gate_seq,
            self.latency_ns,
            self.gpu,
            int(self.enabled),
            int(self.ok),
            self.n_objects,
            self.err,
            self.rm_status,
            self.n_failed,
            0,
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> GateAck:
        gseq, lat, gpu, enabled, ok, nobj, err, rm, nfail, _r = _S_GATE_ACK.unpack(data)
        return cls(
            gate_seq=gseq,
            enabled=bool(enabled),
            ok=bool(ok),
            latency_ns=lat,
            gpu=gpu,
            n_objects=nobj,
            err=err,
            rm_status=rm,
            n_failed=nfail,
        )


_S_FD_REQUEST = struct.Struct(spec.fmt("gl_fd_request"))


@dataclass(frozen=True)
class FdRequest(Message):
    """Agent → shim: pass me your nvidiactl descriptor (answered by FD_PASS)."""

    TYPE: ClassVar[MsgType] = MsgType.FD_REQUEST
    SIZE: ClassVar[int] = _S_FD_REQUEST.size
    fd_kind: FdKind = FdKind.NVIDIACTL

    def payload(self) -> bytes:
        return _S_FD_REQUEST.pack(int(self.fd_kind))

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> FdRequest:
        (kind,) = _S_FD_REQUEST.unpack(data)
        return cls(fd_kind=_enum(FdKind, kind))


_S_FD_PASS = struct.Struct(spec.fmt("gl_fd_pass"))


@dataclass(frozen=True)
class FdPass(Message):
    """Shim → agent: the frame that carries libcuda's nvidiactl fd as SCM_RIGHTS.

    ``fd`` is the descriptor received in *this* process (set by :func:`recv_messages`), or
    the one to send (used by :func:`send_message`); it is not part of the payload.
    """

    TYPE: ClassVar[MsgType] = MsgType.FD_PASS
    SIZE: ClassVar[int] = _S_FD_PASS.size
    fd_kind: FdKind = FdKind.NVIDIACTL
    h_client: int = 0
    sender_fd: int = -1
    fd: int | None = field(default=None, compare=False)

    @property
    def flags(self) -> int:
        return FLAG_HAS_FD

    def payload(self) -> bytes:
        return _S_FD_PASS.pack(int(self.fd_kind), self.h_client, self.sender_fd)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> FdPass:
        kind, client, sender = _S_FD_PASS.unpack(data)
        return cls(fd_kind=_enum(FdKind, kind), h_client=client, sender_fd=sender)


_S_STATUS = struct.Struct(spec.fmt("gl_status"))


@dataclass(frozen=True)
class Status(Message):
    """Shim → agent: whether the offline process runs, and if not, why."""

    TYPE: ClassVar[MsgType] = MsgType.STATUS
    SIZE: ClassVar[int] = _S_STATUS.size
    code: StatusCode
    reason: str = ""
    gpu: int = GPU_ALL
    mono_ns: int = 0
    blocked_ns: int = 0
    blocked_threads: int = 0

    def payload(self) -> bytes:
        reason = self.reason.encode()[: REASON_LEN - 1].decode(errors="ignore")
        return _S_STATUS.pack(
            int(self.code),
            self.gpu,
            self.mono_ns,
            self.blocked_ns,
            self.blocked_threads,
            _pad(reason, REASON_LEN),
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Status:
        code, gpu, mono, blocked, threads, reason = _S_STATUS.unpack(data)
        return cls(
            code=_enum(StatusCode, code),
            reason=_unpad(reason),
            gpu=gpu,
            mono_ns=mono,
            blocked_ns=blocked,
            blocked_threads=threads,
        )


_S_MEM_HEAD = struct.Struct(spec.fmt("gl_mem_handles"))
_S_MEM_ENTRY = struct.Struct(spec.fmt("gl_mem_handle"))


@dataclass(frozen=True)
class MemHandle:
    """One memory-handle table entry (an RM memory object added or freed)."""

    h_client: int
    h_parent: int
    h_memory: int
    h_class: int
    gpu: int = GPU_UNKNOWN
    flags: int = MEM_ADDED
    size: int = 0


@dataclass(frozen=True)
class MemHandles(Message):
    """Shim → agent: a batch of memory-handle table entries."""

    TYPE: ClassVar[MsgType] = MsgType.MEM_HANDLES
    SIZE: ClassVar[int] = _S_MEM_HEAD.size
    entries: tuple[MemHandle, ...] = ()

    def payload(self) -> bytes:
        out = [_S_MEM_HEAD.pack(len(self.entries))]
        out += [
            _S_MEM_ENTRY.pack(e.h_client, e.h_parent, e.h_memory, e.h_class, e.gpu, e.flags, e.size)
            for e in self.entries
        ]
        return b"".join(out)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> MemHandles:
        (count,) = _S_MEM_HEAD.unpack_from(data)
        if len(data) != _S_MEM_HEAD.size + count * _S_MEM_ENTRY.size:
            raise ProtocolError(f"MEM_HANDLES: {count} entries do not fill {len(data)} bytes")
        entries = tuple(
            MemHandle(*_S_MEM_ENTRY.unpack_from(data, _S_MEM_HEAD.size + i * _S_MEM_ENTRY.size))
            for i in range(count)
        )
        return cls(entries=entries)


_S_INV_HEAD = struct.Struct(spec.fmt("gl_invalidate_blocks"))


@dataclass(frozen=True)
class InvalidateBlocks(Message):
    """Agent → framework: KV-cache block ids of one request whose pages were reclaimed."""

    TYPE: ClassVar[MsgType] = MsgType.INVALIDATE_BLOCKS
    SIZE: ClassVar[int] = _S_INV_HEAD.size
    request_id: str
    block_ids: tuple[int, ...] = ()

    def payload(self) -> bytes:
        n = len(self.block_ids)
        return _S_INV_HEAD.pack(_pad(self.request_id, REQUEST_ID_LEN), n) + struct.pack(
            f"<{n}I", *self.block_ids
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> InvalidateBlocks:
        rid, count = _S_INV_HEAD.unpack_from(data)
        if len(data) != _S_INV_HEAD.size + 4 * count:
            raise ProtocolError(f"INVALIDATE_BLOCKS: {count} ids do not fill {len(data)} bytes")
        ids = struct.unpack_from(f"<{count}I", data, _S_INV_HEAD.size)
        return cls(request_id=_unpad(rid), block_ids=tuple(ids))


_S_HEARTBEAT = struct.Struct(spec.fmt("gl_heartbeat"))


@dataclass(frozen=True)
class Heartbeat(Message):
    """Liveness, both ways; the shim's ``state`` is 1 while its gate is open."""

    TYPE: ClassVar[MsgType] = MsgType.HEARTBEAT
    SIZE: ClassVar[int] = _S_HEARTBEAT.size
    mono_ns: int
    pid: int = 0
    state: int = 0

    def payload(self) -> bytes:
        return _S_HEARTBEAT.pack(self.mono_ns, self.pid, self.state)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Heartbeat:
        mono, pid, state = _S_HEARTBEAT.unpack(data)
        return cls(mono_ns=mono, pid=pid, state=state)


_S_ONLINE_MEM = struct.Struct(spec.fmt("gl_online_memory"))


@dataclass(frozen=True)
class OnlineMemory(Message):
    """Online side → agent: KV-cache bytes in use and reserved on one GPU (``gpu`` as in
    ONLINE_BUSY: an index into the process's GPUs, or ``GPU_ALL``)."""

    TYPE: ClassVar[MsgType] = MsgType.ONLINE_MEMORY
    SIZE: ClassVar[int] = _S_ONLINE_MEM.size
    gpu: int
    kv_used_bytes: int
    kv_reserved_bytes: int = 0
    mono_ns: int = 0

    def payload(self) -> bytes:
        return _S_ONLINE_MEM.pack(
            self.gpu, self.mono_ns, self.kv_used_bytes, self.kv_reserved_bytes
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> OnlineMemory:
        gpu, mono, used, reserved = _S_ONLINE_MEM.unpack(data)
        return cls(gpu=gpu, kv_used_bytes=used, kv_reserved_bytes=reserved, mono_ns=mono)


OFFLINE_HANDLES_RESET = _C["GL_OFFLINE_HANDLES_RESET"]
"""OFFLINE_HANDLES.flags: forget this process's table for that GPU before adding these."""

_S_OFF_HEAD = struct.Struct(spec.fmt("gl_offline_handles"))
_S_OFF_ENTRY = struct.Struct(spec.fmt("gl_handle_span"))


@dataclass(frozen=True)
class HandleSpan:
    """One OFFLINE_HANDLES entry: the KV blocks of one request inside one page handle.

    ``handle`` is the page's device virtual address (what the shim saw in ``cuMemMap``);
    an entry with no request and no blocks says the handle exists and holds nothing.
    """

    handle: int
    size: int
    request_id: str = ""
    tokens: int = 0
    block_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class OfflineHandles(Message):
    """Offline framework hook → agent: its KV page handles on one GPU and what they hold."""

    TYPE: ClassVar[MsgType] = MsgType.OFFLINE_HANDLES
    SIZE: ClassVar[int] = _S_OFF_HEAD.size
    gpu: int
    entries: tuple[HandleSpan, ...] = ()
    reset: bool = True

    def payload(self) -> bytes:
        out = [_S_OFF_HEAD.pack(self.gpu, len(self.entries), int(self.reset), 0)]
        for e in self.entries:
            n = len(e.block_ids)
            out.append(
                _S_OFF_ENTRY.pack(e.handle, e.size, _pad(e.request_id, REQUEST_ID_LEN), e.tokens, n)
            )
            out.append(struct.pack(f"<{n}I", *e.block_ids))
        return b"".join(out)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> OfflineHandles:
        gpu, count, flags, _r = _S_OFF_HEAD.unpack_from(data)
        off = _S_OFF_HEAD.size
        entries: list[HandleSpan] = []
        for _ in range(count):
            if off + _S_OFF_ENTRY.size > len(data):
                raise ProtocolError(f"OFFLINE_HANDLES: {count} entries overrun {len(data)} bytes")
            handle, size, rid, tokens, n = _S_OFF_ENTRY.unpack_from(data, off)
            off += _S_OFF_ENTRY.size
            if off + 4 * n > len(data):
                raise ProtocolError(f"OFFLINE_HANDLES: {n} block ids overrun {len(data)} bytes")
            blocks = struct.unpack_from(f"<{n}I", data, off)
            off += 4 * n
            entries.append(HandleSpan(handle, size, _unpad(rid), tokens, tuple(blocks)))
        if off != len(data):
            raise ProtocolError(f"OFFLINE_HANDLES: {count} entries do not fill {len(data)} bytes")
        return cls(gpu=gpu, entries=tuple(entries), reset=bool(flags & OFFLINE_HANDLES_RESET))


PAGE_GROUP_QUARANTINED = _C["GL_PAGE_GROUP_QUARANTINED"]
"""PageGroup record ``gflags``: pages reclaimed earlier and restorable (no spans)."""

_S_PG_HEAD = struct.Struct(spec.fmt("gl_page_groups"))
_S_PG_GROUP = struct.Struct(spec.fmt("gl_page_group"))
_S_PG_SPAN = struct.Struct(spec.fmt("gl_group_span"))
_ARRAYS: dict[tuple[str, int], struct.Struct] = {}


def _array(code: str, n: int) -> struct.Struct:
    """A precompiled ``<nQ`` / ``<nI`` struct (at most 16384 per code: a frame's worth)."""
    s = _ARRAYS.get((code, n))
    if s is None:
        s = _ARRAYS[(code, n)] = struct.Struct(f"<{n}{code}")
    return s


class GroupSpan(NamedTuple):
    """One request's blocks in every page of a :class:`PageGroup`; ``tokens`` is what the
    request recomputes if any page of the group is lost."""

    request_id: str
    tokens: int
    block_ids: tuple[int, ...]


class PageGroup(NamedTuple):
    """Pages that hold the same spans (an OFFLINE_PAGE_GROUPS record). No spans and not
    quarantined: empty pages; ``quarantined``: reclaimed earlier, restorable, no spans."""

    page_bytes: int
    pages: tuple[int, ...]
    spans: tuple[GroupSpan, ...] = ()
    quarantined: bool = False


@dataclass(frozen=True)
class OfflinePageGroups(Message):
    """Offline framework hook → agent: its KV pages on one GPU, by group of pages holding
    the same spans (docs/protocol.md). Decoding unpacks each group's page VAs and each
    span's block ids with one precompiled struct call; no per-page objects."""

    TYPE: ClassVar[MsgType] = MsgType.OFFLINE_PAGE_GROUPS
    SIZE: ClassVar[int] = _S_PG_HEAD.size
    gpu: int
    groups: tuple[PageGroup, ...] = ()
    reset: bool = True

    def payload(self) -> bytes:
        out = [_S_PG_HEAD.pack(self.gpu, len(self.groups), int(self.reset), 0)]
        for g in self.groups:
            if g.quarantined and g.spans:
                raise ProtocolError("OFFLINE_PAGE_GROUPS: a quarantined group has no spans")
            out.append(
                _S_PG_GROUP.pack(
                    g.page_bytes,
                    len(g.pages),
                    len(g.spans),
                    PAGE_GROUP_QUARANTINED if g.quarantined else 0,
                    0,
                )
            )
            out.append(_array("Q", len(g.pages)).pack(*g.pages))
            for sp in g.spans:
                n = len(sp.block_ids)
                out.append(_S_PG_SPAN.pack(_pad(sp.request_id, REQUEST_ID_LEN), sp.tokens, n))
                out.append(_array("I", n).pack(*sp.block_ids))
        return b"".join(out)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> OfflinePageGroups:
        gpu, count, flags, _r = _S_PG_HEAD.unpack_from(data)
        end = len(data)
        off = _S_PG_HEAD.size
        group_unpack = _S_PG_GROUP.unpack_from
        span_unpack = _S_PG_SPAN.unpack_from
        span_size = _S_PG_SPAN.size
        names: dict[bytes, str] = {}
        groups: list[PageGroup] = []
        for _ in range(count):
            if off + _S_PG_GROUP.size > end:
                raise ProtocolError(f"OFFLINE_PAGE_GROUPS: {count} groups overrun {end} bytes")
            page_bytes, npages, nspans, gflags, _r2 = group_unpack(data, off)
            off += _S_PG_GROUP.size
            if off + 8 * npages > end:
                raise ProtocolError(f"OFFLINE_PAGE_GROUPS: {npages} pages overrun {end} bytes")
            pages: tuple[int, ...] = _array("Q", npages).unpack_from(data, off)
            off += 8 * npages
            quarantined = bool(gflags & PAGE_GROUP_QUARANTINED)
            if quarantined and nspans:
                raise ProtocolError("OFFLINE_PAGE_GROUPS: a quarantined group with spans")
            if off + span_size * nspans > end:
                raise ProtocolError(f"OFFLINE_PAGE_GROUPS: {nspans} spans overrun {end} bytes")
            spans: list[GroupSpan] = []
            for _s in range(nspans):
                if off + span_size > end:
                    raise ProtocolError(f"OFFLINE_PAGE_GROUPS: spans overrun {end} bytes")
                raw, tokens, n = span_unpack(data, off)
                off += span_size
                if off + 4 * n > end:
                    raise ProtocolError(f"OFFLINE_PAGE_GROUPS: {n} block ids overrun {end} bytes")
                name = names.get(raw)
                if name is None:
                    name = names[raw] = _unpad(raw)
                spans.append(GroupSpan(name, tokens, _array("I", n).unpack_from(data, off)))
                off += 4 * n
            groups.append(PageGroup(page_bytes, pages, tuple(spans), quarantined))
        if off != end:
            raise ProtocolError(f"OFFLINE_PAGE_GROUPS: {count} groups do not fill {end} bytes")
        return cls(gpu=gpu, groups=tuple(groups), reset=bool(flags & OFFLINE_HANDLES_RESET))


_S_RECLAIM_HEAD = struct.Struct(spec.fmt("gl_reclaim"))


@dataclass(frozen=True)
class Reclaim(Message):
    """Agent → offline shim: remap these page handles to the quarantine page and release
    them (the process's channels on ``gpu`` are already disabled and acked)."""

    TYPE: ClassVar[MsgType] = MsgType.RECLAIM
    SIZE: ClassVar[int] = _S_RECLAIM_HEAD.size
    reclaim_seq: int
    gpu: int
    handles: tuple[int, ...] = ()

    def payload(self) -> bytes:
        n = len(self.handles)
        return _S_RECLAIM_HEAD.pack(self.reclaim_seq, self.gpu, n) + struct.pack(
            f"<{n}Q", *self.handles
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Reclaim:
        rseq, gpu, count = _S_RECLAIM_HEAD.unpack_from(data)
        if len(data) != _S_RECLAIM_HEAD.size + 8 * count:
            raise ProtocolError(f"RECLAIM: {count} handles do not fill {len(data)} bytes")
        handles = struct.unpack_from(f"<{count}Q", data, _S_RECLAIM_HEAD.size)
        return cls(reclaim_seq=rseq, gpu=gpu, handles=tuple(handles))


_S_RECLAIM_ACK = struct.Struct(spec.fmt("gl_reclaim_ack"))


@dataclass(frozen=True)
class ReclaimAck(Message):
    """Offline shim → agent: how many handles of RECLAIM ``reclaim_seq`` were released;
    ``ok=False`` with ``err`` (errno or CUDA error) when one could not be (the shim then
    keeps its work held: fail closed)."""

    TYPE: ClassVar[MsgType] = MsgType.RECLAIM_ACK
    SIZE: ClassVar[int] = _S_RECLAIM_ACK.size
    reclaim_seq: int
    gpu: int
    released: int
    ok: bool = True
    err: int = 0

    def payload(self) -> bytes:
        return _S_RECLAIM_ACK.pack(
            self.reclaim_seq, self.gpu, self.released, self.err, int(self.ok)
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> ReclaimAck:
        rseq, gpu, released, err, ok = _S_RECLAIM_ACK.unpack(data)
        return cls(reclaim_seq=rseq, gpu=gpu, released=released, ok=bool(ok), err=err)


@dataclass(frozen=True)
class Restore(Message):
    """Agent → offline shim: back these quarantined pages with fresh physical memory again
    (memory the online side gave back). The pages hold no live blocks (the framework retired
    them when they were reclaimed), so this needs no gate; the shim answers RESTORE_ACK."""

    TYPE: ClassVar[MsgType] = MsgType.RESTORE
    SIZE: ClassVar[int] = _S_RECLAIM_HEAD.size
    restore_seq: int
    gpu: int
    handles: tuple[int, ...] = ()

    def payload(self) -> bytes:
        n = len(self.handles)
        return _S_RECLAIM_HEAD.pack(self.restore_seq, self.gpu, n) + struct.pack(
            f"<{n}Q", *self.handles
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Restore:
        rseq, gpu, count = _S_RECLAIM_HEAD.unpack_from(data)
        if len(data) != _S_RECLAIM_HEAD.size + 8 * count:
            raise ProtocolError(f"RESTORE: {count} handles do not fill {len(data)} bytes")
        handles = struct.unpack_from(f"<{count}Q", data, _S_RECLAIM_HEAD.size)
        return cls(restore_seq=rseq, gpu=gpu, handles=tuple(handles))


@dataclass(frozen=True)
class RestoreAck(Message):
    """Offline shim → agent: how many pages of RESTORE ``restore_seq`` are backed again;
    ``ok=False`` with ``err`` when one could not be (e.g. CUDA out of memory: that page stays
    quarantined; nothing is held, a failed restore is harmless)."""

    TYPE: ClassVar[MsgType] = MsgType.RESTORE_ACK
    SIZE: ClassVar[int] = _S_RECLAIM_ACK.size
    restore_seq: int
    gpu: int
    restored: int
    ok: bool = True
    err: int = 0

    def payload(self) -> bytes:
        return _S_RECLAIM_ACK.pack(
            self.restore_seq, self.gpu, self.restored, self.err, int(self.ok)
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> RestoreAck:
        rseq, gpu, restored, err, ok = _S_RECLAIM_ACK.unpack(data)
        return cls(restore_seq=rseq, gpu=gpu, restored=restored, ok=bool(ok), err=err)


MESSAGE_CLASSES: dict[MsgType, type[Message]] = {
    MsgType.HELLO: Hello,
    MsgType.HELLO_ACK: HelloAck,
    MsgType.CHANNEL_ADD: ChannelAdd,
    MsgType.CHANNEL_FREE: ChannelFree,
    MsgType.ONLINE_BUSY: OnlineBusy,
    MsgType.ONLINE_IDLE: OnlineIdle,
    MsgType.DECODE_GAP: DecodeGap,
    MsgType.GATE: Gate,
    MsgType.GATE_ACK: GateAck,
    MsgType.FD_REQUEST: FdRequest,
    MsgType.FD_PASS: FdPass,
    MsgType.STATUS: Status,
    MsgType.MEM_HANDLES: MemHandles,
    MsgType.INVALIDATE_BLOCKS: InvalidateBlocks,
    MsgType.HEARTBEAT: Heartbeat,
    MsgType.ONLINE_MEMORY: OnlineMemory,
    MsgType.OFFLINE_HANDLES: OfflineHandles,
    MsgType.RECLAIM: Reclaim,
    MsgType.RECLAIM_ACK: ReclaimAck,
    MsgType.RESTORE: Restore,
    MsgType.RESTORE_ACK: RestoreAck,
    MsgType.OFFLINE_PAGE_GROUPS: OfflinePageGroups,
}
VARIABLE_TYPES: frozenset[MsgType] = frozenset(
    {
        MsgType.MEM_HANDLES,
        MsgType.INVALIDATE_BLOCKS,
        MsgType.OFFLINE_HANDLES,
        MsgType.RECLAIM,
        MsgType.RESTORE,
        MsgType.OFFLINE_PAGE_GROUPS,
    }
)


def _enum(enum: type[_E], value: int) -> _E:
    try:
        return enum(value)
    except ValueError:
        raise ProtocolError(f"{enum.__name__}: unknown value {value}") from None


@dataclass(frozen=True)
class Frame:
    """A decoded header (exposed for logging and for the sequence number)."""

    type: MsgType
    flags: int
    length: int
    seq: int


def decode_header(buf: bytes | bytearray | memoryview) -> Frame | None:
    """The header at the start of ``buf``, or None if fewer than 16 bytes are there."""
    if len(buf) < HEADER_SIZE:
        return None
    magic, version, mtype, flags, length, seq = _HEADER.unpack_from(buf)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic 0x{magic:08x}")
    if version != VERSION:
        raise ProtocolError(f"unsupported protocol version {version}")
    if length > MAX_PAYLOAD:
        raise ProtocolError(f"payload length {length} exceeds {MAX_PAYLOAD}")
    kind = _enum(MsgType, mtype)
    cls = MESSAGE_CLASSES[kind]
    if kind in VARIABLE_TYPES:
        if length < cls.SIZE:
            raise ProtocolError(f"{kind.name}: payload {length} shorter than {cls.SIZE}")
    elif length != cls.SIZE:
        raise ProtocolError(f"{kind.name}: payload {length} bytes, expected {cls.SIZE}")
    return Frame(type=kind, flags=flags, length=length, seq=seq)


def decode(buf: bytes | bytearray | memoryview) -> tuple[Message | None, int]:
    """Decode the first frame of ``buf``: ``(message, bytes consumed)`` or ``(None, 0)``."""
    frame = decode_header(buf)
    if frame is None or len(buf) < HEADER_SIZE + frame.length:
        return None, 0
    body = bytes(buf[HEADER_SIZE : HEADER_SIZE + frame.length])
    try:
        msg = MESSAGE_CLASSES[frame.type].from_payload(body, frame.seq)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"{frame.type.name}: {exc}") from exc
    return msg, HEADER_SIZE + frame.length


def decode_with_seq(buf: bytes | bytearray | memoryview) -> tuple[Message | None, int, int]:
    """Like :func:`decode`, also returning the header's sequence number."""
    frame = decode_header(buf)
    msg, used = decode(buf)
    return msg, used, frame.seq if frame is not None and msg is not None else 0


class FrameDecoder:
    """Incremental decoder over a byte stream; fds received alongside are queued.

    ``feed(data, fds)`` returns every complete message; an :class:`FdPass` takes the oldest
    queued descriptor as its ``fd``.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._fds: list[int] = []

    def feed(self, data: bytes, fds: list[int] | tuple[int, ...] = ()) -> list[Message]:
        self._buf += data
        self._fds.extend(fds)
        out: list[Message] = []
        while True:
            msg, used = decode(self._buf)
            if msg is None:
                return out
            del self._buf[:used]
            if isinstance(msg, FdPass) and self._fds:
                msg = FdPass(
                    fd_kind=msg.fd_kind,
                    h_client=msg.h_client,
                    sender_fd=msg.sender_fd,
                    fd=self._fds.pop(0),
                )
            out.append(msg)

    def pending_fds(self) -> list[int]:
        """Descriptors received but not yet claimed by an FD_PASS (caller closes them)."""
        fds, self._fds = self._fds, []
        return fds


def c_constants() -> dict[str, int]:
    """Every ``#define GL_*`` number of gleaner_proto.h, by its C name."""
    out: dict[str, int] = {
        "GL_PROTO_MAGIC": MAGIC,
        "GL_PROTO_VERSION": VERSION,
        "GL_HEADER_SIZE": HEADER_SIZE,
        "GL_MAX_PAYLOAD": MAX_PAYLOAD,
        "GL_FLAG_HAS_FD": FLAG_HAS_FD,
        "GL_MSG_MAX": max(MsgType),
        "GL_CAP_GATE_THREAD": CAP_GATE_THREAD,
        "GL_CAP_FD_PASS": CAP_FD_PASS,
        "GL_CAP_LAUNCH_HOOK": CAP_LAUNCH_HOOK,
        "GL_CAP_BUSY_TRACK": CAP_BUSY_TRACK,
        "GL_FD_NVIDIACTL": FdKind.NVIDIACTL,
        "GL_MEM_ADDED": MEM_ADDED,
        "GL_MEM_FREED": MEM_FREED,
        "GL_GPU_UNKNOWN": GPU_UNKNOWN,
        "GL_GPU_ALL": GPU_ALL,
        "GL_MAX_GPUS": MAX_GPUS,
        "GL_UUID_LEN": UUID_LEN,
        "GL_JOB_LEN": JOB_LEN,
        "GL_REASON_LEN": REASON_LEN,
        "GL_REQUEST_ID_LEN": REQUEST_ID_LEN,
        "GL_OFFLINE_HANDLES_RESET": OFFLINE_HANDLES_RESET,
        "GL_PAGE_GROUP_QUARANTINED": PAGE_GROUP_QUARANTINED,
    }
    out.update({f"GL_MSG_{m.name}": int(m) for m in MsgType})
    out.update({f"GL_ROLE_{r.name}": int(r) for r in Role})
    out.update({f"GL_GATE_MODE_{g.name}": int(g) for g in GateMode})
    out.update({f"GL_KIND_{k.name}": int(k) for k in Kind})
    out.update({f"GL_STATUS_{s.name}": int(s) for s in StatusCode})
    return out


STRUCT_SIZES: dict[str, int] = {
    "gl_header": HEADER_SIZE,
    "gl_hello": Hello.SIZE,
    "gl_hello_ack": HelloAck.SIZE,
    "gl_channel": Channel.SIZE,
    "gl_online_edge": OnlineEdge.SIZE,
    "gl_decode_gap": DecodeGap.SIZE,
    "gl_gate": Gate.SIZE,
    "gl_gate_ack": GateAck.SIZE,
    "gl_fd_request": FdRequest.SIZE,
    "gl_fd_pass": FdPass.SIZE,
    "gl_status": Status.SIZE,
    "gl_mem_handles": MemHandles.SIZE,
    "gl_mem_handle": _S_MEM_ENTRY.size,
    "gl_invalidate_blocks": InvalidateBlocks.SIZE,
    "gl_heartbeat": Heartbeat.SIZE,
    "gl_online_memory": OnlineMemory.SIZE,
    "gl_offline_handles": OfflineHandles.SIZE,
    "gl_handle_span": _S_OFF_ENTRY.size,
    "gl_reclaim": Reclaim.SIZE,
    "gl_reclaim_ack": ReclaimAck.SIZE,
    "gl_restore": Restore.SIZE,
    "gl_restore_ack": RestoreAck.SIZE,
    "gl_page_groups": OfflinePageGroups.SIZE,
    "gl_page_group": _S_PG_GROUP.size,
    "gl_group_span": _S_PG_SPAN.size,
}


# --- I/O helpers (the only functions here that touch a socket) -------------------------


def send_message(sock: socket.socket, msg: Message, seq: int = 0) -> None:
    """Send one frame; an :class:`FdPass` with ``fd`` set carries it as SCM_RIGHTS."""
    data = msg.encode(seq)
    if isinstance(msg, FdPass):
        if msg.fd is None:
            raise ProtocolError("FD_PASS without a descriptor to send")
        sent = socket.send_fds(sock, [data], [msg.fd])
        data = data[sent:]
    if data:
        sock.sendall(data)


def recv_messages(
    sock: socket.socket, decoder: FrameDecoder, bufsize: int = 65536
) -> list[Message] | None:
    """Read once from ``sock`` (fds included) and return the complete messages.

    Returns None at end of stream. Blocking or not follows the socket's own mode.
    """
    data, fds, _flags, _addr = socket.recv_fds(sock, bufsize, 4)
    if not data:
        for fd in fds:
            os.close(fd)
        return None
    return decoder.feed(data, fds)
