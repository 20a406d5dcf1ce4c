"""Event-loop timers of the agent: never before their deadline, once, and movable."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable

import pytest

from gleaner.runtime_agent import timers
from gleaner.runtime_agent.daemon import event_loop_factory

LOOPS = ["asyncio", "uvloop"]


def _armed(timer: timers.Timer) -> float | None:
    return timer.deadline


def _run(loop_name: str, body: Callable[[asyncio.AbstractEventLoop], object]) -> None:
    try:
        factory = event_loop_factory(loop_name)
    except Exception as exc:  # uvloop not installed
        pytest.skip(str(exc))
    loop = factory()
    try:
        loop.run_until_complete(body(loop))  # type: ignore[arg-type]
    finally:
        loop.close()


async def _fire_times(
    loop: asyncio.AbstractEventLoop, timer_kind: str, delays: list[float]
) -> list[tuple[float, float]]:
    """(deadline, time the callback ran) for timers armed ``delays`` from now, one at a time."""
    out: list[tuple[float, float]] = []
    for delay in delays:
        fired: asyncio.Future[float] = loop.create_future()

        def cb(fut: asyncio.Future[float] = fired) -> None:
            fut.set_result(time.monotonic())

        timer: timers.Timer = (
            timers.create(loop, cb) if timer_kind == "timerfd" else timers.LoopTimer(loop, cb)
        )
        deadline = time.monotonic() + delay
        timer.arm(deadline)
        assert _armed(timer) == deadline
        at = await asyncio.wait_for(fired, 10)
        assert _armed(timer) is None  # fired: disarmed
        out.append((deadline, at))
        timer.close()
    return out


@pytest.mark.parametrize("loop_name", LOOPS)
@pytest.mark.parametrize("timer_kind", ["timerfd", "loop"])
def test_timers_never_fire_before_their_deadline(loop_name: str, timer_kind: str) -> None:
    """Sub-millisecond deadlines included: uvloop's own timers fire up to 0.5 ms early."""
    if timer_kind == "timerfd" and not sys.platform.startswith("linux"):
        pytest.skip("timerfd is Linux only")
    delays = [0.0001 * (k % 9) + 0.00005 for k in range(60)]
    got: list[tuple[float, float]] = []

    async def body(loop: asyncio.AbstractEventLoop) -> None:
        got.extend(await _fire_times(loop, timer_kind, delays))

    _run(loop_name, body)
    early = [(d, at) for d, at in got if at < d]
    assert not early, f"{len(early)} of {len(got)} fired early, e.g. {early[0]}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux only")
@pytest.mark.parametrize("loop_name", LOOPS)
def test_timerfd_timer_fires_once_and_can_be_moved_and_cancelled(loop_name: str) -> None:
    calls: list[float] = []

    async def body(loop: asyncio.AbstractEventLoop) -> None:
        fired = asyncio.Event()

        def cb() -> None:
            calls.append(time.monotonic())
            fired.set()

        timer = timers.create(loop, cb)
        assert isinstance(timer, timers.DeadlineTimer)
        # Moved later before it fires: it fires once, at the later deadline.
        first = time.monotonic() + 0.02
        timer.arm(first)
        later = first + 0.03
        timer.arm(later)
        await asyncio.wait_for(fired.wait(), 5)
        await asyncio.sleep(0.05)  # a second firing would show up here
        assert len(calls) == 1 and calls[0] >= later
        # Cancelled: never fires.
        fired.clear()
        timer.arm(time.monotonic() + 0.01)
        timer.disarm()
        assert _armed(timer) is None
        await asyncio.sleep(0.05)
        assert len(calls) == 1
        # A deadline already past fires at once (on the next loop iteration).
        timer.arm(time.monotonic() - 1.0)
        await asyncio.wait_for(fired.wait(), 5)
        assert len(calls) == 2
        timer.close()

    _run(loop_name, body)


def test_a_clock_other_than_monotonic_gets_loop_timers() -> None:
    loop = asyncio.new_event_loop()
    try:
        timer = timers.create(loop, lambda: None, monotonic=False)
        assert isinstance(timer, timers.LoopTimer)
        timer.close()
    finally:
        loop.close()
