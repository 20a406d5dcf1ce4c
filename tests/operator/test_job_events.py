"""What the OfflineJob event handler judges from the object alone (pure parts), the
validation a pass writes together with a new job's placement, and the finalizer's patch on
a new job's first event (sent only when the job arrives without it)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from gleaner.api import ConditionType, OfflineJobStatus, Phase, find_condition
from gleaner.api.contract import FINALIZER
from gleaner.operator import status as st
from gleaner.operator.context import OperatorContext
from gleaner.operator.handlers.binding import Judged
from gleaner.operator.handlers.jobs import finalizers_without, job_event, waits_for_placement
from gleaner.operator.handlers.validate import spec_judged
from gleaner.operator.validation import ValidJob, validate_job
from gleaner.testing.fixtures import make_placement
from gleaner.testing.kube import offlinejob_manifest

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _job(generation: int | None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    body = offlinejob_manifest("j1")
    body["metadata"].update(uid="u1", resourceVersion="7")
    if generation is not None:
        body["metadata"]["generation"] = generation
    if status is not None:
        body["status"] = status
    return body


def _valid_condition(observed: int) -> dict[str, Any]:
    return {
        "type": "Valid",
        "status": "True",
        "reason": "SpecValid",
        "observedGeneration": observed,
    }


def test_a_spec_is_judged_only_by_a_valid_condition_of_its_own_generation() -> None:
    assert not spec_judged(_job(1))  # new: no status
    assert not spec_judged(_job(1, {"phase": "Pending", "conditions": []}))
    assert spec_judged(_job(1, {"phase": "Pending", "conditions": [_valid_condition(1)]}))
    # edited since (the API server bumped the generation)
    assert not spec_judged(_job(2, {"phase": "Running", "conditions": [_valid_condition(1)]}))
    invalid = {**_valid_condition(3), "status": "False", "reason": "InvalidSpec"}
    assert spec_judged(_job(3, {"phase": "Invalid", "conditions": [invalid]}))
    # no generation on the object: never taken as judged
    assert not spec_judged(_job(None, {"conditions": [_valid_condition(1)]}))


def test_only_jobs_without_a_placement_wait_for_the_pass() -> None:
    for phase in (None, "Pending", "Invalid", "Unschedulable", "Evicted"):
        assert waits_for_placement(_job(1, {"phase": phase} if phase else None)), phase
    for phase in ("Scheduled", "Running", "Succeeded", "Failed"):
        assert not waits_for_placement(_job(1, {"phase": phase})), phase


def test_releasing_keeps_every_other_finalizer() -> None:
    body = _job(1)
    body["metadata"]["finalizers"] = ["other.io/keep", FINALIZER, "third.io/x"]
    assert finalizers_without(body, FINALIZER) == ["other.io/keep", "third.io/x"]
    assert finalizers_without(_job(1), FINALIZER) == []


def _judged(body: dict[str, Any]) -> Judged:
    verdict = validate_job(body, None)
    assert isinstance(verdict, ValidJob)
    return Judged(verdict, body["metadata"]["generation"])


def test_a_new_job_is_placed_and_judged_valid_in_one_status() -> None:
    body = _job(1)
    judged = _judged(body)
    cur = OfflineJobStatus()
    valid = judged.apply(body, cur, NOW)
    assert valid is not None
    placement = make_placement("n1", [0], uuids=["GPU-0"], decided_at=NOW)
    new = st.scheduled(valid, placement, "j1-0", NOW, "")
    assert new.phase is Phase.SCHEDULED
    cond = find_condition(new.conditions, ConditionType.VALID.value)
    assert cond is not None and cond.status.value == "True"
    assert cond.observed_generation == 1 and new.observed_generation == 1
    # the condition now says the spec is judged: the job's next event costs nothing
    written = {**body, "status": new.model_dump(mode="json", by_alias=True, exclude_none=True)}
    assert spec_judged(written)


def test_a_spec_edited_after_the_pass_judged_it_is_not_written_as_valid() -> None:
    body = _job(1)
    judged = _judged(body)
    edited = _job(2)
    assert judged.apply(edited, OfflineJobStatus(), NOW) is None


class _Recorder:
    """The few parts of the operator's context that ``job_event`` touches for a new job:
    records the API patches it sends and the kicks."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.kicks: list[str] = []
        self.client = self
        self.watched_jobs = self

    async def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((path, body))
        return {}

    def observe(self, event_type: str | None, body: dict[str, Any]) -> None:
        pass

    def keep_job(self, body: dict[str, Any], gone: bool = False) -> None:
        pass

    def kick(self, why: str) -> None:
        self.kicks.append(why)


async def _first_event(body: dict[str, Any]) -> _Recorder:
    ctx = _Recorder()
    outcome = await job_event(cast(OperatorContext, ctx), "ADDED", body)
    assert outcome == "queued for validation"
    assert ctx.kicks  # the pass places it either way
    return ctx


async def test_a_job_stored_with_the_finalizer_costs_no_patch() -> None:
    # What the admission webhook stores: the operator sends nothing before placing it.
    body = _job(1)
    body["metadata"]["finalizers"] = ["other.io/keep", FINALIZER]
    assert (await _first_event(body)).patches == []


async def test_a_job_without_the_finalizer_gets_it_in_one_patch() -> None:
    # Created while the webhook was unreachable: the operator's fallback.
    body = _job(1)
    body["metadata"]["finalizers"] = ["other.io/keep"]
    ctx = await _first_event(body)
    assert ctx.patches == [
        (
            "/apis/gleaner.dev/v1alpha1/namespaces/default/offlinejobs/j1",
            {"metadata": {"finalizers": ["other.io/keep", FINALIZER]}},
        )
    ]
