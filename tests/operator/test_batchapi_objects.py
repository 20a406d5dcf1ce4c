"""The Batch API's pure mapping: OfflineJob state -> OpenAI batch status, counts, pages."""

from __future__ import annotations

from typing import Any

import pytest

from gleaner.api import OfflineJob, Phase
from gleaner.operator.batchapi.objects import (
    EXPIRY_GRACE_SECONDS,
    ApiError,
    BatchRecord,
    batch_object,
    batch_status,
    check_create,
    deadline_of,
    error_body,
    expiry_action,
    job_name,
    page,
    request_counts,
)
from gleaner.testing.kube import offlinejob_manifest

BATCH = "batch_" + "a" * 24
FILE = "file-" + "b" * 24
T0 = 1_800_000_000


def record(**changes: Any) -> BatchRecord:
    fields: dict[str, Any] = {
        "id": BATCH,
        "namespace": "team",
        "input_file_id": FILE,
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
        "created_at": T0,
    }
    return BatchRecord(**(fields | changes))


def job(phase: Phase, **batch: int) -> OfflineJob:
    manifest = offlinejob_manifest("batch-x", namespace="team")
    manifest["status"] = {"phase": phase.value}
    if batch:
        manifest["status"]["batch"] = batch
    return OfflineJob.model_validate(manifest)


@pytest.mark.parametrize(
    ("phase", "status"),
    [
        (Phase.PENDING, "validating"),
        (Phase.SCHEDULED, "in_progress"),
        (Phase.RUNNING, "in_progress"),
        (Phase.EVICTED, "in_progress"),
        (Phase.UNSCHEDULABLE, "in_progress"),
        (Phase.SUCCEEDED, "finalizing"),
        (Phase.FAILED, "failed"),
        (Phase.INVALID, "failed"),
    ],
)
def test_each_phase_maps_to_an_openai_status(phase: Phase, status: str) -> None:
    assert batch_status(record(), job(phase), T0 + 60) == status


def test_completed_only_once_the_results_are_uploaded() -> None:
    assert batch_status(record(finalized_at=T0 + 5), job(Phase.SUCCEEDED), T0 + 9) == "completed"


def test_cancel_is_cancelling_while_the_job_lives_then_cancelled() -> None:
    asked = record(cancelling_at=T0 + 10)
    assert batch_status(asked, job(Phase.RUNNING), T0 + 11) == "cancelling"
    assert batch_status(asked, None, T0 + 12) == "cancelled"
    shown = batch_object(asked, None, T0 + 12)
    assert (shown["cancelling_at"], shown["cancelled_at"]) == (T0 + 10, T0 + 10)


def test_a_job_gone_without_cancel_is_failed_with_a_reason() -> None:
    shown = batch_object(record(), None, T0 + 1)
    assert shown["status"] == "failed"
    assert shown["errors"]["data"][0]["message"] == "the batch's OfflineJob is gone"


def test_past_the_window_an_unfinished_batch_is_expired_a_finished_one_not() -> None:
    late = T0 + 24 * 3600
    assert batch_status(record(), job(Phase.RUNNING), late - 1) == "in_progress"
    assert batch_status(record(), job(Phase.RUNNING), late) == "expired"
    assert batch_status(record(), job(Phase.SUCCEEDED), late) == "finalizing"
    assert batch_object(record(), job(Phase.RUNNING), late)["expired_at"] == late


def test_request_counts_split_answers_into_completed_and_failed() -> None:
    running = job(Phase.RUNNING, requestsTotal=10, requestsDone=7, requestsFailed=2)
    assert request_counts(running) == {"total": 10, "completed": 5, "failed": 2}
    assert request_counts(job(Phase.PENDING)) == {"total": 0, "completed": 0, "failed": 0}
    assert request_counts(None) == {"total": 0, "completed": 0, "failed": 0}


def test_the_batch_object_has_every_field_the_openai_client_reads() -> None:
    shown = batch_object(record(metadata={"k": "v"}), job(Phase.RUNNING), T0 + 1)
    for name in (
        "id", "object", "endpoint", "errors", "input_file_id", "completion_window", "status",
        "output_file_id", "error_file_id", "created_at", "in_progress_at", "expires_at",
        "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at",
        "cancelled_at", "request_counts", "metadata",
    ):  # fmt: skip
        assert name in shown, name
    assert (shown["object"], shown["expires_at"], shown["metadata"]) == (
        "batch", T0 + 86400, {"k": "v"},
    )  # fmt: skip


def test_create_requests_are_checked_field_by_field() -> None:
    ok = {"input_file_id": FILE, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    assert check_create(ok) == (FILE, "/v1/chat/completions", "24h", {})
    for bad, param in [
        (ok | {"input_file_id": "nope"}, "input_file_id"),
        (ok | {"endpoint": "/v1/images"}, "endpoint"),
        (ok | {"completion_window": "1h"}, "completion_window"),
        (ok | {"metadata": {"k": 1}}, "metadata"),
        (ok | {"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
    ]:
        with pytest.raises(ApiError) as caught:
            check_create(bad)
        assert (caught.value.status, caught.value.param) == (400, param)


def test_the_completion_window_is_the_deadline() -> None:
    assert deadline_of(T0, "24h") == T0 + 86400
    with pytest.raises(ApiError):
        deadline_of(T0, "48h")


def test_job_names_are_dns_labels() -> None:
    assert job_name(BATCH) == "batch-" + "a" * 24


def test_errors_have_the_openai_shape() -> None:
    body = error_body(ApiError(403, "no", code="permission_denied"))
    assert body == {
        "error": {
            "message": "no",
            "type": "invalid_request_error",
            "param": None,
            "code": "permission_denied",
        }
    }


def test_pages_follow_the_cursor() -> None:
    objects = [{"id": f"o{i}", "created_at": 100 - i} for i in range(5)]
    first = page(objects, None, 2)
    assert ([o["id"] for o in first["data"]], first["has_more"]) == (["o0", "o1"], True)
    second = page(objects, first["last_id"], 2)
    assert [o["id"] for o in second["data"]] == ["o2", "o3"]
    last = page(objects, "o3", 2)
    assert ([o["id"] for o in last["data"]], last["has_more"]) == (["o4"], False)
    assert page(objects, "unknown", 2)["data"] == []


WINDOW_END = T0 + 24 * 3600


@pytest.mark.parametrize(
    ("phase", "at", "action"),
    [
        # the window is open: nothing to do, whatever the job does
        (Phase.RUNNING, WINDOW_END - 1, "keep"),
        (Phase.PENDING, WINDOW_END - 1, "keep"),
        # closed, and no runner to upload partial answers: expire now
        (Phase.PENDING, WINDOW_END, "expire"),
        (Phase.SCHEDULED, WINDOW_END, "expire"),
        (Phase.EVICTED, WINDOW_END, "expire"),
        (Phase.UNSCHEDULABLE, WINDOW_END, "expire"),
        (None, WINDOW_END, "expire"),
        # a running runner stops itself and uploads: wait for it, within the grace
        (Phase.RUNNING, WINDOW_END, "wait"),
        (Phase.RUNNING, WINDOW_END + EXPIRY_GRACE_SECONDS - 1, "wait"),
        (Phase.RUNNING, WINDOW_END + EXPIRY_GRACE_SECONDS, "expire"),
        # over already: succeeded (uploading), failed
        (Phase.SUCCEEDED, WINDOW_END + 10 * EXPIRY_GRACE_SECONDS, "keep"),
        (Phase.FAILED, WINDOW_END, "keep"),
        (Phase.INVALID, WINDOW_END, "keep"),
    ],
)
def test_expiry_action(phase: Phase | None, at: int, action: str) -> None:
    assert expiry_action(record(), job(phase) if phase else None, at) == action


def test_a_batch_that_is_over_never_expires() -> None:
    late = WINDOW_END + 10 * EXPIRY_GRACE_SECONDS
    for over in (
        record(cancelling_at=T0 + 5),
        record(finalized_at=T0 + 5),
        record(expired_at=WINDOW_END, counts={"total": 3, "completed": 1, "failed": 0}),
    ):
        assert expiry_action(over, job(Phase.RUNNING), late) == "keep"


def test_an_expired_batch_reports_the_counts_kept_when_it_stopped() -> None:
    kept = {"total": 10, "completed": 4, "failed": 1}
    expired = record(expired_at=WINDOW_END + 30, counts=kept)
    shown = batch_object(expired, None, WINDOW_END + 99)  # its job is gone
    assert shown["status"] == "expired"
    assert shown["request_counts"] == kept
    assert shown["expired_at"] == WINDOW_END + 30
    # expired wins over the job's own phase (a runner that finished uploading partials)
    assert batch_status(expired, job(Phase.SUCCEEDED), WINDOW_END + 99) == "expired"
