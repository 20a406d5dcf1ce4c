"""The Batch API's servers in the operator: the app over HTTP or HTTPS, and the expiry timer.

Contract (docs/batch.md, "The Batch API"). :class:`BatchApiServer` runs, on daemon
threads of the operator's process,

- the app (:func:`gleaner.operator.batchapi.app.build_batch_app`) over plain HTTP, or over
  HTTPS with ``tls.crt``/``tls.key`` from ``cert_dir`` (``gleaner.operator.tls``: the same
  server and certificate reload as the admission webhook);
- :class:`ExpiryTimer`: every ``interval_s`` one :func:`~gleaner.operator.batchapi.app.expire_due`
  tick, so that a batch past its completion window ends ``expired`` (its job deleted) as
  the OpenAI API's batches do. A failed tick is logged and the next one tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gleaner.clients.kube import SyncKubeClient
from gleaner.operator.batchapi.app import build_batch_app, expire_due
from gleaner.operator.batchapi.files import FileStore
from gleaner.operator.http import HttpServer
from gleaner.operator.tls import TlsServer

logger = logging.getLogger("gleaner.operator.batchapi")


class ExpiryTimer:
    """See the module docstring."""

    def __init__(
        self,
        store: FileStore,
        kube: SyncKubeClient,
        *,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.kube = kube
        self.interval_s = interval_s
        self.clock = clock
        self.expired: list[str] = []
        """Ids this timer expired, oldest first."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="batch-expiry", daemon=True)

    def tick(self) -> list[str]:
        expired = expire_due(self.store, self.kube, int(self.clock()))
        for batch_id in expired:
            logger.info("batch %s expired: its completion window closed", batch_id)
        self.expired.extend(expired)
        return expired

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception:  # a failed look is retried at the next; never kill the thread
                logger.exception("looking for expired batches failed")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


class BatchApiServer:
    """The Batch API's app served (HTTP, or HTTPS with ``cert_dir``) and its expiry timer."""

    def __init__(
        self,
        store: FileStore,
        kube: SyncKubeClient,
        self_url: str,
        host: str,
        port: int,
        *,
        cert_dir: str = "",
        expiry_interval_s: float = 60.0,
        reload_interval_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        app = build_batch_app(store, kube, self_url, clock=clock)
        self.tls: TlsServer | None = None
        self.http: HttpServer | None = None
        if cert_dir:
            self.tls = TlsServer(
                app,
                str(Path(cert_dir) / "tls.crt"),
                str(Path(cert_dir) / "tls.key"),
                host,
                port,
                reload_interval_s=reload_interval_s,
                name="batch-api",
            )
        else:
            self.http = HttpServer(app, host, port)
        self.expiry = ExpiryTimer(store, kube, interval_s=expiry_interval_s, clock=clock)

    @property
    def started(self) -> bool:
        server = (
            self.tls.server if self.tls is not None else self.http.server if self.http else None
        )
        return bool(server is not None and server.started)

    def start(self) -> BatchApiServer:
        if self.tls is not None:
            self.tls.start()
        elif self.http is not None:
            self.http.start()
        self.expiry.start()
        return self

    def stop(self) -> None:
        self.expiry.stop()
        if self.tls is not None:
            self.tls.stop()
        if self.http is not None:
            self.http.stop()
