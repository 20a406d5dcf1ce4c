"""The agent's HTTP face on the metrics port (FastAPI): /metrics, /healthz, /simulate/burst.

Contract. :func:`build_app` serves, for one :class:`AgentFace` (what the HTTP face needs of
:class:`~gleaner.runtime_agent.daemon.AgentDaemon`, as a protocol, so that this module does not
import the daemon that imports it):

- ``GET /metrics`` — the agent's own registry (:mod:`gleaner.runtime_agent.metrics`) in the
  Prometheus text format;
- ``GET /healthz`` — JSON: node, backend, GPU UUIDs, gate states, offline jobs, report counts;
- ``POST /simulate/burst?gpus=0,1&seconds=60&busy=1.0`` — simulated backend only: make those
  GPUs' online side busy for ``seconds`` at duty cycle ``busy``; 400 with a one-line
  ``detail`` on bad input, 409 for the nvidia backend.

Handlers are ``async`` so they run on the loop thread that owns the agent's state.
:class:`QuietServer` serves the app with uvicorn waking once a second instead of ten times.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import uvicorn
from fastapi import FastAPI, HTTPException, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.metrics import build_registry


class _Options(Protocol):
    @property
    def node(self) -> str: ...


class AgentFace(Protocol):
    """The daemon as the HTTP handlers see it."""

    @property
    def options(self) -> _Options: ...

    @property
    def agent(self) -> NodeAgent: ...

    @property
    def sim(self) -> object | None:
        """The simulated node, None for the nvidia backend (bursts need one)."""
        ...

    def refresh(self) -> NodeAgent: ...

    def extra_metrics(self) -> Iterator[Any]: ...

    def health(self) -> dict[str, Any]: ...

    def burst(self, gpus: list[int], seconds: float, busy: float) -> None: ...


def parse_gpus(text: str, known: list[int]) -> list[int]:
    """``"0,1"`` → [0, 1], every index known; raises ValueError with a one-line message."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ValueError(f"bad GPU index {part!r} in {text!r}")
        g = int(part)
        if g not in known:
            raise ValueError(f"GPU {g} is not on this node (GPUs {known})")
        out.append(g)
    if not out:
        raise ValueError("no GPUs given")
    return sorted(set(out))


def build_app(daemon: AgentFace) -> FastAPI:
    app = FastAPI(title="gleaner agent", docs_url=None, redoc_url=None, openapi_url=None)
    registry = build_registry(daemon.refresh, daemon.extra_metrics)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return daemon.health()

    @app.post("/simulate/burst")
    async def burst(
        gpus: str = Query(..., description="Comma-separated GPU indices."),
        seconds: float = Query(60.0, gt=0, le=86400),
        busy: float = Query(1.0, gt=0, le=1),
    ) -> dict[str, Any]:
        if daemon.sim is None:
            raise HTTPException(409, "bursts exist only in the simulated backend")
        try:
            indices = parse_gpus(gpus, daemon.agent.gpus)
            daemon.burst(indices, seconds, busy)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from exc
        return {"node": daemon.options.node, "gpus": indices, "seconds": seconds, "busy": busy}

    return app


HOUSEKEEPING_S = 1.0
"""How often :class:`QuietServer` does uvicorn's housekeeping (the Date header)."""


class QuietServer(uvicorn.Server):
    """uvicorn's server without its tenth-of-a-second tick.

    uvicorn's main loop wakes every 0.1 s to see whether it should exit and, every tenth
    time, to refresh its Date header. On a GPU node the agent's loop shares the CPUs with the
    gate's native loop, and each wakeup costs it a thread switch: this one sleeps until it is
    told to exit (:attr:`should_exit` set, by the agent or by uvicorn's own SIGINT/SIGTERM
    handler) or for :attr:`housekeeping_s`, whichever comes first.
    """

    housekeeping_s: float = HOUSEKEEPING_S
    _wake: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _exit = False

    @property  # uvicorn's is a plain attribute, set by uvicorn itself too
    def should_exit(self) -> bool:
        return self._exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._exit = value
        if value and self._loop is not None and self._wake is not None:
            # From a signal handler or another thread too: wake the loop, do not touch it.
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing waits
                self._loop.call_soon_threadsafe(self._wake.set)

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = wake = asyncio.Event()
        wait_s = self.housekeeping_s
        ticks_per_wait = max(1, round(wait_s / 0.1))  # uvicorn counts tenths of a second
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + ticks_per_wait) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), wait_s)
