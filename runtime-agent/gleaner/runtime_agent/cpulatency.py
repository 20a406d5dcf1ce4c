"""A CPU wakeup-latency request: keeps the node's idle CPUs out of deep sleep states.

Why: the gate's close is one futex wake away from the online shim's busy edge (docs/shim.md,
"The native gate path"), and what is left of its tail when the node is quiet is the wakeup
of a sleeping CPU: tens to hundreds of microseconds from a deep C-state on bare metal, or
from a halted vCPU on a virtual machine (docs/agent.md, "CPU wakeup latency"). Linux's
PM QoS interface lets a process bound that: while a process holds ``/dev/cpu_dma_latency``
open with a value of N microseconds written to it, the cpuidle governor chooses no idle
state whose exit latency exceeds N on any CPU (0: the CPUs poll instead of sleeping). The
request ends when the file is closed, by this class or by the process's exit, so a crashed
holder leaves nothing behind.

Contract:

- ``encode_request(us)`` (pure) is the 4-byte native-endian integer the kernel expects;
  ValueError outside ``0 ≤ us ≤ MAX_REQUEST_US``.
- ``CpuLatencyRequest.hold(us, device)`` opens the device, writes the request and keeps the
  file open; ``close()`` (or leaving the ``with`` block) ends it. A device that is missing,
  not writable (not root, or a container without the device) or refuses the value raises
  :class:`CpuLatencyError` with a message that says which and what to do.
- ``effective_latency_us(device)`` reads the bound in force now (the smallest of all
  requests; ``MAX_REQUEST_US`` when there is none). Reading needs the same permission.
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path
from types import TracebackType
from typing import Final

__all__ = [
    "DEVICE",
    "MAX_REQUEST_US",
    "CpuLatencyError",
    "CpuLatencyRequest",
    "effective_latency_us",
    "encode_request",
]

DEVICE: Final = Path("/dev/cpu_dma_latency")
"""Linux's system-wide PM QoS device for CPU wakeup latency."""
MAX_REQUEST_US: Final = 2_000_000_000
"""The kernel's default (no bound); the largest value it accepts."""
_FORMAT: Final = "=i"


class CpuLatencyError(RuntimeError):
    """The request could not be made; the message says why and what to do."""


def encode_request(us: int) -> bytes:
    """The bytes to write to the device for a bound of ``us`` microseconds."""
    if isinstance(us, bool) or not isinstance(us, int):
        raise ValueError(f"a CPU wakeup latency is a whole number of microseconds, got {us!r}")
    if not 0 <= us <= MAX_REQUEST_US:
        raise ValueError(
            f"a CPU wakeup latency must be between 0 and {MAX_REQUEST_US} µs, got {us}"
        )
    return struct.pack(_FORMAT, us)


def _explain(exc: OSError, device: Path, action: str) -> CpuLatencyError:
    if exc.errno == errno.ENOENT:
        why = (
            f"{device} does not exist (a kernel without PM QoS, or a container without the device)"
        )
    elif exc.errno in (errno.EACCES, errno.EPERM):
        why = (
            f"no permission to {action} {device}: it needs root, and in a container the "
            "device mounted and allowed (a privileged container)"
        )
    else:
        why = f"cannot {action} {device}: {exc.strerror or exc}"
    return CpuLatencyError(why)


def effective_latency_us(device: Path = DEVICE) -> int:
    """The CPU wakeup latency bound in force now, in microseconds."""
    try:
        with device.open("rb") as f:
            raw = f.read(struct.calcsize(_FORMAT))
    except OSError as exc:
        raise _explain(exc, device, "read") from None
    if len(raw) != struct.calcsize(_FORMAT):
        raise CpuLatencyError(f"{device} returned {len(raw)} bytes, not a PM QoS value")
    value: int = struct.unpack(_FORMAT, raw)[0]
    return value


class CpuLatencyRequest:
    """One held request; the bound lasts until :meth:`close` (or the process exits)."""

    def __init__(self, fd: int, us: int, device: Path) -> None:
        self._fd: int | None = fd
        self.us = us
        self.device = device

    @classmethod
    def hold(cls, us: int, device: Path = DEVICE) -> CpuLatencyRequest:
        data = encode_request(us)
        try:
            fd = os.open(device, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise _explain(exc, device, "open") from None
        try:
            written = os.write(fd, data)
        except OSError as exc:
            os.close(fd)
            raise _explain(exc, device, "write") from None
        if written != len(data):
            os.close(fd)
            raise CpuLatencyError(f"{device} took {written} of {len(data)} bytes of the request")
        return cls(fd, us, device)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def close(self) -> None:
        """End the request (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> CpuLatencyRequest:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
