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
  a :class:`CertificateWatch` that reloads the certificate when its files change.
- ``CertificateWatch`` keeps a live ``ssl.SSLContext`` on the current certificate without a
  restart: every ``interval_s`` it compares the files' bytes with the ones it loaded and, on
  a change, loads the new pair into a scratch context first (a half-written or mismatched
  pair never reaches the live one: logged once, retried at the next look) and then into the
  live context, whose new handshakes use it; connections already open keep theirs. This is
  how a rotated Secret (the chart's on upgrade, cert-manager's before expiry) takes effect:
  the kubelet swaps the mounted files atomically (a ``subPath`` mount is never updated).

Why not kopf's own admission server: kopf serves webhooks only from the operator that
runs its handlers, while this one must answer from every replica the Service routes to
(standby peers included) and from the first second of the process, before kopf has logged
in; a failure there refuses opted-in Pods (failurePolicy Fail), so it is kept independent
of the controller's state.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import ssl
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from fastapi import FastAPI, Request

from gleaner.operator.injection import online_pod_mutation

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


class CertificateWatch:
    """See the module docstring."""

    def __init__(
        self, context: ssl.SSLContext, cert_file: str, key_file: str, *, interval_s: float = 5.0
    ) -> None:
        self.context = context
        self.cert_file = cert_file
        self.key_file = key_file
        self.interval_s = interval_s
        self.reloads = 0
        self.failures = 0
        self.reloaded = threading.Event()
        """Set at every reload (tests clear it to wait for the next)."""
        self._loaded = self._fingerprint()
        self._failed: bytes | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _fingerprint(self) -> bytes | None:
        digest = hashlib.sha256()
        try:
            for name in (self.cert_file, self.key_file):
                digest.update(Path(name).read_bytes())
                digest.update(b"\0")
        except OSError:
            return None  # mid-swap or gone: keep serving the loaded pair
        return digest.digest()

    def check(self) -> bool:
        """Reload when the files changed and the new pair loads; True when it reloaded."""
        seen = self._fingerprint()
        if seen is None or seen in (self._loaded, self._failed):
            return False
        try:
            # A scratch context first: a failed load_cert_chain can leave the live context
            # with the new certificate and the old key.
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                self.cert_file, self.key_file
            )
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            self.failures += 1
            self._failed = seen
            logger.warning("webhook certificate not reloaded (kept the old one): %s", exc)
            return False
        self._loaded, self._failed = seen, None
        self.reloads += 1
        self.reloaded.set()
        logger.info("webhook certificate reloaded from %s", self.cert_file)
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="webhook-cert", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check()


class WebhookServer:
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
        import uvicorn

        config = uvicorn.Config(
            build_webhook_app(),
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            ssl_certfile=cert_file,
            ssl_keyfile=key_file,
        )
        # Load now so that a missing or unreadable certificate fails the operator's start
        # here, not silently in the server's thread.
        config.load()
        assert config.ssl is not None  # a certificate file makes uvicorn build the context
        self.certificate = CertificateWatch(
            config.ssl, cert_file, key_file, interval_s=reload_interval_s
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="webhook", daemon=True)

    @property
    def started(self) -> bool:
        return bool(self.server.started)

    def start(self) -> WebhookServer:
        self.thread.start()
        self.certificate.start()
        return self

    def stop(self) -> None:
        self.certificate.stop()
        self.server.should_exit = True
        self.thread.join(timeout=5)
