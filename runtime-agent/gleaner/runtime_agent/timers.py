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
import os
import struct
import sys
from collections.abc import Callable
from typing import Any, Final, Protocol

CLOCK_MONOTONIC: Final = 1
TFD_TIMER_ABSTIME: Final = 1
TFD_NONBLOCK: Final = os.O_NONBLOCK
TFD_CLOEXEC: Final = os.O_CLOEXEC


ITIMERSPEC: Final = struct.Struct("@4q")
"""struct itimerspec: it_interval (tv_sec, tv_nsec), then it_value (tv_sec, tv_nsec)."""


class _Libc:
    """timerfd_create / timerfd_settime from libc.

    ``settime`` is called without ctypes argument types: its arguments are ints and a
    ``create_string_buffer`` holding the packed ``itimerspec`` (the cheapest ctypes call:
    the timer is armed once per online idle edge).
    """

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.create: Callable[[int, int], int] = libc.timerfd_create
        self.settime: Callable[[int, int, Any, None], int] = libc.timerfd_settime


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
        self._settime = libc.settime
        self._buf = ctypes.create_string_buffer(ITIMERSPEC.size)
        self._pack = ITIMERSPEC.pack_into
        self.deadline: float | None = None
        """The deadline armed for (None: disarmed)."""
        loop.add_reader(fd, self._fired)

    def arm(self, deadline: float) -> None:
        """Run the callback at ``deadline`` (``time.monotonic()`` seconds), not before."""
        ns = int(deadline * 1e9) + 1  # rounded up: never early
        sec, nsec = divmod(ns if ns > 0 else 1, 1_000_000_000)
        self._pack(self._buf, 0, 0, 0, sec, nsec)
        if self._settime(self._fd, TFD_TIMER_ABSTIME, self._buf, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.deadline = deadline

    def disarm(self) -> None:
        self._pack(self._buf, 0, 0, 0, 0, 0)
        self._settime(self._fd, 0, self._buf, None)
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
