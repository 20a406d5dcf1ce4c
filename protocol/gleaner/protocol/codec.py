"""What every generated message class stands on: the frame header, the base class and the
field helpers (pure, standard library only).

Contract. :mod:`gleaner.protocol.messages` (generated from the protocol table by
:mod:`gleaner.protocol.pygen`) builds every message and record class on :class:`Message` and
these helpers; :mod:`gleaner.protocol.wire` adds framing and the socket helpers. Nothing
here knows a particular message.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, TypeVar

from gleaner.protocol import spec

_C = spec.constants()

MAGIC = _C["GL_PROTO_MAGIC"]  # b"GLNR" little-endian
VERSION = _C["GL_PROTO_VERSION"]
HEADER_SIZE = _C["GL_HEADER_SIZE"]
MAX_PAYLOAD = _C["GL_MAX_PAYLOAD"]

HEADER = struct.Struct(spec.fmt("gl_header"))
"""magic, version, type, flags, payload length, seq."""

_E = TypeVar("_E", bound=IntEnum)


class ProtocolError(ValueError):
    """A frame that cannot be decoded; the connection should be dropped."""


def pad(text: str, size: int) -> bytes:
    """``text`` as a NUL-padded field of ``size`` bytes (at most ``size - 1`` of UTF-8)."""
    raw = text.encode()
    if len(raw) >= size:
        raise ProtocolError(f"string of {len(raw)} bytes does not fit a {size}-byte field")
    return raw.ljust(size, b"\0")


def pad_array(texts: tuple[str, ...], size: int, n: int) -> bytes:
    """``texts`` as ``n`` NUL-padded fields of ``size`` bytes (unused fields all NUL)."""
    return b"".join(pad(t, size) for t in texts).ljust(n * size, b"\0")


def unpad_array(raw: bytes, size: int, count: int) -> tuple[str, ...]:
    """The first ``count`` texts of an array of ``size``-byte fields, empty ones left out."""
    texts = (unpad(raw[i * size : (i + 1) * size]) for i in range(count))
    return tuple(t for t in texts if t)


def truncate(text: str, size: int) -> str:
    """``text`` cut to what a ``size``-byte field holds (whole characters only)."""
    return text.encode()[: size - 1].decode(errors="ignore")


def unpad(raw: bytes) -> str:
    """A NUL-padded field's text."""
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def enum_value(enum: type[_E], value: int) -> _E:
    """``enum(value)``, or :class:`ProtocolError` for a value the enum does not have."""
    try:
        return enum(value)
    except ValueError:
        raise ProtocolError(f"{enum.__name__}: unknown value {value}") from None


_ARRAYS: dict[tuple[str, int], struct.Struct] = {}


def array(code: str, n: int) -> struct.Struct:
    """A precompiled ``<nQ`` / ``<nI`` struct (cached: at most a frame's worth per code)."""
    s = _ARRAYS.get((code, n))
    if s is None:
        s = _ARRAYS[(code, n)] = struct.Struct(f"<{n}{code}")
    return s


@dataclass(frozen=True)
class Message:
    """Base of every message: ``seq`` is the sender's frame counter (header.seq)."""

    TYPE: ClassVar[IntEnum]
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
        return HEADER.pack(MAGIC, VERSION, int(self.TYPE), self.flags, len(body), seq) + body
