"""HTTPS for the operator's servers, with the certificate reloaded when its files change.

Contract (docs/operator.md, "Webhook"; docs/batch.md, "HTTPS"):

- ``CertificateWatch`` keeps a live ``ssl.SSLContext`` on the current certificate without a
  restart: every ``interval_s`` it compares the files' bytes with the ones it loaded and, on
  a change, loads the new pair into a scratch context first (a half-written or mismatched
  pair never reaches the live one: logged once, retried at the next look) and then into the
  live context, whose new handshakes use it; connections already open keep theirs. This is
  how a rotated Secret (the chart's on upgrade, cert-manager's before expiry) takes effect:
  the kubelet swaps the mounted files atomically (a ``subPath`` mount is never updated).
- ``TlsServer(app, cert_file, key_file, host, port)`` serves an ASGI app over TLS with
  uvicorn on a daemon thread, and runs a ``CertificateWatch`` on its context. A missing or
  unreadable certificate fails at construction, not later in the thread.

Used by the admission webhook (``gleaner.operator.webhook``) and the Batch API.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import threading
from pathlib import Path
from typing import Any, Self

logger = logging.getLogger("gleaner.operator.tls")


class CertificateWatch:
    """See the module docstring."""

    def __init__(
        self,
        context: ssl.SSLContext,
        cert_file: str,
        key_file: str,
        *,
        interval_s: float = 5.0,
        name: str = "webhook",
    ) -> None:
        self.name = name
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
            logger.warning("%s certificate not reloaded (kept the old one): %s", self.name, exc)
            return False
        self._loaded, self._failed = seen, None
        self.reloads += 1
        self.reloaded.set()
        logger.info("%s certificate reloaded from %s", self.name, self.cert_file)
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-cert", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check()


class TlsServer:
    """uvicorn serving ``app`` over TLS from a daemon thread, its certificate reloaded by a
    :class:`CertificateWatch` every ``reload_interval_s``."""

    def __init__(
        self,
        app: Any,
        cert_file: str,
        key_file: str,
        host: str,
        port: int,
        *,
        reload_interval_s: float = 5.0,
        name: str = "tls",
    ) -> None:
        import uvicorn

        config = uvicorn.Config(
            app,
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
            config.ssl, cert_file, key_file, interval_s=reload_interval_s, name=name
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=name, daemon=True)

    @property
    def started(self) -> bool:
        return bool(self.server.started)

    def start(self) -> Self:
        self.thread.start()
        self.certificate.start()
        return self

    def stop(self) -> None:
        self.certificate.stop()
        self.server.should_exit = True
        self.thread.join(timeout=5)
