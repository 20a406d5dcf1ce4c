"""OpenAI Batch API objects from Gleaner's state (pure; docs/batch.md, "The Batch API").

Contract. A batch is an OfflineJob with ``spec.batch`` plus a :class:`BatchRecord` the API
keeps in its file store (what the OfflineJob does not hold: the OpenAI ids, the endpoint,
the metadata, when it was cancelled, the output files). :func:`batch_status` maps the two
to the OpenAI status, :func:`batch_object` to the object the OpenAI API returns:

==============================================  ==================
job (phase / state)                             OpenAI status
==============================================  ==================
cancel asked, job still there                   ``cancelling``
cancel asked, job gone                          ``cancelled``
window closed (:func:`expiry_action`)           ``expired``
Pending (not validated yet)                     ``validating``
Invalid                                         ``failed``
Scheduled, Running, Evicted, Unschedulable      ``in_progress``
past ``expires_at`` and not Succeeded           ``expired``
Succeeded, results not uploaded yet             ``finalizing``
Succeeded, results uploaded                     ``completed``
Failed                                          ``failed``
job gone without a cancel                       ``failed``
==============================================  ==================

``request_counts`` come from ``status.batch`` (``total``, ``completed`` = answered with a
2xx, ``failed`` = refused by the engine), or from the record once the batch expired (the
counts when it stopped; its job is gone then).

Expiry (:func:`expiry_action`), as the OpenAI API does it: a batch not done when its
completion window closes is stopped and ends ``expired``, its answers so far kept. The
runner of a running batch stops itself at the window's end (``--stop-at``), uploads the
partial results and finalizes with ``expired``; for a batch whose runner is not running
then (pending, evicted, unschedulable), or one that has not finalized
:data:`EXPIRY_GRACE_SECONDS` after the window, the operator's timer marks it expired and
deletes its OfflineJob (the partial answers stay on the job's claim).

Ids: files ``file-<hex>``, batches ``batch_<hex>``; the OfflineJob of batch ``batch_<hex>``
is named ``batch-<hex>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from gleaner.api import OfflineJob, Phase

COMPLETION_WINDOWS: dict[str, timedelta] = {"24h": timedelta(hours=24)}
"""The completion windows a batch may ask for (the OpenAI API knows only ``24h``)."""
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
"""Endpoints a batch may run (those the runner sends; gleaner.batch.records)."""
FILE_PURPOSES = ("batch", "batch_output")
"""Purposes of the files the store holds: uploads, and the results of a batch."""
MAX_METADATA_PAIRS = 16
"""The OpenAI API's bound on a batch's metadata: 16 pairs, keys of 64 and values of 512."""

EXPIRY_GRACE_SECONDS = 900
"""How long after its window a running batch's runner has to stop and upload its partial
results before the operator expires the batch and deletes its job: a request in flight at
the window's end is awaited (at most the runner's --request-timeout, 600 s by default)."""

_FILE_ID = re.compile(r"^file-[0-9a-f]{24}$")
_BATCH_ID = re.compile(r"^batch_[0-9a-f]{24}$")


class ApiError(Exception):
    """An error the API answers with, in the OpenAI shape (:func:`error_body`)."""

    def __init__(
        self, status: int, message: str, *, code: str | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
}


def error_body(error: ApiError) -> dict[str, Any]:
    """``{"error": {message, type, param, code}}``: what the openai client reads."""
    return {
        "error": {
            "message": error.message,
            "type": _ERROR_TYPES.get(error.status, "server_error"),
            "param": error.param,
            "code": error.code,
        }
    }


def valid_file_id(file_id: str) -> bool:
    return bool(_FILE_ID.match(file_id))


def valid_batch_id(batch_id: str) -> bool:
    return bool(_BATCH_ID.match(batch_id))


def file_id_of(token: str) -> str:
    """The file id made from 24 hex digits."""
    return f"file-{token}"


def batch_id_of(token: str) -> str:
    """The batch id made from 24 hex digits."""
    return f"batch_{token}"


def job_name(batch_id: str) -> str:
    """The name of the OfflineJob behind ``batch_id`` (a DNS label: no underscore)."""
    return batch_id.replace("_", "-", 1)


@dataclass(frozen=True)
class FileRecord:
    """A file of the store: what the OpenAI file object says about it."""

    id: str
    namespace: str
    filename: str
    purpose: str
    bytes: int
    created_at: int


def file_object(record: FileRecord) -> dict[str, Any]:
    """The OpenAI file object."""
    return {
        "id": record.id,
        "object": "file",
        "bytes": record.bytes,
        "created_at": record.created_at,
        "filename": record.filename,
        "purpose": record.purpose,
        "status": "processed",
        "status_details": None,
    }


@dataclass(frozen=True)
class BatchRecord:
    """What the API keeps of a batch beside its OfflineJob."""

    id: str
    namespace: str
    input_file_id: str
    endpoint: str
    completion_window: str
    created_at: int
    metadata: dict[str, str] = field(default_factory=dict)
    cancelling_at: int | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    finalized_at: int | None = None
    expired_at: int | None = None
    counts: dict[str, int] | None = None
    """``request_counts`` kept when the batch expired (its job is deleted then)."""

    @property
    def expires_at(self) -> int:
        return self.created_at + int(COMPLETION_WINDOWS[self.completion_window].total_seconds())


def deadline_of(created_at: int, completion_window: str) -> int:
    """The deadline (Unix seconds) of a batch created at ``created_at``: spec.batch.deadline."""
    window = COMPLETION_WINDOWS.get(completion_window)
    if window is None:
        raise ApiError(
            400,
            f"completion_window must be one of {sorted(COMPLETION_WINDOWS)}",
            param="completion_window",
            code="invalid_value",
        )
    return created_at + int(window.total_seconds())


def check_create(body: Any) -> tuple[str, str, str, dict[str, str]]:
    """``(input_file_id, endpoint, completion_window, metadata)`` of a create request, or
    the 400 that names the wrong field."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    input_file_id = body.get("input_file_id")
    if not isinstance(input_file_id, str) or not valid_file_id(input_file_id):
        raise ApiError(400, "input_file_id must be a file id", param="input_file_id")
    endpoint = body.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise ApiError(
            400,
            f"endpoint must be one of {list(ENDPOINTS)}",
            param="endpoint",
            code="invalid_value",
        )
    window = body.get("completion_window")
    if not isinstance(window, str) or window not in COMPLETION_WINDOWS:
        raise ApiError(
            400,
            f"completion_window must be one of {sorted(COMPLETION_WINDOWS)}",
            param="completion_window",
            code="invalid_value",
        )
    metadata = body.get("metadata") or {}
    if (
        not isinstance(metadata, dict)
        or len(metadata) > MAX_METADATA_PAIRS
        or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
            for k, v in metadata.items()
        )
    ):
        raise ApiError(
            400,
            "metadata: at most 16 string pairs, keys up to 64 and values up to 512 characters",
            param="metadata",
        )
    return input_file_id, str(endpoint), window, dict(metadata)


def batch_status(record: BatchRecord, job: OfflineJob | None, now: int) -> str:
    """The OpenAI status of a batch (see the module docstring's table)."""
    if record.cancelling_at is not None:
        return "cancelling" if job is not None else "cancelled"
    if record.expired_at is not None:
        return "expired"
    if job is None:
        return "failed"
    phase = job.status.phase
    if phase is Phase.SUCCEEDED:
        return "completed" if record.finalized_at is not None else "finalizing"
    if phase in (Phase.FAILED, Phase.INVALID):
        return "failed"
    if now >= record.expires_at:
        return "expired"
    if phase is Phase.PENDING:
        return "validating"
    return "in_progress"


def request_counts(job: OfflineJob | None) -> dict[str, int]:
    """``{total, completed, failed}`` from the job's ``status.batch``."""
    progress = job.status.batch if job is not None else None
    if progress is None:
        return {"total": 0, "completed": 0, "failed": 0}
    return {
        "total": progress.requests_total,
        "completed": max(0, progress.requests_done - progress.requests_failed),
        "failed": progress.requests_failed,
    }


def _condition_time(job: OfflineJob, kind: str) -> int | None:
    for condition in job.status.conditions:
        if condition.type == kind and condition.last_transition_time is not None:
            return int(condition.last_transition_time.timestamp())
    return None


def batch_object(record: BatchRecord, job: OfflineJob | None, now: int) -> dict[str, Any]:
    """The OpenAI batch object of ``record`` backed by ``job`` (None: the job is gone)."""
    status = batch_status(record, job, now)
    errors: dict[str, Any] | None = None
    if status == "failed":
        message = job.status.message if job is not None else "the batch's OfflineJob is gone"
        errors = {
            "object": "list",
            "data": [{"code": "job_failed", "message": message, "param": None, "line": None}],
        }
    started = _condition_time(job, "Scheduled") if job is not None else None
    terminal_at = record.finalized_at if status in ("completed", "failed") else None
    return {
        "id": record.id,
        "object": "batch",
        "endpoint": record.endpoint,
        "errors": errors,
        "input_file_id": record.input_file_id,
        "completion_window": record.completion_window,
        "status": status,
        "output_file_id": record.output_file_id,
        "error_file_id": record.error_file_id,
        "created_at": record.created_at,
        "in_progress_at": started if status != "validating" else None,
        "expires_at": record.expires_at,
        "finalizing_at": record.finalized_at if status in ("completed", "finalizing") else None,
        "completed_at": terminal_at if status == "completed" else None,
        "failed_at": (terminal_at or now) if status == "failed" else None,
        "expired_at": (record.expired_at or record.expires_at) if status == "expired" else None,
        "cancelling_at": record.cancelling_at,
        "cancelled_at": None if status != "cancelled" else record.cancelling_at,
        "request_counts": record.counts
        if record.expired_at is not None and record.counts is not None
        else request_counts(job),
        "metadata": record.metadata,
        "offline_job": job_name(record.id),
    }


ExpiryAction = Literal["keep", "wait", "expire"]


def expiry_action(
    record: BatchRecord, job: OfflineJob | None, now: int, grace: int = EXPIRY_GRACE_SECONDS
) -> ExpiryAction:
    """What the operator's timer does with a batch at ``now`` (see the module docstring):

    - ``keep``: nothing to do (its window is open, or it is over: cancelled, finalized,
      expired, succeeded and uploading, failed);
    - ``wait``: the window closed while its runner runs; the runner stops itself and
      uploads the partial results (``grace`` seconds for that);
    - ``expire``: mark it expired (keeping its request counts) and delete its job.
    """
    if record.cancelling_at is not None or record.finalized_at is not None:
        return "keep"
    if record.expired_at is not None or now < record.expires_at:
        return "keep"
    if job is None:
        return "expire"
    phase = job.status.phase
    if phase in (Phase.SUCCEEDED, Phase.FAILED, Phase.INVALID):
        return "keep"
    if phase is Phase.RUNNING and now < record.expires_at + grace:
        return "wait"
    return "expire"


def page(objects: list[dict[str, Any]], after: str | None, limit: int) -> dict[str, Any]:
    """A cursor page of ``objects`` (newest first): those after the id ``after``, at most
    ``limit``; the OpenAI list shape (``data``, ``first_id``, ``last_id``, ``has_more``)."""
    start = 0
    if after is not None:
        ids = [o["id"] for o in objects]
        start = ids.index(after) + 1 if after in ids else len(objects)
    chosen = objects[start : start + limit]
    return {
        "object": "list",
        "data": chosen,
        "first_id": chosen[0]["id"] if chosen else None,
        "last_id": chosen[-1]["id"] if chosen else None,
        "has_more": start + limit < len(objects),
    }


def newest_first(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Objects by ``created_at`` descending, ids breaking ties (a stable cursor order)."""
    return sorted(objects, key=lambda o: (-int(o["created_at"]), str(o["id"])))


def iso(seconds: int) -> str:
    """An RFC 3339 UTC time for the OfflineJob (spec.batch.deadline)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
