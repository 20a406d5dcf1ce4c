"""A real ``gleaner agent --backend simulated`` process against a test Kubernetes API."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
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
def simulated_agent(
    kube: KubeEmulator,
    workdir: Path,
    node: str,
    gpus: int = 2,
    report_interval: str = "1s",
    ready_timeout: float = 30.0,
) -> Iterator[SimulatedAgent]:
    """Start the agent for ``node`` on the emulator's kubeconfig; wait for /healthz; stop it
    (SIGTERM, then SIGKILL) on exit. The log is printed on exit, for failing tests."""
    port = free_port()
    log_path = workdir / f"agent-{node}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "gleaner.cli.main", "agent",
                "--backend", "simulated", "--node", node, "--gpus", str(gpus),
                "--metrics-host", "127.0.0.1", "--metrics-port", str(port),
                "--report-interval", report_interval, "--kubeconfig", str(kube.kubeconfig),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBERNETES_SERVICE_HOST": ""},
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + ready_timeout
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"agent for {node} did not become healthy:\n{log_path.read_text()[-2000:]}"
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
