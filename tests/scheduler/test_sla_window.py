"""SLA windows: samples grouped into the job's spec.slaWindow, judged and counted once each."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from gleaner.scheduler.lifecycle import sla_tick
from gleaner.scheduler.monitor import (
    SLAHistory,
    SLAMonitorConfig,
    aggregates,
    decide_sla,
    samples_needed,
    sla_windows,
)

CFG = SLAMonitorConfig(
    window_seconds=60,
    history_windows=3,
    violation_windows=2,
    grace_seconds=120,
    tolerance=0.0,
)


def _history(sla_window: float | None, keep: int | None = None) -> SLAHistory:
    return SLAHistory(
        job="ns/j",
        sla=0.5,
        node="n",
        gpus=(0,),
        placed_at=0.0,
        max_windows=keep or samples_needed(sla_window, CFG),
        sla_window_seconds=sla_window,
    )


def _feed(history: SLAHistory, fractions: list[float]) -> tuple[SLAHistory, list[bool]]:
    """Ticks once a sample period (60 s) from t = 60; all verdicts the ticks judged."""
    verdicts: list[bool] = []
    for i, f in enumerate(fractions, start=1):
        tick = sla_tick(history, (60.0 * i, f), 60.0 * i, CFG)
        history = tick.history
        verdicts.extend(tick.judged)
        assert tick.met == (tick.judged[-1] if tick.judged else None)
    return history, verdicts


def test_a_short_dip_inside_a_window_that_met_is_not_a_miss() -> None:
    # Grace ends at 120 s; windows of 300 s: (120, 420], (420, 720].
    grace, dipped, steady = [0.0, 0.0], [0.7, 0.7, 0.1, 0.7, 0.7], [0.6] * 5
    samples = [*grace, *dipped, *steady]
    history, verdicts = _feed(_history(300.0), samples)
    windows = sla_windows(history, CFG)
    assert [w.end for w in windows] == [420.0, 720.0]
    assert abs(windows[0].throughput_fraction - 0.58) < 1e-9
    assert verdicts == [True, True]
    # The same samples judged one by one (no SLA window): the dip is a miss, and the
    # two grace samples are judged too (as before SLA windows existed).
    _, per_sample = _feed(_history(None), samples)
    assert per_sample.count(False) == 3
    assert len(per_sample) == len(samples)


def test_a_window_is_judged_once_when_it_closes() -> None:
    history = _history(300.0)
    ends: list[int] = []
    for i in range(1, 13):
        tick = sla_tick(history, (60.0 * i, 0.6), 60.0 * i, CFG)
        history = tick.history
        if tick.judged:
            ends.append(i)
    assert ends == [7, 12]  # at 420 s and 720 s
    # Seeing the last sample again judges nothing.
    again = sla_tick(history, (720.0, 0.6), 720.0, CFG)
    assert again.judged == () and again.met is None and not again.recorded


def test_a_gap_closes_the_window_it_left_short() -> None:
    history = _history(300.0)
    history = sla_tick(history, (180.0, 0.2), 180.0, CFG).history
    tick = sla_tick(history, (500.0, 0.9), 500.0, CFG)  # the next window has begun
    assert tick.judged == (False,)
    assert [w.end for w in sla_windows(tick.history, CFG)] == [420.0]


def test_eviction_counts_sla_windows_not_samples() -> None:
    # Every sample after grace misses, but k = 2 SLA windows of 5 samples take 600 s.
    history, verdicts = _feed(_history(300.0), [0.1] * 2 + [0.1] * 9)
    assert verdicts == [False]
    assert not decide_sla(history, 660.0, CFG).evict
    history, verdicts = _feed(_history(300.0), [0.1] * 2 + [0.1] * 10)
    assert verdicts == [False, False]
    decision = decide_sla(history, 720.0, CFG)
    assert decision.evict and decision.considered == 2 and decision.missed == 2


def test_without_a_longer_window_every_sample_after_grace_is_a_window() -> None:
    for width in (None, 30.0, 60.0):
        history, _ = _feed(_history(width), [0.3, 0.4, 0.5, 0.6])
        assert not aggregates(history, CFG)
        assert sla_windows(history, CFG) == history.after_grace(CFG.grace_seconds)


def test_the_history_keeps_enough_samples_for_n_windows() -> None:
    assert samples_needed(None, CFG) == CFG.history_windows + 2
    assert samples_needed(300.0, CFG) == (CFG.history_windows + 1) * 5 + 1
    history, _ = _feed(_history(300.0), [0.6] * 40)
    assert len(sla_windows(history, CFG)) >= CFG.history_windows


@given(
    st.lists(st.floats(min_value=0.0, max_value=1.0, allow_nan=False), min_size=1, max_size=40),
    st.sampled_from([120.0, 300.0, 600.0]),
)
@example([0.5] * 7, 300.0)
def test_each_window_is_the_mean_of_its_samples_and_counted_once(
    fractions: list[float], width: float
) -> None:
    history, verdicts = _feed(_history(width, keep=len(fractions)), fractions)
    windows = sla_windows(history, CFG)
    assert len(verdicts) == len(windows)
    start = CFG.grace_seconds
    for w in windows:
        members = [s.throughput_fraction for s in history.windows if w.end - width < s.end <= w.end]
        assert members and abs(w.throughput_fraction - sum(members) / len(members)) < 1e-12
        assert (w.end - start) % width == 0
    assert verdicts == [w.throughput_fraction >= history.sla for w in windows]
