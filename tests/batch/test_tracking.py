"""gleaner.batch.tracking: the runner's counts into status.batch, the deadline into
deadlineSLA (raised, never lowered) and the DeadlineMet condition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gleaner.api import ConditionStatus, ConditionType, Observed, OfflineJob, find_condition
from gleaner.batch.tracking import (
    REASON_REACHABLE,
    REASON_UNREACHABLE,
    RunnerReport,
    finished,
    track,
)

from .conftest import batch_manifest

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def job_with_deadline(hours: float | None) -> OfflineJob:
    extra = {} if hours is None else {"deadline": (NOW + timedelta(hours=hours)).isoformat()}
    return OfflineJob.model_validate(batch_manifest(**extra))


def report(done: int, total: int = 1000, tokens_each: int = 1000) -> RunnerReport:
    return RunnerReport(
        total=total,
        succeeded=done,
        failed=0,
        prompt_tokens=done * tokens_each // 2,
        completion_tokens=done * tokens_each // 2,
    )


def test_progress_without_a_deadline() -> None:
    job = job_with_deadline(None)
    job.status.observed = Observed(
        throughput_fraction=0.5, window_seconds=60, tokens_per_second=500
    )
    status = track(job, report(250), 1000.0, NOW)
    assert status.batch is not None
    assert status.batch.summary == "250/1000"
    assert (status.batch.requests_done, status.batch.tokens) == (250, 250_000)
    # 750 requests x 1000 tokens left at the observed 500 tok/s: 1500 s.
    assert status.batch.projected_finish == NOW + timedelta(seconds=1500)
    assert status.batch.deadline_sla is None
    assert find_condition(status.conditions, ConditionType.DEADLINE_MET.value) is None


def test_a_deadline_sets_and_raises_the_sla_then_says_it_cannot_be_met() -> None:
    job = job_with_deadline(hours=2)  # 750k tokens left, 7200 s at 1000 tok/s: 0.104
    status = track(job, report(250), 1000.0, NOW)
    assert status.batch is not None
    assert status.batch.required_fraction == pytest.approx(750_000 / 7_200_000)
    assert status.batch.deadline_sla == pytest.approx(0.2)  # the floor (throughputSLA) wins
    cond = find_condition(status.conditions, ConditionType.DEADLINE_MET.value)
    assert cond is not None and cond.status is ConditionStatus.TRUE
    assert cond.reason == REASON_REACHABLE
    # Later, with little progress: the requirement and the SLA rise.
    later = job.model_copy(update={"status": status})
    status = track(later, report(260), 1000.0, NOW + timedelta(hours=1, minutes=55))
    assert status.batch is not None and status.batch.deadline_sla == 1.0
    cond = find_condition(status.conditions, ConditionType.DEADLINE_MET.value)
    assert cond is not None and cond.status is ConditionStatus.FALSE
    assert cond.reason == REASON_UNREACHABLE
    assert "cannot be met" in cond.message
    assert later.model_copy(update={"status": status}).effective_throughput_sla == 1.0


def test_before_any_answer_the_estimate_uses_expected_tokens_per_request() -> None:
    job = job_with_deadline(hours=1)
    status = track(job, report(0, total=3600), 1000.0, NOW)
    assert status.batch is not None
    # 3600 requests x 512 expected tokens over 3600 s x 1000 tok/s.
    assert status.batch.required_fraction == pytest.approx(0.512)
    assert status.batch.deadline_sla == pytest.approx(0.65)  # 0.512 x 1.2, up to 0.05


@given(st.lists(st.tuples(st.integers(0, 100), st.floats(0, 7200)), min_size=1, max_size=12))
def test_the_deadline_sla_never_drops(steps: list[tuple[int, float]]) -> None:
    job = job_with_deadline(hours=2)
    done = 0
    elapsed = 0.0
    last = 0.0
    for more, dt in steps:
        done = min(1000, done + more)
        elapsed = min(7200.0, elapsed + dt)
        status = track(job, report(done), 1000.0, NOW + timedelta(seconds=elapsed))
        job = job.model_copy(update={"status": status})
        assert status.batch is not None
        if status.batch.deadline_sla is not None:
            assert status.batch.deadline_sla >= last
            assert job.effective_throughput_sla >= job.spec.throughput_sla
            last = status.batch.deadline_sla


def test_runner_report_shape() -> None:
    doc = {"total": 3, "succeeded": 1, "failed": 1, "prompt_tokens": 5, "completion_tokens": 6}
    r = RunnerReport.from_json(doc)
    assert (r.done, r.tokens) == (2, 11)
    bad_docs: list[object] = [[], {"total": 1}, {**doc, "failed": -1}, {**doc, "total": "x"}]
    for bad in bad_docs:
        with pytest.raises(ValueError):
            RunnerReport.from_json(bad)


def test_a_succeeded_pod_completes_the_count() -> None:
    job = job_with_deadline(None)
    status = track(job, report(990), 1000.0, NOW)
    done = finished(status)
    assert status.batch is not None and done.batch is not None
    assert status.batch.summary == "990/1000"
    assert (done.batch.requests_done, done.batch.summary) == (1000, "1000/1000")
    assert done.batch.requests_failed == status.batch.requests_failed
    # A template job has no batch progress to complete.
    plain = job.status
    assert finished(plain) == plain
