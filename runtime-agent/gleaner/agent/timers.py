"""Event-loop timers that never fire early, to the microsecond where Linux allows (I/O shell).

Contract. A :class:`Timer` calls its callback once, from the loop, at or after the absolute
deadline given to :meth:`Timer.arm` (re-arming moves it; ``disarm`` cancels it; ``deadline``
is what it is armed for, None once it fired). :func:`create` makes one:

- :class:`DeadlineTimer` for ``time.monotonic()`` deadlines on Linux: a timerfd
  (CLOCK_MONOTONIC, the clock of ``time.monotonic``) watched by the loop, so the kernel wakes
  the loop at the deadline and the callback is late only by the wakeup itself;
- :class:`LoopTimer` otherwise (another clock, no timerfd): ``loop.call_at`` plus
  :func:`timer_slack`, so that it is never early either (up to about 2 ms late).

Why not ``loop.call_at``: both event loops wait in whole milliseconds. asyncio rounds a wait
up (a timer is up to 1 ms late); uvloop counts whole milliseconds and rounds a delay to the
nearest one, so a timer fires up to 0.5 ms early and one due in under 0.5 ms runs at once:
a gate timer that fires early finds nothing due and re-arms, several times per cooldown
(measured: 5.5 wakeups for a 0.5 ms timer). The gate's cooldown is 2 ms by default and
shorter in the benchmark, so both the early fires and a millisecond of lateness matter.

Python 3.13 has ``os.timerfd_create``; 3.11 reaches libc through ctypes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import math
import os
import sys
from collections.abc import Callable
from typing import Final, Protocol

CLOCK_MONOTONIC: Final = 1
TFD_TIMER_ABSTIME: Final = 1
TFD_NONBLOCK: Final = os.O_NONBLOCK
TFD_CLOEXEC: Final = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class _Libc:
    """timerfd_create / timerfd_settime from libc."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.create = libc.timerfd_create
        self.create.argtypes = [ctypes.c_int, ctypes.c_int]
        self.create.restype = ctypes.c_int
        self.settime = libc.timerfd_settime
        self.settime.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.POINTER(_Itimerspec),
        ]
        self.settime.restype = ctypes.c_int


_libc: _Libc | None = None


def _load() -> _Libc | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            _libc = _Libc()
    return _libc


class Timer(Protocol):
    """See the module docstring."""

    deadline: float | None

    def arm(self, deadline: float) -> None: ...

    def disarm(self) -> None: ...

    def close(self) -> None: ...


def timer_slack(loop: asyncio.AbstractEventLoop) -> float:
    """Seconds to add to a deadline so that ``loop.call_at`` never runs the callback before it.

    asyncio's loop rounds its waits up: none needed. uvloop rounds a delay to the nearest
    millisecond of a clock truncated to the millisecond: half a millisecond more makes the
    rounded delay reach the deadline.
    """
    return 0.0 if isinstance(loop, asyncio.BaseEventLoop) else 0.0005


class LoopTimer:
    """A :class:`Timer` on ``loop.call_at`` (any clock the loop's ``time()`` follows)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._callback = callback
        self._slack = timer_slack(loop)
        self._handle: asyncio.Handle | None = None
        self.deadline: float | None = None

    def arm(self, deadline: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(deadline + self._slack, self._fired)
        self.deadline = deadline

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.deadline = None

    def close(self) -> None:
        self.disarm()

    def _fired(self) -> None:
        self._handle = None
        self.deadline = None
        self._callback()


class DeadlineTimer:
    """A :class:`Timer` on a timerfd (``time.monotonic()`` deadlines, Linux)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, libc: _Libc, fd: int, callback: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._libc = libc
        self._fd = fd
        self._callback = callback
        self._spec = _Itimerspec()
        self._ref = ctypes.byref(self._spec)
        self.deadline: float | None = None
        """The deadline armed for (None: disarmed)."""
        loop.add_reader(fd, self._fired)

    def arm(self, deadline: float) -> None:
        """Run the callback at ``deadline`` (``time.monotonic()`` seconds), not before."""
        frac, whole = math.modf(max(deadline, 1e-9))
        value = self._spec.it_value
        value.tv_sec = int(whole)
        value.tv_nsec = min(999_999_999, int(frac * 1e9) + 1)  # round up: never early
        if self._libc.settime(self._fd, TFD_TIMER_ABSTIME, self._ref, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.deadline = deadline

    def disarm(self) -> None:
        value = self._spec.it_value
        value.tv_sec = value.tv_nsec = 0
        self._libc.settime(self._fd, 0, self._ref, None)
        self.deadline = None

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
            self.deadline = None

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)  # the expiration count; reading it clears readiness
        except (BlockingIOError, InterruptedError):
            return  # re-armed (or disarmed) after it expired: nothing due
        self.deadline = None
        self._callback()


def create(
    loop: asyncio.AbstractEventLoop, callback: Callable[[], None], *, monotonic: bool = True
) -> Timer:
    """A disarmed timer on ``loop``: a :class:`DeadlineTimer` when the deadlines are
    ``time.monotonic()`` times (``monotonic``) and Linux has timerfd, else a :class:`LoopTimer`
    (whose deadlines are in the loop's ``time()``)."""
    libc = _load() if monotonic else None
    if libc is None:
        return LoopTimer(loop, callback)
    fd = libc.create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
    if fd < 0:
        return LoopTimer(loop, callback)
    try:
        return DeadlineTimer(loop, libc, fd, callback)
    except Exception:
        os.close(fd)
        raise
