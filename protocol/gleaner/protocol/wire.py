"""The agent ⇄ shim wire protocol (version 1): a pure codec.

Contract:
- Every message is one frame: a 16-byte little-endian header (magic ``GLNR``, version,
  type, flags, payload length, sequence number) followed by a fixed-layout little-endian
  payload. The protocol is declared once, in the protocol table (:mod:`gleaner.protocol.spec`):
  the C header ``runtime-agent/shim/include/gleaner_proto.h`` (:mod:`gleaner.protocol.cheader`)
  and every message class, record, enum and constant here (:mod:`gleaner.protocol.messages`,
  by :mod:`gleaner.protocol.pygen`) are generated from it; this module re-exports them and
  adds the framing. Adding a message is one edit to the table, then ``make proto``.
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
from dataclasses import dataclass

from gleaner.protocol.codec import HEADER as _HEADER
from gleaner.protocol.codec import Message as Message
from gleaner.protocol.codec import ProtocolError as ProtocolError
from gleaner.protocol.codec import enum_value as _enum
from gleaner.protocol.messages import *  # noqa: F403  (the generated classes, re-exported)
from gleaner.protocol.messages import (
    HEADER_SIZE,
    MAGIC,
    MAX_PAYLOAD,
    MESSAGE_CLASSES,
    VARIABLE_TYPES,
    VERSION,
    FdPass,
    MsgType,
)


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
