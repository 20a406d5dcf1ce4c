"""The agent's HTTP server (:class:`gleaner.runtime_agent.http.QuietServer`): it sleeps
between housekeeping ticks, yet exits as soon as it is told to, by the agent or by uvicorn's
own signal handler. Nothing asserts a duration: the housekeeping period is set to a minute, so
a server that noticed the exit only at its next tick would time the test out."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from gleaner.runtime_agent.http import QuietServer
from gleaner.testing.agent import agent_process


class _Sleepy(QuietServer):
    housekeeping_s = 60.0


def _serve_then(stop: Callable[[QuietServer], None]) -> None:
    app = FastAPI()

    @app.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    server = _Sleepy(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        for _ in range(3000):  # uvicorn has no started event
            if server.started:
                break
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"http://127.0.0.1:{port}/ping")
        assert answer.json() == {"ok": True}
        assert answer.headers["date"]  # the housekeeping ran once, at the start
        threading.Thread(target=stop, args=(server,)).start()
        await asyncio.wait_for(task, timeout=30)  # < the 60 s tick: woken, not polled

    # Off the main thread: uvicorn installs (and afterwards re-raises) signal handlers only
    # on the main thread, and a re-raised SIGTERM would end the test run.
    errors: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)

    worker = threading.Thread(target=main)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the server did not exit"
    if errors:
        raise errors[0]


def test_it_exits_when_the_agent_tells_it_from_another_thread() -> None:
    def stop(server: QuietServer) -> None:
        server.should_exit = True

    _serve_then(stop)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_it_exits_from_uvicorns_signal_handler(sig: signal.Signals) -> None:
    def stop(server: QuietServer) -> None:
        server.handle_exit(sig, None)

    _serve_then(stop)


def test_the_agent_process_exits_on_sigterm(tmp_path: Path) -> None:
    """The whole path: the signal delivered to a running agent (nvidia backend, no cluster)
    ends it on its own, not by the SIGKILL that follows a timeout."""
    sockets = tmp_path / "run"
    sockets.mkdir()
    args = ["-m", "gleaner.cli.main", "agent", "--node", "n", "--backend", "nvidia",
            "--gpus", "1", "--no-nvml", "--no-kube", "--socket-dir", str(sockets),
            "--metrics-host", "127.0.0.1", "--metrics-port", "{port}"]  # fmt: skip
    with agent_process(args, tmp_path / "agent.log") as running:
        assert httpx.get(f"{running.base}/healthz", timeout=10).status_code == 200
        running.proc.send_signal(signal.SIGTERM)
        try:
            code = running.proc.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail("the agent did not exit on SIGTERM")
    assert code in (0, -signal.SIGTERM), (code, sys.platform)
