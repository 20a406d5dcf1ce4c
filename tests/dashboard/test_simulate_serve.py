"""``gleaner simulate --serve``: a new user sees the dashboard on simulated data, no cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gleaner.testing.net import free_port


@pytest.mark.slow
def test_simulate_serve_shows_the_simulated_cluster(tmp_path: Path) -> None:
    port = free_port()
    log = (tmp_path / "simulate.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gleaner.cli.main",
            "simulate",
            "--quick",
            "--no-progress",
            "--format",
            "json",
            "--out",
            str(tmp_path / "out"),
            "--serve",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        cluster = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                resp = httpx.get(f"http://127.0.0.1:{port}/api/cluster", timeout=2)
            except httpx.TransportError:
                time.sleep(0.5)
                continue
            if resp.status_code == 200:
                cluster = resp.json()
                break
            time.sleep(0.5)
        assert cluster is not None, (tmp_path / "simulate.log").read_text()[-2000:]
        assert cluster["source"] == "simulation"
        nodes = httpx.get(f"http://127.0.0.1:{port}/api/nodes", timeout=5).json()
        assert len(nodes) > 0
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
        assert page.status_code == 200
        assert "<svg" in page.text
        assert (tmp_path / "out" / "report.html").is_file()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
        log.close()
    # The URL is printed once.
    assert (tmp_path / "simulate.log").read_text().count(f"http://127.0.0.1:{port}/") == 1


def test_serve_refuses_a_scenario_without_a_cluster() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gleaner.cli.main",
            "simulate",
            "--scenario",
            "node-only",
            "--serve",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--serve needs a scenario with a 'cluster' section" in proc.stderr
