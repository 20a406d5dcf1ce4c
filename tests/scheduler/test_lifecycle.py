"""The shared job lifecycle: phase machine, backoff gate, SLA tick, eviction (properties)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.api import Phase
from gleaner.scheduler.lifecycle import (
    BOUND_PHASES,
    QUEUED_PHASES,
    TRANSITIONS,
    TransitionError,
    advance,
    can_transition,
    evict,
    eviction_phase,
    has_window,
    may_attempt,
    move_phases,
    should_move,
    sla_tick,
)
from gleaner.scheduler.monitor import SLAHistory, SLAMonitorConfig, backoff_seconds

CFG = SLAMonitorConfig(
    window_seconds=60,
    history_windows=5,
    violation_windows=3,
    grace_seconds=300,
    tolerance=0.05,
    backoff_base_seconds=30,
    backoff_max_seconds=600,
)

phases = st.sampled_from(list(Phase))
fractions = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def _history(placed_at: float = 0.0, sla: float = 0.5) -> SLAHistory:
    return SLAHistory(job="ns/j", sla=sla, node="n1", gpus=(0,), placed_at=placed_at)


def test_every_phase_has_moves_and_terminals_stay() -> None:
    assert set(TRANSITIONS) == set(Phase)
    for phase in Phase:
        assert phase in TRANSITIONS[phase]  # idempotent reconcile
    for terminal in (Phase.SUCCEEDED, Phase.FAILED):
        assert TRANSITIONS[terminal] == {terminal}
    assert QUEUED_PHASES.isdisjoint(BOUND_PHASES)


@given(phases, phases)
def test_advance_agrees_with_the_table(old: Phase, new: Phase) -> None:
    if can_transition(old, new):
        assert advance(old, new) is new
    else:
        with pytest.raises(TransitionError, match=f"{old.value} cannot move to {new.value}"):
            advance(old, new)


def test_the_simulated_sequence_is_allowed() -> None:
    # Placed (Pending -> Scheduled -> Running), evicted and requeued, placed again, finished.
    phase = Phase.PENDING
    for nxt in (Phase.SCHEDULED, Phase.RUNNING, Phase.EVICTED, Phase.SCHEDULED, Phase.RUNNING):
        phase = advance(phase, nxt)
    assert advance(phase, Phase.SUCCEEDED) is Phase.SUCCEEDED
    with pytest.raises(TransitionError):
        advance(Phase.SUCCEEDED, Phase.RUNNING)
    with pytest.raises(TransitionError):
        advance(Phase.PENDING, Phase.RUNNING)  # never Running without a placement


@given(st.one_of(st.none(), st.floats(-1e6, 1e6)), st.floats(-1e6, 1e6))
def test_may_attempt_only_after_the_backoff(after: float | None, now: float) -> None:
    assert may_attempt(after, now) == (after is None or now >= after)


def test_may_attempt_at_the_instant_the_backoff_ends() -> None:
    assert may_attempt(100.0, 100.0)
    assert not may_attempt(100.0, 99.999)


@given(fractions, st.floats(min_value=0.05, max_value=1.0))
def test_tick_records_a_window_once_and_judges_it(fraction: float, sla: float) -> None:
    history = _history(sla=sla)
    first = sla_tick(history, (400.0, fraction), 400.0, CFG)
    assert first.recorded and len(first.history.windows) == 1
    assert first.met == (fraction >= sla * (1 - CFG.tolerance))
    again = sla_tick(first.history, (400.0 + 1e-4, fraction), 460.0, CFG)
    assert not again.recorded and again.met is None
    assert again.history == first.history


def test_tick_without_a_window_still_decides() -> None:
    tick = sla_tick(_history(), None, 100.0, CFG)
    assert not tick.recorded and tick.met is None
    assert tick.decision.in_grace and not tick.decision.evict


@settings(max_examples=60)
@given(st.lists(fractions, min_size=1, max_size=12), st.floats(0.1, 1.0))
def test_tick_evicts_exactly_on_k_missed_of_the_last_n_after_grace(
    observed: list[float], sla: float
) -> None:
    history = _history(sla=sla)
    verdicts: list[bool] = []
    for i, fraction in enumerate(observed):
        end = CFG.grace_seconds + 60.0 * (i + 1)
        tick = sla_tick(history, (end, fraction), end, CFG)
        history = tick.history
        assert tick.met is not None
        verdicts.append(tick.met)
        missed = sum(1 for ok in verdicts[-CFG.history_windows :] if not ok)
        assert tick.decision.evict == (missed >= CFG.violation_windows)
        if tick.decision.evict:
            break


def test_grace_windows_are_judged_but_never_evict() -> None:
    history = _history()
    for end in (60.0, 120.0, 180.0, 240.0, 300.0):
        tick = sla_tick(history, (end, 0.0), end, CFG)
        history = tick.history
        assert tick.met is False
        assert not tick.decision.evict


@given(
    st.sampled_from(sorted(BOUND_PHASES)),
    st.integers(0, 10),
    st.integers(0, 10),
    st.floats(0, 1e6),
)
def test_evict_requeues_with_backoff_or_gives_up(
    phase: Phase, previous: int, max_evictions: int, now: float
) -> None:
    out = evict(phase, "n2", previous, max_evictions, ["n1"], now, CFG)
    count = previous + 1
    assert out.plan.eviction_count == count
    assert out.plan.excluded_nodes == ("n1", "n2")
    if count >= max_evictions:
        assert out.phase is Phase.FAILED and out.plan.failed
        assert out.plan.next_attempt_after is None
    else:
        assert out.phase is Phase.EVICTED and out.phase in QUEUED_PHASES
        assert out.plan.next_attempt_after == pytest.approx(now + backoff_seconds(count, CFG))
        assert not may_attempt(out.plan.next_attempt_after, now - 1e-6)


@given(st.sampled_from(sorted(BOUND_PHASES)), st.integers(0, 10), st.floats(0, 1e6))
def test_a_move_requeues_at_once_without_barring_the_node(
    phase: Phase, previous: int, now: float
) -> None:
    out = evict(phase, "n2", previous, 3, ["n1"], now, CFG, move=True)
    assert out.plan.eviction_count == previous and not out.plan.failed
    assert out.phase is Phase.EVICTED and out.plan.next_attempt_after is None
    # The forecast keeps the job off n2 through its peak; n2 is not barred for good.
    assert out.plan.excluded_nodes == ("n1",)
    assert "does not count toward maxEvictions" in out.plan.message


def test_evict_refuses_a_job_that_is_not_bound() -> None:
    with pytest.raises(TransitionError):
        evict(Phase.SUCCEEDED, "n1", 0, 3, [], 0.0, CFG)
    assert eviction_phase(True) is Phase.FAILED and eviction_phase(False) is Phase.EVICTED


def test_has_window_tolerates_rounding_only() -> None:
    history = _history().observe(120.0, 0.4)
    assert has_window(history, 120.0 + 5e-4)
    assert not has_window(history, 121.0)


@given(
    st.floats(min_value=0, max_value=1e5),
    st.floats(min_value=0, max_value=1e5),
    st.booleans(),
    st.booleans(),
    st.floats(min_value=0, max_value=1e4),
)
def test_should_move_only_off_a_node_that_no_longer_admits_to_one_that_does(
    placed_at: float, waited: float, here: bool, elsewhere: bool, min_stay: float
) -> None:
    now = placed_at + waited
    expected = now - placed_at >= min_stay and not here and elsewhere
    assert should_move(placed_at, now, here, elsewhere, min_stay) is expected


def test_should_move_waits_the_minimum_stay() -> None:
    assert not should_move(0.0, 14399.0, False, True)
    assert should_move(0.0, 14400.0, False, True)
    with pytest.raises(ValueError):
        should_move(0.0, 10.0, False, True, min_stay_seconds=-1.0)


def test_a_move_passes_through_evicted_to_scheduled() -> None:
    assert move_phases(Phase.RUNNING) == (Phase.EVICTED, Phase.SCHEDULED)
    assert move_phases(Phase.SCHEDULED) == (Phase.EVICTED, Phase.SCHEDULED)
    with pytest.raises(TransitionError):
        move_phases(Phase.SUCCEEDED)
