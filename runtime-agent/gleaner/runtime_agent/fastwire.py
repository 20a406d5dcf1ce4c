"""The reaction path's codec: the frames that come and go at the online transition rate (pure).

Contract. ONLINE_BUSY, ONLINE_IDLE and GATE_ACK arrive, and GATE leaves, about once per online
transition, so the agent handles them without building message objects: one precompiled
``struct`` each (its format from the protocol table, :mod:`gleaner.protocol.spec`), unpacked
in place from the received bytes or packed straight into a frame (:func:`encode_gate`). The
bytes are exactly those of :mod:`gleaner.protocol.wire` (tests
compare both codecs). The server (``ShimServer._consume``) takes only frames it can check
completely this way: magic, version, one of these types, the exact payload size of
:data:`FAST_SIZES`, all of it received. Any other frame goes to
:func:`gleaner.protocol.wire.decode`, which decodes every message and raises
:class:`~gleaner.protocol.wire.ProtocolError` on malformed input.
"""

from __future__ import annotations

import struct
from typing import Final

from gleaner.protocol import spec
from gleaner.protocol.wire import (
    GPU_ALL,
    HEADER_SIZE,
    MAGIC,
    VERSION,
    Gate,
    GateAck,
    MsgType,
    OnlineEdge,
)

HEADER: Final = struct.Struct(spec.fmt("gl_header"))
"""magic, version, type, flags, payload length, seq."""
EDGE: Final = struct.Struct(spec.fmt("gl_online_edge"))
"""ONLINE_BUSY / ONLINE_IDLE payload: gpu, mono_ns, request_id."""
GATE_ACK_HEAD: Final = struct.Struct(spec.fmt("gl_gate_ack", upto="ok"))
"""The first fields of a GATE_ACK payload: gate_seq, latency_ns, gpu, enabled, ok."""
GATE_FRAME: Final = struct.Struct(spec.fmt("gl_header") + spec.fmt("gl_gate")[1:])
"""A whole GATE frame: header, then gate_seq, gpu, enable."""

T_BUSY: Final = int(MsgType.ONLINE_BUSY)
T_IDLE: Final = int(MsgType.ONLINE_IDLE)
T_GATE_ACK: Final = int(MsgType.GATE_ACK)
T_GATE: Final = int(MsgType.GATE)

FAST_SIZES: Final[dict[int, int]] = {
    T_BUSY: OnlineEdge.SIZE,
    T_IDLE: OnlineEdge.SIZE,
    T_GATE_ACK: GateAck.SIZE,
}
"""Payload size of every frame type taken in place (the exact size is checked)."""

assert EDGE.size == OnlineEdge.SIZE and HEADER.size == HEADER_SIZE
assert GATE_FRAME.size == HEADER_SIZE + Gate.SIZE and GATE_ACK_HEAD.size <= GateAck.SIZE


def encode_gate(seq: int, gate_seq: int, enable: bool, gpu: int = GPU_ALL) -> bytes:
    """``Gate(gate_seq, enable, gpu).encode(seq)``, in one pack."""
    return GATE_FRAME.pack(MAGIC, VERSION, T_GATE, 0, Gate.SIZE, seq, gate_seq, gpu, enable)
