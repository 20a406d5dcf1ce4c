"""gleaner.batch.deadline: the deadline → SLA rule, as properties.

The required fraction is remaining tokens over remaining standalone capacity; the SLA asked
for covers it (with headroom, within (0, 1]), rises as the deadline nears, and the verdict
says the deadline cannot be met exactly when even monopolized GPUs would be too slow.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gleaner.batch.deadline import (
    MAX_SLA,
    MIN_SLA,
    DeadlineOutlook,
    deadline_outlook,
    deadline_sla,
    estimate_remaining_tokens,
    raise_only,
    required_fraction,
)

tokens = st.floats(min_value=0, max_value=1e10, allow_nan=False)
seconds = st.floats(min_value=0, max_value=1e7, allow_nan=False)
rates = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False)
floors = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def test_worked_example() -> None:
    # 3.6M tokens in two hours at 1000 tok/s standalone: half of the GPU's time.
    v = deadline_sla(3_600_000, 7200, 1000, floor=0.1)
    assert v.required_fraction == pytest.approx(0.5)
    assert v.feasible
    assert v.sla == pytest.approx(0.6)  # 0.5 x 1.2 headroom, on the 0.05 grid
    late = deadline_sla(3_600_000, 3000, 1000)
    assert not late.feasible
    assert late.sla == MAX_SLA
    assert "cannot be met" in late.message
    assert "passed" in deadline_sla(1, 0, 1000).message


@given(tokens, seconds, rates, floors)
@example(1.0, 0.0, 1.0, 0.5)
@example(0.0, 0.0, 1.0, 0.0)
def test_the_verdict_is_consistent(t: float, s: float, r: float, floor: float) -> None:
    v = deadline_sla(t, s, r, floor=floor)
    assert MIN_SLA <= v.sla <= MAX_SLA
    assert v.sla >= min(MAX_SLA, max(MIN_SLA, floor)) - 1e-9
    assert v.feasible == (v.required_fraction <= 1.0)
    if v.feasible:
        # Asking for the SLA delivers at least what the deadline needs.
        assert v.sla >= v.required_fraction - 1e-9
    if t > 0 and s * r > 0:
        assert v.required_fraction == pytest.approx(t / (s * r))


@given(tokens, seconds, seconds, rates, floors)
def test_the_sla_rises_as_the_deadline_nears(
    t: float, s1: float, s2: float, r: float, floor: float
) -> None:
    nearer, farther = sorted((s1, s2))
    a = deadline_sla(t, farther, r, floor=floor)
    b = deadline_sla(t, nearer, r, floor=floor)
    assert b.required_fraction >= a.required_fraction
    assert b.sla >= a.sla
    assert a.feasible or not b.feasible  # once it cannot be met, less time does not help


@given(tokens, tokens, seconds, rates)
def test_more_work_needs_more(t1: float, t2: float, s: float, r: float) -> None:
    less, more = sorted((t1, t2))
    assert required_fraction(more, s, r) >= required_fraction(less, s, r)
    assert deadline_sla(more, s, r).sla >= deadline_sla(less, s, r).sla


def test_edges() -> None:
    assert required_fraction(0, 0, 5) == 0
    assert math.isinf(required_fraction(1, 0, 5))
    with pytest.raises(ValueError, match="standalone"):
        required_fraction(1, 1, 0)
    with pytest.raises(ValueError, match="headroom"):
        deadline_sla(1, 1, 1, headroom=0.5)


@given(st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), min_size=1))
def test_raise_only_never_lowers(proposals: list[float]) -> None:
    current: float | None = None
    for p in proposals:
        new = raise_only(current, p)
        assert new >= p
        assert current is None or new >= current
        current = new
    assert current == max(proposals)


@given(
    st.integers(0, 10_000),
    st.integers(0, 10_000),
    st.integers(0, 10**9),
    st.floats(min_value=0, max_value=1e5, allow_nan=False),
)
def test_remaining_token_estimate(total: int, done: int, done_tokens: int, prior: float) -> None:
    done = min(done, total)
    est = estimate_remaining_tokens(
        total_requests=total,
        done_requests=done,
        done_tokens=done_tokens,
        prior_tokens_per_request=prior,
    )
    if done == total:
        assert est == 0
    elif done == 0:
        assert est == pytest.approx(total * prior)
    else:
        assert est == pytest.approx((total - done) * done_tokens / done)


# --- the outlook: projected finish against the deadline -----------------------------------

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
offsets = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


def test_outlook_examples() -> None:
    deadline = NOW + timedelta(hours=5)
    on_time = deadline_outlook(
        deadline=deadline,
        projected_finish=NOW + timedelta(hours=3),
        requests_done=10,
        requests_total=100,
        now=NOW,
    )
    assert on_time == DeadlineOutlook("on_track", 7200.0)
    late = deadline_outlook(
        deadline=deadline,
        projected_finish=NOW + timedelta(hours=9),
        requests_done=10,
        requests_total=100,
        now=NOW,
    )
    assert late == DeadlineOutlook("late", -4 * 3600.0)
    assert deadline_outlook(
        deadline=deadline, projected_finish=None, requests_done=0, requests_total=100, now=NOW
    ) == DeadlineOutlook("unknown", None)
    assert deadline_outlook(
        deadline=None,
        projected_finish=NOW + timedelta(hours=1),
        requests_done=1,
        requests_total=100,
        now=NOW,
    ) == DeadlineOutlook("unknown", None)
    assert deadline_outlook(
        deadline=deadline, projected_finish=None, requests_done=5, requests_total=5, now=NOW
    ) == DeadlineOutlook("finished", None)
    # a job that succeeded is finished even when no progress was ever read, deadline or not
    for when in (deadline - timedelta(hours=1), deadline + timedelta(hours=1)):
        assert deadline_outlook(
            deadline=deadline,
            projected_finish=None,
            requests_done=0,
            requests_total=0,
            now=when,
            succeeded=True,
        ) == DeadlineOutlook("finished", None)


@given(offsets, offsets, st.integers(0, 1000), st.integers(1, 1000))
def test_outlook_properties(to_deadline: float, to_finish: float, done: int, total: int) -> None:
    deadline = NOW + timedelta(seconds=to_deadline)
    projected = NOW + timedelta(seconds=to_finish)
    o = deadline_outlook(
        deadline=deadline,
        projected_finish=projected,
        requests_done=done,
        requests_total=total,
        now=NOW,
    )
    if done >= total:
        assert o.state == "finished"
    elif deadline <= NOW:
        assert o.state == "passed"
        assert o.margin_seconds is not None and o.margin_seconds <= 0
    else:
        assert o.margin_seconds == pytest.approx((deadline - projected).total_seconds())
        # late exactly when the projection lands after the deadline
        assert (o.state == "late") == (projected > deadline)
        assert (o.state == "on_track") == (projected <= deadline)
