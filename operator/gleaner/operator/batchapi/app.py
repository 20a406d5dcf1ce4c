"""The Batch API's HTTP face: a FastAPI app (docs/batch.md, "The Batch API").

Contract. :func:`build_batch_app` serves, under ``/v1`` as the OpenAI API does:

- ``POST /v1/files`` (multipart: ``file``, ``purpose=batch``), ``GET /v1/files``,
  ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``;
- ``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window: "24h"``,
  ``metadata``), ``GET /v1/batches`` (``after``, ``limit``), ``GET /v1/batches/{id}``,
  ``POST /v1/batches/{id}/cancel``;

and, for the runner of a batch it created (remote mode), under
``/gleaner/v1/namespaces/{namespace}/batches/{id}`` (:func:`runner_url`): ``GET .../input``,
``PUT .../output`` and ``PUT .../errors`` (the result files), ``POST .../finalize``.

Every call is authenticated and authorized (gleaner.operator.batchapi.auth); errors are
the OpenAI shape ``{"error": {...}}`` with its status. A batch is created as an OfflineJob
named ``batch-<hex>`` in the caller's namespace: ``spec`` from the ConfigMap the metadata
key ``template`` names (default ``batch-api``; key ``spec.yaml``: an OfflineJob spec with
``batch`` holding model, engineImage, claimName and whatever else but input and output),
``spec.batch.input``/``output`` under ``batch-api/<batch-id>/`` on the claim, and
``spec.batch.deadline`` the end of the completion window.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

import yaml
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from gleaner.api import API_VERSION, OfflineJob
from gleaner.api.contract import ANNOTATION_BATCH_API, LABEL_BATCH_API
from gleaner.clients.kube import KubeError, SyncKubeClient, offlinejobs_path
from gleaner.operator.batchapi.auth import Authorizer
from gleaner.operator.batchapi.files import CHUNK, FileStore, TooLargeError
from gleaner.operator.batchapi.objects import (
    ApiError,
    BatchRecord,
    batch_object,
    check_create,
    deadline_of,
    error_body,
    expiry_action,
    file_object,
    iso,
    job_name,
    newest_first,
    page,
    request_counts,
)

TEMPLATE_KEY = "template"
"""The batch metadata key that names the ConfigMap with the OfflineJob spec."""
DEFAULT_TEMPLATE = "batch-api"
TEMPLATE_DATA_KEY = "spec.yaml"
RUN_DIR = "batch-api"
"""Directory on the job's claim that holds each API batch's input and run state."""
MAX_LIST = 100


def _json(status: int, body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(body, status_code=status)


def _multipart(content_type: str, body: bytes) -> tuple[str, bytes, str | None]:
    """``(filename, bytes of 'file', purpose)`` of a multipart/form-data body."""
    if not content_type.startswith("multipart/form-data"):
        raise ApiError(400, "upload the file as multipart/form-data (fields file, purpose)")
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
    )
    filename, data, purpose = "", None, None
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        content = payload if isinstance(payload, bytes) else b""
        if name == "file":
            filename = str(part.get_filename() or "upload.jsonl")
            data = content
        elif name == "purpose":
            purpose = content.decode().strip()
    if data is None:
        raise ApiError(400, "the form has no field 'file'", param="file")
    return filename, data, purpose


def build_batch_app(
    store: FileStore,
    kube: SyncKubeClient,
    self_url: str,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    """The Batch API app; ``self_url`` is where a runner reaches it (its Service)."""
    app = FastAPI(title="Gleaner Batch API", docs_url=None, redoc_url=None, openapi_url=None)
    auth = Authorizer(kube)

    def now() -> int:
        return int(clock())

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _json(exc.status, error_body(exc))

    def user(request: Request, verb: str) -> str:
        return auth.caller(
            request.headers.get("authorization"),
            request.headers.get("openai-organization"),
            verb,
        )

    def job_of(namespace: str, batch_id: str) -> OfflineJob | None:
        doc = kube.get(offlinejobs_path(namespace, job_name(batch_id)))
        return OfflineJob.model_validate(doc) if doc else None

    def record_of(namespace: str, batch_id: str) -> BatchRecord:
        record = store.batch(namespace, batch_id)
        if record is None:
            raise ApiError(404, f"no batch {batch_id} in namespace {namespace}", code="not_found")
        return record

    def show(record: BatchRecord) -> dict[str, Any]:
        return batch_object(record, job_of(record.namespace, record.id), now())

    # --- files --------------------------------------------------------------------------

    @app.post("/v1/files")
    async def upload(request: Request) -> JSONResponse:
        namespace = await run_in_threadpool(user, request, "create")
        body = bytearray()
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > store.max_file_bytes + CHUNK:  # room for the form's own fields
                raise ApiError(413, f"a file may hold at most {store.max_file_bytes} bytes")
        filename, data, purpose = _multipart(request.headers.get("content-type", ""), bytes(body))
        if purpose != "batch":
            raise ApiError(400, "purpose must be 'batch'", param="purpose")

        def save() -> dict[str, Any]:
            chunks = (data[i : i + CHUNK] for i in range(0, len(data), CHUNK))
            try:
                record = store.add_file(namespace, filename, "batch", chunks, now())
            except TooLargeError as exc:
                raise ApiError(413, str(exc)) from exc
            return file_object(record)

        return _json(200, await run_in_threadpool(save))

    @app.get("/v1/files")
    def list_files(
        request: Request, after: str | None = None, limit: int = 20, purpose: str | None = None
    ) -> dict[str, Any]:
        namespace = user(request, "get")
        objects = [
            file_object(r)
            for r in store.files(namespace)
            if purpose is None or r.purpose == purpose
        ]
        return page(newest_first(objects), after, max(1, min(limit, 10000)))

    @app.get("/v1/files/{file_id}")
    def get_file(request: Request, file_id: str) -> dict[str, Any]:
        namespace = user(request, "get")
        record = store.file(namespace, file_id)
        if record is None:
            raise ApiError(404, f"no file {file_id} in namespace {namespace}", code="not_found")
        return file_object(record)

    def stream(namespace: str, file_id: str) -> StreamingResponse:
        handle = store.open_content(namespace, file_id)
        if handle is None:
            raise ApiError(404, f"no file {file_id} in namespace {namespace}", code="not_found")

        def chunks() -> Iterator[bytes]:
            with handle:
                while chunk := handle.read(CHUNK):
                    yield chunk

        return StreamingResponse(chunks(), media_type="application/octet-stream")

    @app.get("/v1/files/{file_id}/content")
    def file_content(request: Request, file_id: str) -> StreamingResponse:
        return stream(user(request, "get"), file_id)

    # --- batches ------------------------------------------------------------------------

    def job_manifest(record: BatchRecord, namespace: str) -> dict[str, Any]:
        template = record.metadata.get(TEMPLATE_KEY, DEFAULT_TEMPLATE)
        config = kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{template}")
        text = ((config or {}).get("data") or {}).get(TEMPLATE_DATA_KEY)
        if not text:
            raise ApiError(
                400,
                f"namespace {namespace} has no ConfigMap {template} with key "
                f"{TEMPLATE_DATA_KEY} (the OfflineJob spec of its batches; docs/batch.md)",
                param="metadata",
            )
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ApiError(400, f"ConfigMap {template}: {exc}") from exc
        if not isinstance(spec, dict) or not isinstance(spec.get("batch"), dict):
            raise ApiError(400, f"ConfigMap {template}: {TEMPLATE_DATA_KEY} needs spec.batch")
        spec.pop("template", None)
        spec["batch"] = {
            **spec["batch"],
            "input": f"{RUN_DIR}/{record.id}/input.jsonl",
            "output": f"{RUN_DIR}/{record.id}/run",
            "deadline": iso(deadline_of(record.created_at, record.completion_window)),
        }
        manifest = {
            "apiVersion": API_VERSION,
            "kind": OfflineJob.KIND,
            "metadata": {
                "name": job_name(record.id),
                "namespace": namespace,
                "labels": {LABEL_BATCH_API: "true"},
                "annotations": {ANNOTATION_BATCH_API: runner_url(self_url, namespace, record.id)},
            },
            "spec": spec,
        }
        try:
            OfflineJob.model_validate(manifest)
        except ValidationError as exc:
            raise ApiError(400, f"ConfigMap {template}: not an OfflineJob spec: {exc}") from exc
        return manifest

    @app.post("/v1/batches")
    def create_batch(request: Request, body: dict[str, Any]) -> dict[str, Any]:
        namespace = user(request, "create")
        input_file_id, endpoint, window, metadata = check_create(body)
        if store.file(namespace, input_file_id) is None:
            raise ApiError(
                404,
                f"no file {input_file_id} in namespace {namespace}",
                param="input_file_id",
                code="not_found",
            )
        record = BatchRecord(
            id=store.new_batch_id(),
            namespace=namespace,
            input_file_id=input_file_id,
            endpoint=endpoint,
            completion_window=window,
            created_at=now(),
            metadata=metadata,
        )
        manifest = job_manifest(record, namespace)
        try:
            kube.create(offlinejobs_path(namespace), manifest)
        except KubeError as exc:
            raise ApiError(
                502 if exc.status in (0, 500) else exc.status, f"creating the OfflineJob: {exc}"
            ) from exc
        # Recorded only once its job exists: a refused create leaves no batch behind.
        store.put_batch(record)
        return show(record)

    @app.get("/v1/batches")
    def list_batches(request: Request, after: str | None = None, limit: int = 20) -> dict[str, Any]:
        namespace = user(request, "get")
        records = {r.id: r for r in store.batches(namespace)}
        ordered = newest_first([{"id": r.id, "created_at": r.created_at} for r in records.values()])
        chosen = page(ordered, after, max(1, min(limit, MAX_LIST)))
        chosen["data"] = [show(records[o["id"]]) for o in chosen["data"]]
        return chosen

    @app.get("/v1/batches/{batch_id}")
    def get_batch(request: Request, batch_id: str) -> dict[str, Any]:
        return show(record_of(user(request, "get"), batch_id))

    @app.post("/v1/batches/{batch_id}/cancel")
    def cancel_batch(request: Request, batch_id: str) -> dict[str, Any]:
        namespace = user(request, "delete")
        record = record_of(namespace, batch_id)
        over = record.finalized_at is not None or record.expired_at is not None
        if record.cancelling_at is None and not over:
            record = store.update_batch(record, cancelling_at=now())
            kube.delete(offlinejobs_path(namespace, job_name(batch_id)))
        return show(record)

    # --- the runner (remote mode) -------------------------------------------------------

    def runner_record(request: Request, namespace: str, batch_id: str) -> BatchRecord:
        auth.runner(request.headers.get("authorization"), namespace)
        return record_of(namespace, batch_id)

    @app.get("/gleaner/v1/namespaces/{namespace}/batches/{batch_id}/input")
    def runner_input(request: Request, namespace: str, batch_id: str) -> StreamingResponse:
        record = runner_record(request, namespace, batch_id)
        return stream(namespace, record.input_file_id)

    async def upload_result(request: Request, namespace: str, batch_id: str, kind: str) -> Any:
        record = await run_in_threadpool(runner_record, request, namespace, batch_id)

        async def chunks_of() -> list[bytes]:
            return [chunk async for chunk in request.stream()]

        chunks = await chunks_of()

        def save() -> dict[str, Any]:
            try:
                saved = store.add_file(
                    namespace, f"{batch_id}_{kind}.jsonl", "batch_output", iter(chunks), now()
                )
            except TooLargeError as exc:
                raise ApiError(413, str(exc)) from exc
            field = "output_file_id" if kind == "output" else "error_file_id"
            store.update_batch(record, **{field: saved.id})
            return file_object(saved)

        return await run_in_threadpool(save)

    @app.put("/gleaner/v1/namespaces/{namespace}/batches/{batch_id}/output")
    async def runner_output(request: Request, namespace: str, batch_id: str) -> Any:
        return await upload_result(request, namespace, batch_id, "output")

    @app.put("/gleaner/v1/namespaces/{namespace}/batches/{batch_id}/errors")
    async def runner_errors(request: Request, namespace: str, batch_id: str) -> Any:
        return await upload_result(request, namespace, batch_id, "errors")

    @app.post("/gleaner/v1/namespaces/{namespace}/batches/{batch_id}/finalize")
    async def runner_finalize(request: Request, namespace: str, batch_id: str) -> Any:
        """Results uploaded: the batch is ``completed`` or, with ``{"expired": true,
        "request_counts": {...}}`` (the runner stopped at the window's end), ``expired``."""
        record = await run_in_threadpool(runner_record, request, namespace, batch_id)
        raw = await request.body()
        try:
            body = json.loads(raw) if raw.strip() else {}
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise ApiError(400, "the finalize body must be a JSON object")
        expired = body.get("expired") is True
        counts = _counts(body.get("request_counts")) if expired else None

        def finalize() -> dict[str, Any]:
            current = record_of(namespace, record.id)
            if current.finalized_at is None:
                changes: dict[str, Any] = {"finalized_at": now()}
                if expired and current.expired_at is None:
                    changes.update(expired_at=now(), counts=counts)
                current = store.update_batch(current, **changes)
            return show(current)

        return await run_in_threadpool(finalize)

    return app


def _counts(value: Any) -> dict[str, int] | None:
    """The runner's ``request_counts`` at expiry: ``{total, completed, failed}``."""
    if not isinstance(value, dict):
        return None
    try:
        counts = {k: int(value[k]) for k in ("total", "completed", "failed")}
    except (KeyError, TypeError, ValueError):
        raise ApiError(400, "request_counts needs total, completed and failed") from None
    if min(counts.values()) < 0:
        raise ApiError(400, "request_counts must not be negative")
    return counts


def expire_due(store: FileStore, kube: SyncKubeClient, now: int) -> list[str]:
    """One tick of the operator's expiry timer: every batch whose window closed is handled
    as :func:`~gleaner.operator.batchapi.objects.expiry_action` says; returns the ids it
    expired. Its job's request counts are kept on the record, then the job is deleted."""
    expired: list[str] = []
    for namespace in store.namespaces():
        for record in store.batches(namespace):
            if now < record.expires_at:
                continue  # the window is open: no call to the API server
            doc = kube.get(offlinejobs_path(namespace, job_name(record.id)))
            job = OfflineJob.model_validate(doc) if doc else None
            if expiry_action(record, job, now) != "expire":
                continue
            store.update_batch(record, expired_at=now, counts=request_counts(job))
            if job is not None:
                kube.delete(offlinejobs_path(namespace, job_name(record.id)))
            expired.append(record.id)
    return expired


def runner_url(self_url: str, namespace: str, batch_id: str) -> str:
    """The URL a runner in remote mode is given for its batch."""
    return f"{self_url.rstrip('/')}/gleaner/v1/namespaces/{namespace}/batches/{batch_id}"
