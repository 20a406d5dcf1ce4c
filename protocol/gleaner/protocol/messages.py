"""The protocol's messages, records, enums and constants (GENERATED: do not edit).

Written by ``python -m gleaner.protocol.pygen --write`` (``make proto``) from the
protocol table, :mod:`gleaner.protocol.spec`; change the table and regenerate (a test
fails on drift). :mod:`gleaner.protocol.wire` re-exports everything here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar, Final, NamedTuple

from gleaner.protocol.codec import (
    Message,
    ProtocolError,
    array,
    enum_value,
    pad,
    pad_array,
    truncate,
    unpad,
    unpad_array,
)

__all__ = [
    "CAP_BUSY_TRACK",
    "CAP_FD_PASS",
    "CAP_GATE_THREAD",
    "CAP_LAUNCH_HOOK",
    "FLAG_HAS_FD",
    "GPU_ALL",
    "GPU_UNKNOWN",
    "HEADER_SIZE",
    "JOB_LEN",
    "MAGIC",
    "MAX_GPUS",
    "MAX_PAYLOAD",
    "MEM_ADDED",
    "MEM_FREED",
    "MESSAGE_CLASSES",
    "MSG_MAX",
    "OFFLINE_HANDLES_RESET",
    "PAGE_GROUP_QUARANTINED",
    "REASON_LEN",
    "REQUEST_ID_LEN",
    "STRUCT_SIZES",
    "UUID_LEN",
    "VARIABLE_TYPES",
    "VERSION",
    "Channel",
    "ChannelAdd",
    "ChannelFree",
    "DecodeGap",
    "FdKind",
    "FdPass",
    "FdRequest",
    "Gate",
    "GateAck",
    "GateMode",
    "GroupSpan",
    "HandleSpan",
    "Heartbeat",
    "Hello",
    "HelloAck",
    "InvalidateBlocks",
    "Kind",
    "MemHandle",
    "MemHandles",
    "MsgType",
    "OfflineHandles",
    "OfflinePageGroups",
    "OnlineBusy",
    "OnlineEdge",
    "OnlineIdle",
    "OnlineMemory",
    "PageGroup",
    "Reclaim",
    "ReclaimAck",
    "Restore",
    "RestoreAck",
    "Role",
    "Status",
    "StatusCode",
    "c_constants",
]

# --- Constants (the C header's #defines) -----------------------------------------------

MAGIC: Final = 0x524E4C47
VERSION: Final = 1
HEADER_SIZE: Final = 16
MAX_PAYLOAD: Final = 65536
FLAG_HAS_FD: Final = 0x1
MSG_MAX: Final = 22
OFFLINE_HANDLES_RESET: Final = 0x1
PAGE_GROUP_QUARANTINED: Final = 0x1
CAP_GATE_THREAD: Final = 0x1
CAP_FD_PASS: Final = 0x2
CAP_LAUNCH_HOOK: Final = 0x4
CAP_BUSY_TRACK: Final = 0x8
MEM_ADDED: Final = 1
MEM_FREED: Final = 2
GPU_UNKNOWN: Final = 0xFFFFFFFF
GPU_ALL: Final = 0xFFFFFFFF
MAX_GPUS: Final = 8
UUID_LEN: Final = 48
JOB_LEN: Final = 128
REASON_LEN: Final = 96
REQUEST_ID_LEN: Final = 64


# --- Enums ------------------------------------------------------------------------------


class MsgType(IntEnum):
    """``header.type``: who sends it is in the protocol table (docs/protocol.md)."""

    HELLO = 1
    HELLO_ACK = 2
    CHANNEL_ADD = 3
    CHANNEL_FREE = 4
    ONLINE_BUSY = 5
    ONLINE_IDLE = 6
    DECODE_GAP = 7
    GATE = 8
    GATE_ACK = 9
    FD_REQUEST = 10
    FD_PASS = 11
    STATUS = 12
    MEM_HANDLES = 13
    INVALIDATE_BLOCKS = 14
    HEARTBEAT = 15
    ONLINE_MEMORY = 16
    OFFLINE_HANDLES = 17
    RECLAIM = 18
    RECLAIM_ACK = 19
    RESTORE = 20
    RESTORE_ACK = 21
    OFFLINE_PAGE_GROUPS = 22


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
    """What a ``Channel`` record describes."""

    TSG = 1
    CHANNEL = 2


class FdKind(IntEnum):
    """What descriptor an ``FdPass`` carries."""

    NVIDIACTL = 1


class StatusCode(IntEnum):
    """Why an offline process is (not) running (``Status.code``)."""

    OK = 0
    GATED_BY_AGENT = 1
    NO_AGENT = 2
    NO_HANDLES = 3
    CONTROL_REFUSED = 4
    PROTOCOL_ERROR = 5


# --- Payload structs (formats from the table) ------------------------------------------

_S_GL_HEADER: Final = struct.Struct("<IBBHII")
_S_GL_HELLO: Final = struct.Struct("<IBBH8i384s128s")
_S_GL_HELLO_ACK: Final = struct.Struct("<IBBBBQ")
_S_GL_CHANNEL: Final = struct.Struct("<IIIIB3xIII")
_S_GL_ONLINE_EDGE: Final = struct.Struct("<I4xQQ")
_S_GL_DECODE_GAP: Final = struct.Struct("<I4xQQ")
_S_GL_GATE: Final = struct.Struct("<QIB3x")
_S_GL_GATE_ACK: Final = struct.Struct("<QQIBBHiIII")
_S_GL_FD_REQUEST: Final = struct.Struct("<I4x")
_S_GL_FD_PASS: Final = struct.Struct("<IIi4x")
_S_GL_STATUS: Final = struct.Struct("<IIQQI4x96s")
_S_GL_MEM_HANDLES: Final = struct.Struct("<I4x")
_S_GL_MEM_HANDLE: Final = struct.Struct("<IIIIIIQ")
_S_GL_INVALIDATE_BLOCKS: Final = struct.Struct("<64sI4x")
_S_GL_HEARTBEAT: Final = struct.Struct("<QII")
_S_GL_ONLINE_MEMORY: Final = struct.Struct("<I4xQQQ")
_S_GL_OFFLINE_HANDLES: Final = struct.Struct("<IIII")
_S_GL_HANDLE_SPAN: Final = struct.Struct("<QQ64sII")
_S_GL_PAGE_GROUPS: Final = struct.Struct("<IIII")
_S_GL_PAGE_GROUP: Final = struct.Struct("<QIIII")
_S_GL_GROUP_SPAN: Final = struct.Struct("<64sII")
_S_GL_RECLAIM: Final = struct.Struct("<QII")
_S_GL_RECLAIM_ACK: Final = struct.Struct("<QIIiB3x")


# --- Records of variable payloads ------------------------------------------------------


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
class HandleSpan:
    """One OFFLINE_HANDLES entry: the KV blocks of one request inside one page handle. ``handle``
    is the page's device virtual address (what the shim saw in ``cuMemMap``); an entry with no
    request and no blocks says the handle exists and holds nothing.
    """

    handle: int
    size: int
    request_id: str = ""
    tokens: int = 0
    block_ids: tuple[int, ...] = ()


class PageGroup(NamedTuple):
    """Pages that hold the same spans (an OFFLINE_PAGE_GROUPS record). No spans and not
    quarantined: empty pages; ``quarantined``: reclaimed earlier, restorable, no spans.
    """

    page_bytes: int
    pages: tuple[int, ...]
    spans: tuple[GroupSpan, ...] = ()
    quarantined: bool = False


class GroupSpan(NamedTuple):
    """One request's blocks in every page of a ``PageGroup``; ``tokens`` is what the request
    recomputes if any page of the group is lost.
    """

    request_id: str
    tokens: int
    block_ids: tuple[int, ...]


# --- Messages ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello(Message):
    """First frame on every connection: the process, its role, GPUs and job."""

    TYPE: ClassVar[MsgType] = MsgType.HELLO
    SIZE: ClassVar[int] = _S_GL_HELLO.size
    pid: int
    role: Role
    gpu_uuids: tuple[str, ...] = ()
    gpu_indices: tuple[int, ...] = ()
    job: str = ""
    caps: int = 0

    def payload(self) -> bytes:
        if len(self.gpu_uuids) > MAX_GPUS or len(self.gpu_indices) > MAX_GPUS:
            raise ProtocolError(f"HELLO: at most {MAX_GPUS} GPUs")
        return _S_GL_HELLO.pack(
            self.pid,
            int(self.role),
            max(len(self.gpu_uuids), len(self.gpu_indices)),
            self.caps,
            *self.gpu_indices, *((-1,) * (MAX_GPUS - len(self.gpu_indices))),
            pad_array(self.gpu_uuids, UUID_LEN, MAX_GPUS),
            pad(self.job, JOB_LEN),
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Hello:
        h_v = _S_GL_HELLO.unpack(data)
        if h_v[2] > MAX_GPUS:
            raise ProtocolError(f"HELLO: {h_v[2]} GPUs, at most {MAX_GPUS}")
        return cls(
            pid=h_v[0],
            role=enum_value(Role, h_v[1]),
            gpu_uuids=unpad_array(h_v[12], UUID_LEN, h_v[2]),
            gpu_indices=tuple(i for i in h_v[4:12][: h_v[2]] if i != -1),
            job=unpad(h_v[13]),
            caps=h_v[3],
        )


@dataclass(frozen=True)
class HelloAck(Message):
    """The agent's answer to HELLO: the initial gate state and who runs the controls."""

    TYPE: ClassVar[MsgType] = MsgType.HELLO_ACK
    SIZE: ClassVar[int] = _S_GL_HELLO_ACK.size
    accepted: bool = True
    gate_open: bool = False
    gate_mode: GateMode = GateMode.SHIM
    heartbeat_ms: int = 1000
    source_id: int = 0

    def payload(self) -> bytes:
        return _S_GL_HELLO_ACK.pack(
            self.heartbeat_ms,
            int(self.accepted),
            int(self.gate_open),
            int(self.gate_mode),
            0,
            self.source_id,
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> HelloAck:
        (
            h_heartbeat_ms,
            h_accepted,
            h_gate_open,
            h_gate_mode,
            _,
            h_source_id,
        ) = _S_GL_HELLO_ACK.unpack(data)
        return cls(
            accepted=bool(h_accepted),
            gate_open=bool(h_gate_open),
            gate_mode=enum_value(GateMode, h_gate_mode),
            heartbeat_ms=h_heartbeat_ms,
            source_id=h_source_id,
        )


@dataclass(frozen=True)
class Channel(Message):
    """A channel group (TSG) or GPFIFO channel the process allocated (RM handles)."""

    TYPE: ClassVar[MsgType] = MsgType.CHANNEL_ADD
    SIZE: ClassVar[int] = _S_GL_CHANNEL.size
    h_client: int
    h_parent: int
    h_object: int
    h_class: int
    kind: Kind
    gpu: int = GPU_UNKNOWN
    engine_type: int = 0

    def payload(self) -> bytes:
        return _S_GL_CHANNEL.pack(
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
        (
            h_h_client,
            h_h_parent,
            h_h_object,
            h_h_class,
            h_kind,
            h_gpu,
            h_engine_type,
            _,
        ) = _S_GL_CHANNEL.unpack(data)
        return cls(
            h_client=h_h_client,
            h_parent=h_h_parent,
            h_object=h_h_object,
            h_class=h_h_class,
            kind=enum_value(Kind, h_kind),
            gpu=h_gpu,
            engine_type=h_engine_type,
        )


@dataclass(frozen=True)
class ChannelAdd(Channel):
    """CHANNEL_ADD: sent after the RM allocation succeeded."""

    TYPE: ClassVar[MsgType] = MsgType.CHANNEL_ADD


@dataclass(frozen=True)
class ChannelFree(Channel):
    """CHANNEL_FREE: sent after the RM free of that handle succeeded."""

    TYPE: ClassVar[MsgType] = MsgType.CHANNEL_FREE


@dataclass(frozen=True)
class OnlineEdge(Message):
    """A busy/idle transition of an online process (CLOCK_MONOTONIC nanoseconds)."""

    TYPE: ClassVar[MsgType] = MsgType.ONLINE_BUSY
    SIZE: ClassVar[int] = _S_GL_ONLINE_EDGE.size
    gpu: int
    mono_ns: int
    request_id: int = 0

    def payload(self) -> bytes:
        return _S_GL_ONLINE_EDGE.pack(self.gpu, self.mono_ns, self.request_id)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> OnlineEdge:
        h_gpu, h_mono_ns, h_request_id = _S_GL_ONLINE_EDGE.unpack(data)
        return cls(gpu=h_gpu, mono_ns=h_mono_ns, request_id=h_request_id)


@dataclass(frozen=True)
class OnlineBusy(OnlineEdge):
    """ONLINE_BUSY: the online process launched work while idle."""

    TYPE: ClassVar[MsgType] = MsgType.ONLINE_BUSY


@dataclass(frozen=True)
class OnlineIdle(OnlineEdge):
    """ONLINE_IDLE: every tracked launch of the online process completed."""

    TYPE: ClassVar[MsgType] = MsgType.ONLINE_IDLE


@dataclass(frozen=True)
class DecodeGap(Message):
    """The idle gap between two busy periods (decode iterations) of an online process."""

    TYPE: ClassVar[MsgType] = MsgType.DECODE_GAP
    SIZE: ClassVar[int] = _S_GL_DECODE_GAP.size
    gpu: int
    mono_ns: int
    gap_ns: int

    def payload(self) -> bytes:
        return _S_GL_DECODE_GAP.pack(self.gpu, self.mono_ns, self.gap_ns)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> DecodeGap:
        h_gpu, h_mono_ns, h_gap_ns = _S_GL_DECODE_GAP.unpack(data)
        return cls(gpu=h_gpu, mono_ns=h_mono_ns, gap_ns=h_gap_ns)


@dataclass(frozen=True)
class Gate(Message):
    """Agent → offline shim: enable (``enable=True``) or disable its channels."""

    TYPE: ClassVar[MsgType] = MsgType.GATE
    SIZE: ClassVar[int] = _S_GL_GATE.size
    gate_seq: int
    enable: bool
    gpu: int = GPU_ALL

    def payload(self) -> bytes:
        return _S_GL_GATE.pack(self.gate_seq, self.gpu, int(self.enable))

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Gate:
        h_gate_seq, h_gpu, h_enable = _S_GL_GATE.unpack(data)
        return cls(gate_seq=h_gate_seq, enable=bool(h_enable), gpu=h_gpu)


@dataclass(frozen=True)
class GateAck(Message):
    """Shim → agent: what a GATE did; ``latency_ns`` from receipt to the last control."""

    TYPE: ClassVar[MsgType] = MsgType.GATE_ACK
    SIZE: ClassVar[int] = _S_GL_GATE_ACK.size
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
        return _S_GL_GATE_ACK.pack(
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
        (
            h_gate_seq,
            h_latency_ns,
            h_gpu,
            h_enabled,
            h_ok,
            h_n_objects,
            h_err,
            h_rm_status,
            h_n_failed,
            _,
        ) = _S_GL_GATE_ACK.unpack(data)
        return cls(
            gate_seq=h_gate_seq,
            enabled=bool(h_enabled),
            ok=bool(h_ok),
            latency_ns=h_latency_ns,
            gpu=h_gpu,
            n_objects=h_n_objects,
            err=h_err,
            rm_status=h_rm_status,
            n_failed=h_n_failed,
        )


@dataclass(frozen=True)
class FdRequest(Message):
    """Agent → shim: pass me your nvidiactl descriptor (answered by FD_PASS)."""

    TYPE: ClassVar[MsgType] = MsgType.FD_REQUEST
    SIZE: ClassVar[int] = _S_GL_FD_REQUEST.size
    fd_kind: FdKind = FdKind.NVIDIACTL

    def payload(self) -> bytes:
        return _S_GL_FD_REQUEST.pack(int(self.fd_kind))

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> FdRequest:
        h_fd_kind, = _S_GL_FD_REQUEST.unpack(data)
        return cls(fd_kind=enum_value(FdKind, h_fd_kind))


@dataclass(frozen=True)
class FdPass(Message):
    """Shim → agent: the frame that carries libcuda's nvidiactl fd as SCM_RIGHTS. ``fd`` is the
    descriptor received in *this* process (set by ``recv_messages``), or the one to send (used
    by ``send_message``); it is not part of the payload.
    """

    TYPE: ClassVar[MsgType] = MsgType.FD_PASS
    SIZE: ClassVar[int] = _S_GL_FD_PASS.size
    fd_kind: FdKind = FdKind.NVIDIACTL
    h_client: int = 0
    sender_fd: int = -1
    fd: int | None = field(default=None, compare=False)

    @property
    def flags(self) -> int:
        return FLAG_HAS_FD

    def payload(self) -> bytes:
        return _S_GL_FD_PASS.pack(int(self.fd_kind), self.h_client, self.sender_fd)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> FdPass:
        h_fd_kind, h_h_client, h_sender_fd = _S_GL_FD_PASS.unpack(data)
        return cls(
            fd_kind=enum_value(FdKind, h_fd_kind),
            h_client=h_h_client,
            sender_fd=h_sender_fd,
        )


@dataclass(frozen=True)
class Status(Message):
    """Shim → agent: whether the offline process runs, and if not, why."""

    TYPE: ClassVar[MsgType] = MsgType.STATUS
    SIZE: ClassVar[int] = _S_GL_STATUS.size
    code: StatusCode
    reason: str = ""
    gpu: int = GPU_ALL
    mono_ns: int = 0
    blocked_ns: int = 0
    blocked_threads: int = 0

    def payload(self) -> bytes:
        return _S_GL_STATUS.pack(
            int(self.code),
            self.gpu,
            self.mono_ns,
            self.blocked_ns,
            self.blocked_threads,
            pad(truncate(self.reason, REASON_LEN), REASON_LEN),
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Status:
        (
            h_code,
            h_gpu,
            h_mono_ns,
            h_blocked_ns,
            h_blocked_threads,
            h_reason,
        ) = _S_GL_STATUS.unpack(data)
        return cls(
            code=enum_value(StatusCode, h_code),
            reason=unpad(h_reason),
            gpu=h_gpu,
            mono_ns=h_mono_ns,
            blocked_ns=h_blocked_ns,
            blocked_threads=h_blocked_threads,
        )


@dataclass(frozen=True)
class MemHandles(Message):
    """Shim → agent: a batch of memory-handle table entries."""

    TYPE: ClassVar[MsgType] = MsgType.MEM_HANDLES
    SIZE: ClassVar[int] = _S_GL_MEM_HANDLES.size
    entries: tuple[MemHandle, ...] = ()

    def payload(self) -> bytes:
        out: list[bytes] = []
        out.append(_S_GL_MEM_HANDLES.pack(len(self.entries)))
        for e0 in self.entries:
            out.append(_S_GL_MEM_HANDLE.pack(
                e0.h_client,
                e0.h_parent,
                e0.h_memory,
                e0.h_class,
                e0.gpu,
                e0.flags,
                e0.size,
            ))
        return b"".join(out)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> MemHandles:
        h_count, = _S_GL_MEM_HANDLES.unpack_from(data)
        if len(data) != _S_GL_MEM_HANDLES.size + h_count * _S_GL_MEM_HANDLE.size:
            raise ProtocolError(f"MEM_HANDLES: {h_count} entries do not fill {len(data)} bytes")
        off = _S_GL_MEM_HANDLES.size
        t_entries: list[MemHandle] = []
        for _ in range(h_count):
            (
                r_h_client,
                r_h_parent,
                r_h_memory,
                r_h_class,
                r_gpu,
                r_flags,
                r_size,
            ) = _S_GL_MEM_HANDLE.unpack_from(data, off)
            off += _S_GL_MEM_HANDLE.size
            t_entries.append(
                MemHandle(r_h_client, r_h_parent, r_h_memory, r_h_class, r_gpu, r_flags, r_size)
            )
        return cls(entries=tuple(t_entries))


@dataclass(frozen=True)
class InvalidateBlocks(Message):
    """Agent → framework: KV-cache block ids of one request whose pages were reclaimed."""

    TYPE: ClassVar[MsgType] = MsgType.INVALIDATE_BLOCKS
    SIZE: ClassVar[int] = _S_GL_INVALIDATE_BLOCKS.size
    request_id: str
    block_ids: tuple[int, ...] = ()

    def payload(self) -> bytes:
        out: list[bytes] = []
        out.append(_S_GL_INVALIDATE_BLOCKS.pack(
            pad(self.request_id, REQUEST_ID_LEN),
            len(self.block_ids),
        ))
        out.append(array("I", len(self.block_ids)).pack(*self.block_ids))
        return b"".join(out)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> InvalidateBlocks:
        h_request_id, h_count = _S_GL_INVALIDATE_BLOCKS.unpack_from(data)
        if len(data) != _S_GL_INVALIDATE_BLOCKS.size + h_count * 4:
            raise ProtocolError(f"INVALIDATE_BLOCKS: {h_count} ids do not fill {len(data)} bytes")
        off = _S_GL_INVALIDATE_BLOCKS.size
        t_block_ids: tuple[int, ...] = array("I", h_count).unpack_from(data, off)
        off += 4 * h_count
        return cls(request_id=unpad(h_request_id), block_ids=t_block_ids)


@dataclass(frozen=True)
class Heartbeat(Message):
    """Liveness, both ways; the shim's ``state`` is 1 while its gate is open."""

    TYPE: ClassVar[MsgType] = MsgType.HEARTBEAT
    SIZE: ClassVar[int] = _S_GL_HEARTBEAT.size
    mono_ns: int
    pid: int = 0
    state: int = 0

    def payload(self) -> bytes:
        return _S_GL_HEARTBEAT.pack(self.mono_ns, self.pid, self.state)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Heartbeat:
        h_mono_ns, h_pid, h_state = _S_GL_HEARTBEAT.unpack(data)
        return cls(mono_ns=h_mono_ns, pid=h_pid, state=h_state)


@dataclass(frozen=True)
class OnlineMemory(Message):
    """Online side → agent: KV-cache bytes in use and reserved on one GPU (``gpu`` as in
    ONLINE_BUSY: an index into the process's GPUs, or ``GPU_ALL``).
    """

    TYPE: ClassVar[MsgType] = MsgType.ONLINE_MEMORY
    SIZE: ClassVar[int] = _S_GL_ONLINE_MEMORY.size
    gpu: int
    kv_used_bytes: int
    kv_reserved_bytes: int = 0
    mono_ns: int = 0

    def payload(self) -> bytes:
        return _S_GL_ONLINE_MEMORY.pack(
            self.gpu,
            self.mono_ns,
            self.kv_used_bytes,
            self.kv_reserved_bytes,
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> OnlineMemory:
        h_gpu, h_mono_ns, h_kv_used_bytes, h_kv_reserved_bytes = _S_GL_ONLINE_MEMORY.unpack(data)
        return cls(
            gpu=h_gpu,
            kv_used_bytes=h_kv_used_bytes,
            kv_reserved_bytes=h_kv_reserved_bytes,
            mono_ns=h_mono_ns,
        )


@dataclass(frozen=True)
class OfflineHandles(Message):
    """Offline framework hook → agent: its KV page handles on one GPU and what they hold."""

    TYPE: ClassVar[MsgType] = MsgType.OFFLINE_HANDLES
    SIZE: ClassVar[int] = _S_GL_OFFLINE_HANDLES.size
    gpu: int
    entries: tuple[HandleSpan, ...] = ()
    reset: bool = True

    def payload(self) -> bytes:
        out: list[bytes] = []
        out.append(_S_GL_OFFLINE_HANDLES.pack(
            self.gpu,
            len(self.entries),
            (OFFLINE_HANDLES_RESET if self.reset else 0),
            0,
        ))
        for e0 in self.entries:
            out.append(_S_GL_HANDLE_SPAN.pack(
                e0.handle,
                e0.size,
                pad(e0.request_id, REQUEST_ID_LEN),
                e0.tokens,
                len(e0.block_ids),
            ))
            out.append(array("I", len(e0.block_ids)).pack(*e0.block_ids))
        return b"".join(out)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> OfflineHandles:
        h_gpu, h_count, h_flags, _ = _S_GL_OFFLINE_HANDLES.unpack_from(data)
        end = len(data)
        off = _S_GL_OFFLINE_HANDLES.size
        names: dict[bytes, str] = {}
        _s_gl_handle_span_size = _S_GL_HANDLE_SPAN.size
        _s_gl_handle_span_unpack = _S_GL_HANDLE_SPAN.unpack_from
        l0_entries: list[HandleSpan] = []
        for _ in range(h_count):
            if off + _s_gl_handle_span_size > end:
                raise ProtocolError(f"OFFLINE_HANDLES: {h_count} entries overrun {end} bytes")
            (
                r1_handle,
                r1_size,
                r1_request_id,
                r1_tokens,
                r1_nblocks,
            ) = _s_gl_handle_span_unpack(data, off)
            off += _s_gl_handle_span_size
            s_r1_request_id = names.get(r1_request_id)
            if s_r1_request_id is None:
                s_r1_request_id = names[r1_request_id] = unpad(r1_request_id)
            if off + 4 * r1_nblocks > end:
                raise ProtocolError(f"OFFLINE_HANDLES: {r1_nblocks} block ids overrun {end} bytes")
            t1_block_ids: tuple[int, ...] = array("I", r1_nblocks).unpack_from(data, off)
            off += 4 * r1_nblocks
            l0_entries.append(
                HandleSpan(r1_handle, r1_size, s_r1_request_id, r1_tokens, t1_block_ids)
            )
        if off != end:
            raise ProtocolError(f"OFFLINE_HANDLES: {h_count} entries do not fill {end} bytes")
        return cls(
            gpu=h_gpu,
            entries=tuple(l0_entries),
            reset=bool(h_flags & OFFLINE_HANDLES_RESET),
        )


@dataclass(frozen=True)
class Reclaim(Message):
    """Agent → offline shim: remap these page handles to the quarantine page and release them
    (the process's channels on ``gpu`` are already disabled and acked).
    """

    TYPE: ClassVar[MsgType] = MsgType.RECLAIM
    SIZE: ClassVar[int] = _S_GL_RECLAIM.size
    reclaim_seq: int
    gpu: int
    handles: tuple[int, ...] = ()

    def payload(self) -> bytes:
        out: list[bytes] = []
        out.append(_S_GL_RECLAIM.pack(self.reclaim_seq, self.gpu, len(self.handles)))
        out.append(array("Q", len(self.handles)).pack(*self.handles))
        return b"".join(out)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Reclaim:
        h_reclaim_seq, h_gpu, h_count = _S_GL_RECLAIM.unpack_from(data)
        if len(data) != _S_GL_RECLAIM.size + h_count * 8:
            raise ProtocolError(f"RECLAIM: {h_count} handles do not fill {len(data)} bytes")
        off = _S_GL_RECLAIM.size
        t_handles: tuple[int, ...] = array("Q", h_count).unpack_from(data, off)
        off += 8 * h_count
        return cls(reclaim_seq=h_reclaim_seq, gpu=h_gpu, handles=t_handles)


@dataclass(frozen=True)
class ReclaimAck(Message):
    """Offline shim → agent: how many handles of RECLAIM ``reclaim_seq`` were released;
    ``ok=False`` with ``err`` (errno or CUDA error) when one could not be (the shim then keeps
    its work held: fail closed).
    """

    TYPE: ClassVar[MsgType] = MsgType.RECLAIM_ACK
    SIZE: ClassVar[int] = _S_GL_RECLAIM_ACK.size
    reclaim_seq: int
    gpu: int
    released: int
    ok: bool = True
    err: int = 0

    def payload(self) -> bytes:
        return _S_GL_RECLAIM_ACK.pack(
            self.reclaim_seq,
            self.gpu,
            self.released,
            self.err,
            int(self.ok),
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> ReclaimAck:
        h_reclaim_seq, h_gpu, h_released, h_err, h_ok = _S_GL_RECLAIM_ACK.unpack(data)
        return cls(
            reclaim_seq=h_reclaim_seq,
            gpu=h_gpu,
            released=h_released,
            ok=bool(h_ok),
            err=h_err,
        )


@dataclass(frozen=True)
class Restore(Message):
    """Agent → offline shim: back these quarantined pages with fresh physical memory again
    (memory the online side gave back). The pages hold no live blocks (the framework retired
    them when they were reclaimed), so this needs no gate; the shim answers RESTORE_ACK.
    """

    TYPE: ClassVar[MsgType] = MsgType.RESTORE
    SIZE: ClassVar[int] = _S_GL_RECLAIM.size
    restore_seq: int
    gpu: int
    handles: tuple[int, ...] = ()

    def payload(self) -> bytes:
        out: list[bytes] = []
        out.append(_S_GL_RECLAIM.pack(self.restore_seq, self.gpu, len(self.handles)))
        out.append(array("Q", len(self.handles)).pack(*self.handles))
        return b"".join(out)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> Restore:
        h_reclaim_seq, h_gpu, h_count = _S_GL_RECLAIM.unpack_from(data)
        if len(data) != _S_GL_RECLAIM.size + h_count * 8:
            raise ProtocolError(f"RESTORE: {h_count} handles do not fill {len(data)} bytes")
        off = _S_GL_RECLAIM.size
        t_handles: tuple[int, ...] = array("Q", h_count).unpack_from(data, off)
        off += 8 * h_count
        return cls(restore_seq=h_reclaim_seq, gpu=h_gpu, handles=t_handles)


@dataclass(frozen=True)
class RestoreAck(Message):
    """Offline shim → agent: how many pages of RESTORE ``restore_seq`` are backed again;
    ``ok=False`` with ``err`` when one could not be (e.g. CUDA out of memory: that page stays
    quarantined; nothing is held, a failed restore is harmless).
    """

    TYPE: ClassVar[MsgType] = MsgType.RESTORE_ACK
    SIZE: ClassVar[int] = _S_GL_RECLAIM_ACK.size
    restore_seq: int
    gpu: int
    restored: int
    ok: bool = True
    err: int = 0

    def payload(self) -> bytes:
        return _S_GL_RECLAIM_ACK.pack(
            self.restore_seq,
            self.gpu,
            self.restored,
            self.err,
            int(self.ok),
        )

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> RestoreAck:
        h_reclaim_seq, h_gpu, h_released, h_err, h_ok = _S_GL_RECLAIM_ACK.unpack(data)
        return cls(
            restore_seq=h_reclaim_seq,
            gpu=h_gpu,
            restored=h_released,
            ok=bool(h_ok),
            err=h_err,
        )


@dataclass(frozen=True)
class OfflinePageGroups(Message):
    """Offline framework hook → agent: its KV pages on one GPU, by group of pages holding the
    same spans (docs/protocol.md). Decoding unpacks each group's page VAs and each span's
    block ids with one precompiled struct call; no per-page objects.
    """

    TYPE: ClassVar[MsgType] = MsgType.OFFLINE_PAGE_GROUPS
    SIZE: ClassVar[int] = _S_GL_PAGE_GROUPS.size
    gpu: int
    groups: tuple[PageGroup, ...] = ()
    reset: bool = True

    def payload(self) -> bytes:
        out: list[bytes] = []
        out.append(_S_GL_PAGE_GROUPS.pack(
            self.gpu,
            len(self.groups),
            (OFFLINE_HANDLES_RESET if self.reset else 0),
            0,
        ))
        for e0 in self.groups:
            if e0.quarantined and e0.spans:
                raise ProtocolError("OFFLINE_PAGE_GROUPS: spans in a quarantined record")
            out.append(_S_GL_PAGE_GROUP.pack(
                e0.page_bytes,
                len(e0.pages),
                len(e0.spans),
                (PAGE_GROUP_QUARANTINED if e0.quarantined else 0),
                0,
            ))
            out.append(array("Q", len(e0.pages)).pack(*e0.pages))
            for e1 in e0.spans:
                out.append(_S_GL_GROUP_SPAN.pack(
                    pad(e1.request_id, REQUEST_ID_LEN),
                    e1.tokens,
                    len(e1.block_ids),
                ))
                out.append(array("I", len(e1.block_ids)).pack(*e1.block_ids))
        return b"".join(out)

    @classmethod
    def from_payload(cls, data: bytes, seq: int) -> OfflinePageGroups:
        h_gpu, h_count, h_flags, _ = _S_GL_PAGE_GROUPS.unpack_from(data)
        end = len(data)
        off = _S_GL_PAGE_GROUPS.size
        names: dict[bytes, str] = {}
        _s_gl_page_group_size = _S_GL_PAGE_GROUP.size
        _s_gl_page_group_unpack = _S_GL_PAGE_GROUP.unpack_from
        _s_gl_group_span_size = _S_GL_GROUP_SPAN.size
        _s_gl_group_span_unpack = _S_GL_GROUP_SPAN.unpack_from
        l0_groups: list[PageGroup] = []
        for _ in range(h_count):
            if off + _s_gl_page_group_size > end:
                raise ProtocolError(f"OFFLINE_PAGE_GROUPS: {h_count} groups overrun {end} bytes")
            r1_page_bytes, r1_npages, r1_nspans, r1_gflags, _ = _s_gl_page_group_unpack(data, off)
            off += _s_gl_page_group_size
            if r1_gflags & PAGE_GROUP_QUARANTINED and r1_nspans:
                raise ProtocolError("OFFLINE_PAGE_GROUPS: spans in a quarantined record")
            if off + 8 * r1_npages > end:
                raise ProtocolError(f"OFFLINE_PAGE_GROUPS: {r1_npages} pages overrun {end} bytes")
            t1_pages: tuple[int, ...] = array("Q", r1_npages).unpack_from(data, off)
            off += 8 * r1_npages
            l1_spans: list[GroupSpan] = []
            for _ in range(r1_nspans):
                if off + _s_gl_group_span_size > end:
                    raise ProtocolError(
                        f"OFFLINE_PAGE_GROUPS: {r1_nspans} spans overrun {end} bytes"
                    )
                r2_request_id, r2_tokens, r2_nblocks = _s_gl_group_span_unpack(data, off)
                off += _s_gl_group_span_size
                s_r2_request_id = names.get(r2_request_id)
                if s_r2_request_id is None:
                    s_r2_request_id = names[r2_request_id] = unpad(r2_request_id)
                if off + 4 * r2_nblocks > end:
                    raise ProtocolError(
                        f"OFFLINE_PAGE_GROUPS: {r2_nblocks} block ids overrun {end} bytes"
                    )
                t2_block_ids: tuple[int, ...] = array("I", r2_nblocks).unpack_from(data, off)
                off += 4 * r2_nblocks
                l1_spans.append(GroupSpan(s_r2_request_id, r2_tokens, t2_block_ids))
            l0_groups.append(
                PageGroup(
                    r1_page_bytes,
                    t1_pages,
                    tuple(l1_spans),
                    bool(r1_gflags & PAGE_GROUP_QUARANTINED),
                )
            )
        if off != end:
            raise ProtocolError(f"OFFLINE_PAGE_GROUPS: {h_count} groups do not fill {end} bytes")
        return cls(gpu=h_gpu, groups=tuple(l0_groups), reset=bool(h_flags & OFFLINE_HANDLES_RESET))


# --- Tables -----------------------------------------------------------------------------

MESSAGE_CLASSES: Final[dict[MsgType, type[Message]]] = {
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
"""The class of each message type."""
VARIABLE_TYPES: Final[frozenset[MsgType]] = frozenset(
    {
        MsgType.MEM_HANDLES,
        MsgType.INVALIDATE_BLOCKS,
        MsgType.OFFLINE_HANDLES,
        MsgType.RECLAIM,
        MsgType.RESTORE,
        MsgType.OFFLINE_PAGE_GROUPS,
    }
)
"""Types whose payload is a fixed head and counted entries."""
STRUCT_SIZES: Final[dict[str, int]] = {
    "gl_header": _S_GL_HEADER.size,
    "gl_hello": _S_GL_HELLO.size,
    "gl_hello_ack": _S_GL_HELLO_ACK.size,
    "gl_channel": _S_GL_CHANNEL.size,
    "gl_online_edge": _S_GL_ONLINE_EDGE.size,
    "gl_decode_gap": _S_GL_DECODE_GAP.size,
    "gl_gate": _S_GL_GATE.size,
    "gl_gate_ack": _S_GL_GATE_ACK.size,
    "gl_fd_request": _S_GL_FD_REQUEST.size,
    "gl_fd_pass": _S_GL_FD_PASS.size,
    "gl_status": _S_GL_STATUS.size,
    "gl_mem_handles": _S_GL_MEM_HANDLES.size,
    "gl_mem_handle": _S_GL_MEM_HANDLE.size,
    "gl_invalidate_blocks": _S_GL_INVALIDATE_BLOCKS.size,
    "gl_heartbeat": _S_GL_HEARTBEAT.size,
    "gl_online_memory": _S_GL_ONLINE_MEMORY.size,
    "gl_offline_handles": _S_GL_OFFLINE_HANDLES.size,
    "gl_handle_span": _S_GL_HANDLE_SPAN.size,
    "gl_page_groups": _S_GL_PAGE_GROUPS.size,
    "gl_page_group": _S_GL_PAGE_GROUP.size,
    "gl_group_span": _S_GL_GROUP_SPAN.size,
    "gl_reclaim": _S_GL_RECLAIM.size,
    "gl_reclaim_ack": _S_GL_RECLAIM_ACK.size,
    "gl_restore": _S_GL_RECLAIM.size,
    "gl_restore_ack": _S_GL_RECLAIM_ACK.size,
}
"""Every struct's size as this codec packs it, by C name."""


def c_constants() -> dict[str, int]:
    """Every ``#define GL_*`` number of gleaner_proto.h, by its C name."""
    return {
        "GL_PROTO_MAGIC": MAGIC,
        "GL_PROTO_VERSION": VERSION,
        "GL_HEADER_SIZE": HEADER_SIZE,
        "GL_MAX_PAYLOAD": MAX_PAYLOAD,
        "GL_FLAG_HAS_FD": FLAG_HAS_FD,
        "GL_MSG_HELLO": int(MsgType.HELLO),
        "GL_MSG_HELLO_ACK": int(MsgType.HELLO_ACK),
        "GL_MSG_CHANNEL_ADD": int(MsgType.CHANNEL_ADD),
        "GL_MSG_CHANNEL_FREE": int(MsgType.CHANNEL_FREE),
        "GL_MSG_ONLINE_BUSY": int(MsgType.ONLINE_BUSY),
        "GL_MSG_ONLINE_IDLE": int(MsgType.ONLINE_IDLE),
        "GL_MSG_DECODE_GAP": int(MsgType.DECODE_GAP),
        "GL_MSG_GATE": int(MsgType.GATE),
        "GL_MSG_GATE_ACK": int(MsgType.GATE_ACK),
        "GL_MSG_FD_REQUEST": int(MsgType.FD_REQUEST),
        "GL_MSG_FD_PASS": int(MsgType.FD_PASS),
        "GL_MSG_STATUS": int(MsgType.STATUS),
        "GL_MSG_MEM_HANDLES": int(MsgType.MEM_HANDLES),
        "GL_MSG_INVALIDATE_BLOCKS": int(MsgType.INVALIDATE_BLOCKS),
        "GL_MSG_HEARTBEAT": int(MsgType.HEARTBEAT),
        "GL_MSG_ONLINE_MEMORY": int(MsgType.ONLINE_MEMORY),
        "GL_MSG_OFFLINE_HANDLES": int(MsgType.OFFLINE_HANDLES),
        "GL_MSG_RECLAIM": int(MsgType.RECLAIM),
        "GL_MSG_RECLAIM_ACK": int(MsgType.RECLAIM_ACK),
        "GL_MSG_RESTORE": int(MsgType.RESTORE),
        "GL_MSG_RESTORE_ACK": int(MsgType.RESTORE_ACK),
        "GL_MSG_OFFLINE_PAGE_GROUPS": int(MsgType.OFFLINE_PAGE_GROUPS),
        "GL_MSG_MAX": MSG_MAX,
        "GL_OFFLINE_HANDLES_RESET": OFFLINE_HANDLES_RESET,
        "GL_PAGE_GROUP_QUARANTINED": PAGE_GROUP_QUARANTINED,
        "GL_ROLE_OFFLINE": int(Role.OFFLINE),
        "GL_ROLE_ONLINE": int(Role.ONLINE),
        "GL_ROLE_FRAMEWORK": int(Role.FRAMEWORK),
        "GL_CAP_GATE_THREAD": CAP_GATE_THREAD,
        "GL_CAP_FD_PASS": CAP_FD_PASS,
        "GL_CAP_LAUNCH_HOOK": CAP_LAUNCH_HOOK,
        "GL_CAP_BUSY_TRACK": CAP_BUSY_TRACK,
        "GL_GATE_MODE_SHIM": int(GateMode.SHIM),
        "GL_GATE_MODE_AGENT": int(GateMode.AGENT),
        "GL_KIND_TSG": int(Kind.TSG),
        "GL_KIND_CHANNEL": int(Kind.CHANNEL),
        "GL_FD_NVIDIACTL": int(FdKind.NVIDIACTL),
        "GL_STATUS_OK": int(StatusCode.OK),
        "GL_STATUS_GATED_BY_AGENT": int(StatusCode.GATED_BY_AGENT),
        "GL_STATUS_NO_AGENT": int(StatusCode.NO_AGENT),
        "GL_STATUS_NO_HANDLES": int(StatusCode.NO_HANDLES),
        "GL_STATUS_CONTROL_REFUSED": int(StatusCode.CONTROL_REFUSED),
        "GL_STATUS_PROTOCOL_ERROR": int(StatusCode.PROTOCOL_ERROR),
        "GL_MEM_ADDED": MEM_ADDED,
        "GL_MEM_FREED": MEM_FREED,
        "GL_GPU_UNKNOWN": GPU_UNKNOWN,
        "GL_GPU_ALL": GPU_ALL,
        "GL_MAX_GPUS": MAX_GPUS,
        "GL_UUID_LEN": UUID_LEN,
        "GL_JOB_LEN": JOB_LEN,
        "GL_REASON_LEN": REASON_LEN,
        "GL_REQUEST_ID_LEN": REQUEST_ID_LEN,
    }
