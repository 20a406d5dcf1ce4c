"""A real ``gleaner agent --backend simulated`` process against a test Kubernetes API."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from gleaner.testing.kube import KubeEmulator
from gleaner.testing.net import free_port


@dataclass(frozen=True)
class SimulatedAgent:
    """A running agent: its metrics/health base URL, process and log file."""

    base: str
    proc: subprocess.Popen[bytes]
    log: Path


@contextlib.contextmanager
def agent_process(
    args: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 30.0,
) -> Iterator[SimulatedAgent]:
    """``python <args>`` (an agent serving HTTP on 127.0.0.1 at a free port, passed to it as
    ``{port}`` in ``args``), output to ``log_path``; yields once ``/healthz`` answers 200;
    stops it (SIGTERM, then SIGKILL) on exit and prints the log, for failing tests."""
    port = free_port()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, *(a.format(port=port) for a in args)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBERNETES_SERVICE_HOST": "", **(env or {})},
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"the agent did not become healthy:\n{log_path.read_text()[-2000:]}"
                )
            time.sleep(0.2)
        yield SimulatedAgent(base=base, proc=proc, log=log_path)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        print(log_path.read_text())


@contextlib.contextmanager
def simulated_agent(
    kube: KubeEmulator,
    workdir: Path,
    node: str,
    gpus: int = 2,
    report_interval: str = "1s",
    ready_timeout: float = 30.0,
) -> Iterator[SimulatedAgent]:
    """Start the agent for ``node`` on the emulator's kubeconfig (:func:`agent_process`)."""
    args = [
        "-m", "gleaner.cli.main", "agent",
        "--backend", "simulated", "--node", node, "--gpus", str(gpus),
        "--metrics-host", "127.0.0.1", "--metrics-port", "{port}",
        "--report-interval", report_interval, "--kubeconfig", str(kube.kubeconfig),
    ]  # fmt: skip
    log_path = workdir / f"agent-{node}.log"
    with agent_process(args, log_path, ready_timeout=ready_timeout) as running:
        yield running
