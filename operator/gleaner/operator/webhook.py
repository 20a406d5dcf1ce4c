"""The operator's mutating admission webhook: online Pods get the node shim, OfflineJobs the
finalizer, at creation.

Contract (docs/operator.md, "Webhook"):

- ``review_response(review)`` (pure) answers one ``admission.k8s.io/v1`` AdmissionReview,
  routed by the request's kind and resource:

  - a Pod: the decision of ``gleaner.operator.injection.online_pod_mutation``: allowed with
    a base64 JSON Patch, allowed unchanged, or refused (403 and a message that says what to
    fix). A Pod review without an object is refused: the webhook is only registered for the
    Pods that opted in, and those must never be admitted uninstrumented;
  - an OfflineJob: the decision of ``gleaner.operator.jobadmission.offline_job_mutation``,
    always allowed (with the finalizer's patch on creation); never refused;
  - anything else: refused (the chart registers the webhook for nothing else).
- ``build_webhook_app()`` serves it at ``POST MUTATE_PATH`` (and ``GET /healthz``).
- ``WebhookServer(cert_file, key_file, host, port)`` runs that app over TLS (its own
  certificate, apart from the plain-HTTP dashboard server) on a daemon thread, and with it
  a :class:`CertificateWatch` that reloads the certificate when its files change (both in
  ``gleaner.operator.tls``, which the Batch API's HTTPS server uses too, and whose contract
  says how a rotated certificate takes effect).

Why not kopf's own admission server: kopf serves webhooks only from the operator that
runs its handlers, while this one must answer from every replica the Service routes to
(standby peers included) and from the first second of the process, before kopf has logged
in; a failure there refuses opted-in Pods (failurePolicy Fail), so it is kept independent
of the controller's state.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from typing import Any, Final

from fastapi import FastAPI, Request

from gleaner.operator.injection import Mutation, online_pod_mutation
from gleaner.operator.jobadmission import is_offline_job, offline_job_mutation
from gleaner.operator.tls import CertificateWatch, TlsServer

__all__ = [
    "ADMISSION_API",
    "MUTATE_PATH",
    "CertificateWatch",
    "WebhookServer",
    "build_webhook_app",
    "review_response",
]

logger = logging.getLogger("gleaner.operator.webhook")

MUTATE_PATH: Final = "/mutate-online-pods"
"""Path of the mutating webhook (every entry of the chart's MutatingWebhookConfiguration
points here, the OfflineJob one too: the review's kind says which decision answers)."""
ADMISSION_API: Final = "admission.k8s.io/v1"


def _refused(uid: str, message: str) -> dict[str, Any]:
    return {"uid": uid, "allowed": False, "status": {"code": 403, "message": message}}


def _answer(uid: str, mutation: Mutation) -> dict[str, Any]:
    if mutation.refusal is not None:
        return _refused(uid, mutation.refusal)
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if mutation.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(mutation.patch).encode()).decode()
    return response


def _where(request: Mapping[str, Any], obj: object) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name") or meta.get("generateName") or request.get("name") or "?"
    return f"{request.get('namespace')}/{name}"


def review_response(review: Mapping[str, Any]) -> dict[str, Any]:
    """The AdmissionReview answering ``review`` (see the module docstring)."""
    request: Mapping[str, Any] = review.get("request") or {}
    uid = str(request.get("uid") or "")
    kind: Mapping[str, Any] = request.get("kind") or {}
    resource: Mapping[str, Any] = request.get("resource") or {}
    obj = request.get("object")
    if is_offline_job(kind, resource):
        mutation = offline_job_mutation(obj, str(request.get("operation") or ""))
        logger.debug("offlinejob %s: %s", _where(request, obj), mutation.reason)
        response = _answer(uid, mutation)
    elif kind.get("kind") == "Pod" and not kind.get("group"):
        if isinstance(obj, Mapping):
            mutation = online_pod_mutation(obj)
            logger.info("pod %s: %s", _where(request, obj), mutation.reason)
            response = _answer(uid, mutation)
        else:
            response = _refused(uid, "Gleaner's webhook received a Pod review without the Pod")
    else:
        response = _refused(
            uid, "Gleaner's webhook answers for Pods and OfflineJobs only, and this is neither"
        )
    return {"apiVersion": ADMISSION_API, "kind": "AdmissionReview", "response": response}


def build_webhook_app() -> FastAPI:
    app = FastAPI(
        title="Gleaner admission webhook", docs_url=None, redoc_url=None, openapi_url=None
    )

    @app.post(MUTATE_PATH)
    async def mutate(request: Request) -> dict[str, Any]:
        try:
            review = json.loads(await request.body())
        except ValueError:
            review = None
        if not isinstance(review, dict):
            return {
                "apiVersion": ADMISSION_API,
                "kind": "AdmissionReview",
                "response": _refused("", "Gleaner's webhook could not read the AdmissionReview"),
            }
        return review_response(review)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


class WebhookServer(TlsServer):
    """uvicorn serving ``build_webhook_app()`` over TLS from a daemon thread, its
    certificate reloaded by a :class:`CertificateWatch` every ``reload_interval_s``."""

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        host: str,
        port: int,
        *,
        reload_interval_s: float = 5.0,
    ) -> None:
        super().__init__(
            build_webhook_app(),
            cert_file,
            key_file,
            host,
            port,
            reload_interval_s=reload_interval_s,
            name="webhook",
        )
