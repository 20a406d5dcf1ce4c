"""The operator's mutating admission webhook: online Pods get the node shim at creation.

Contract (docs/operator.md, "Webhook"):

- ``review_response(review)`` (pure) answers one ``admission.k8s.io/v1`` AdmissionReview
  with the decision of ``gleaner.operator.injection.online_pod_mutation``: allowed with a
  base64 JSON Patch, allowed unchanged, or refused (403 and a message that says what to fix).
  A review it cannot read (not a Pod, no object) is refused too: the webhook is only
  registered for the Pods that opted in, and those must never be admitted uninstrumented.
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

from gleaner.operator.injection import online_pod_mutation
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
"""Path of the mutating webhook (the chart's MutatingWebhookConfiguration points here)."""
ADMISSION_API: Final = "admission.k8s.io/v1"


def _refused(uid: str, message: str) -> dict[str, Any]:
    return {"uid": uid, "allowed": False, "status": {"code": 403, "message": message}}


def review_response(review: Mapping[str, Any]) -> dict[str, Any]:
    """The AdmissionReview answering ``review`` (see the module docstring)."""
    request: Mapping[str, Any] = review.get("request") or {}
    uid = str(request.get("uid") or "")
    kind: Mapping[str, Any] = request.get("kind") or {}
    pod = request.get("object")
    if kind.get("kind") != "Pod" or not isinstance(pod, Mapping):
        response = _refused(uid, "Gleaner's online-Pod webhook received something not a Pod")
    else:
        mutation = online_pod_mutation(pod)
        meta: Mapping[str, Any] = pod.get("metadata") or {}
        where = f"{request.get('namespace')}/{meta.get('name') or meta.get('generateName') or '?'}"
        logger.info("pod %s: %s", where, mutation.reason)
        if mutation.refusal is not None:
            response = _refused(uid, mutation.refusal)
        else:
            response = {"uid": uid, "allowed": True}
            if mutation.patch:
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(mutation.patch).encode()).decode()
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
