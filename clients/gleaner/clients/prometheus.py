"""The one Prometheus client of Gleaner: instant and range queries (prometheus-api-client).

Contract. :class:`PrometheusClient` answers PromQL with the ``result`` list of Prometheus's
HTTP API (``[{"metric": {...}, "value": [t, v]}]`` for an instant vector, ``"values"`` for
a range): :meth:`~PrometheusClient.query` at a time, :meth:`~PrometheusClient.query_range`
over a window at a step, and :meth:`~PrometheusClient.aquery` for async callers (the same
query in a worker thread, so an event loop never blocks on HTTP). Connection errors and
502/503/504 answers are retried ``retries`` times with backoff; each query carries the
server-side ``timeout``. Every failure, and an answer that is not a list, raises
:class:`PrometheusError` with one line naming the server and the query.

The client is prometheus-api-client's ``PrometheusConnect`` (over ``requests``; ``urllib3``
supplies the retry policy), created on first use and reused.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any


class PrometheusError(RuntimeError):
    """Prometheus could not be queried (one line: the server, the query, the reason)."""


@dataclass
class PrometheusClient:
    """Queries against the Prometheus at ``url`` (see the module docstring)."""

    url: str
    timeout_seconds: float = 30.0
    retries: int = 2
    disable_ssl: bool = True
    _connect: Any = field(default=None, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    def _client(self) -> Any:
        with self._lock:
            if self._connect is None:
                from prometheus_api_client import PrometheusConnect
                from urllib3.util.retry import Retry

                retry = Retry(
                    total=self.retries,
                    backoff_factor=0.2,
                    status_forcelist=[502, 503, 504],
                    allowed_methods=["GET", "POST"],
                )
                self._connect = PrometheusConnect(
                    url=self.url,
                    disable_ssl=self.disable_ssl,
                    retry=retry,
                    timeout=max(1, round(self.timeout_seconds)),
                )
            return self._connect

    def _failed(self, promql: str, exc: BaseException) -> PrometheusError:
        return PrometheusError(f"{self.url}: query {promql!r} failed: {exc}")

    def query(self, promql: str, at: datetime | None = None) -> list[dict[str, Any]]:
        """The result of an instant query at ``at`` (default: the server's now)."""
        params: dict[str, Any] = {"timeout": f"{self.timeout_seconds:g}s"}
        if at is not None:
            params["time"] = at.timestamp()
        try:
            out = self._client().custom_query(promql, params=params)
        except Exception as exc:  # the client raises requests' errors and its own
            raise self._failed(promql, exc) from exc
        if not isinstance(out, list):
            raise self._failed(promql, TypeError(f"unexpected answer {out!r:.80}"))
        return out

    def query_range(
        self, promql: str, start: datetime, end: datetime, step_seconds: float
    ) -> list[dict[str, Any]]:
        """The result of a range query over [start, end] every ``step_seconds``."""
        try:
            out = self._client().custom_query_range(
                promql,
                start_time=start,
                end_time=end,
                step=f"{step_seconds:g}s",
                params={"timeout": f"{self.timeout_seconds:g}s"},
            )
        except Exception as exc:
            raise self._failed(promql, exc) from exc
        if not isinstance(out, list):
            raise self._failed(promql, TypeError(f"unexpected answer {out!r:.80}"))
        return out

    def query_window(
        self, promql: str, end: datetime, window_seconds: float, step_seconds: float
    ) -> list[dict[str, Any]]:
        """:meth:`query_range` over the ``window_seconds`` before ``end``."""
        return self.query_range(promql, end - timedelta(seconds=window_seconds), end, step_seconds)

    async def aquery(self, promql: str, at: datetime | None = None) -> list[dict[str, Any]]:
        """:meth:`query` from a coroutine (in a worker thread)."""
        return await asyncio.to_thread(self.query, promql, at)
