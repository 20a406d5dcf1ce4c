"""Recording a placement after its Pod exists (pure parts): what the Pod says of its
placement, and the one status write that records it with the Pod's phase."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gleaner.api import ConditionType, OfflineJob, OfflineJobStatus, Phase, find_condition
from gleaner.api.contract import ANNOTATION_PLACEMENT
from gleaner.operator import status as st
from gleaner.operator.builders import build_offline_pod, placement_of_pod
from gleaner.operator.handlers.binding import Judged, recorded_change
from gleaner.operator.validation import ValidJob, validate_job
from gleaner.testing.fixtures import make_placement
from gleaner.testing.kube import offlinejob_manifest

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
PLACEMENT = make_placement("node-a", (2, 3), decided_at=NOW, compute=0.8)


def _body(
    uid: str = "u1", generation: int = 1, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    body = offlinejob_manifest("j1", gpus=2)
    body["metadata"].update(uid=uid, generation=generation, resourceVersion="5")
    if status is not None:
        body["status"] = status
    return body


def _pod(body: dict[str, Any], attempt: int = 0, phase: str = "") -> dict[str, Any]:
    job = OfflineJob.model_validate({k: v for k, v in body.items() if k != "status"})
    pod = build_offline_pod(job, PLACEMENT, attempt, "compute 0.80 x memory 1.00")
    if phase:
        pod["status"] = {"phase": phase}
    return pod


def test_the_pod_carries_its_placement_and_gives_it_back() -> None:
    made = placement_of_pod(_pod(_body(), attempt=2))
    assert made is not None
    assert made.placement == PLACEMENT
    assert made.why == "compute 0.80 x memory 1.00"
    assert (made.generation, made.attempt, made.job_uid) == (1, 2, "u1")


def test_a_pod_without_a_readable_placement_gives_none() -> None:
    pod = _pod(_body())
    del pod["metadata"]["annotations"][ANNOTATION_PLACEMENT]
    assert placement_of_pod(pod) is None  # made by an operator that recorded first
    pod["metadata"]["annotations"][ANNOTATION_PLACEMENT] = '{"placement": {"node": 3}}'
    assert placement_of_pod(pod) is None
    pod["metadata"]["annotations"][ANNOTATION_PLACEMENT] = "not json"
    assert placement_of_pod(pod) is None


def test_recorded_with_a_running_pod_is_scheduled_and_running_in_one_status() -> None:
    new = st.recorded(OfflineJobStatus(), PLACEMENT, "j1-0", 0, "Running", NOW, "why")
    assert new is not None
    assert new.phase is Phase.RUNNING
    assert new.placement == PLACEMENT and new.pods == ["j1-0"]
    scheduled = find_condition(new.conditions, ConditionType.SCHEDULED)
    ready = find_condition(new.conditions, ConditionType.READY)
    assert scheduled is not None and scheduled.status == "True" and "why" in scheduled.message
    assert ready is not None and ready.status == "True"


def test_recorded_with_a_pending_pod_is_scheduled() -> None:
    new = st.recorded(OfflineJobStatus(), PLACEMENT, "j1-0", 0, "Pending", NOW)
    assert new is not None and new.phase is Phase.SCHEDULED and new.pods == ["j1-0"]


def test_recorded_needs_a_queued_job_at_the_pods_attempt() -> None:
    assert st.recorded(OfflineJobStatus(), PLACEMENT, "j1-1", 1, "Running", NOW) is None
    bound = st.scheduled(OfflineJobStatus(), PLACEMENT, "j1-0", NOW)
    assert st.recorded(bound, PLACEMENT, "j1-0", 0, "Running", NOW) is None


def _judged(body: dict[str, Any]) -> Judged:
    verdict = validate_job(body, None)
    assert isinstance(verdict, ValidJob)
    return Judged(verdict, body["metadata"]["generation"])


def _change(body: dict[str, Any], pod: dict[str, Any], judged: Judged | None = None) -> Any:
    made = placement_of_pod(pod)
    assert made is not None
    return recorded_change(
        pod["metadata"]["name"], made, None if judged is None else judged.apply, pod
    )


def test_the_change_records_the_placement_and_the_validation_together() -> None:
    body = _body()
    pod = _pod(body, phase="Running")
    new = _change(body, pod, _judged(body))(body, OfflineJobStatus())
    assert new is not None and new.phase is Phase.RUNNING
    valid = find_condition(new.conditions, ConditionType.VALID)
    assert valid is not None and valid.status == "True" and valid.observed_generation == 1


def test_the_change_writes_nothing_for_another_job_or_another_spec() -> None:
    pod = _pod(_body(), phase="Running")
    # The job was deleted and made again under the same name: another UID.
    assert _change(_body(), pod)(_body(uid="u2"), OfflineJobStatus()) is None
    # Its spec was edited since the Pod was made.
    assert _change(_body(), pod)(_body(generation=2), OfflineJobStatus()) is None
    # Judged for generation 1, the job is at 2 (the Pod says 1 too: refused either way).
    edited = _body(generation=2)
    assert _change(_body(), pod, _judged(_body()))(edited, OfflineJobStatus()) is None


def test_the_change_on_a_job_recorded_meanwhile_moves_it_with_the_pod() -> None:
    """The record timer wrote Scheduled; the Pod's Running then comes through the same
    change, not lost."""
    body = _body()
    pod = _pod(body, phase="Running")
    scheduled = st.scheduled(OfflineJobStatus(), PLACEMENT, "j1-0", NOW)
    new = _change(body, pod)(body, scheduled)
    assert new is not None and new.phase is Phase.RUNNING
    # An older attempt's Pod never moves the job.
    later = scheduled.model_copy(update={"pods": ["j1-0", "j1-1"]})
    assert _change(body, pod)(body, later) is None
