"""``gleaner agent`` as a real process: HTTP endpoints, NodeTrace reports, Pods, bursts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import kubernetes
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gleaner.api import NodeTraceStatus, TraceSource
from gleaner.cli.agent import parse_duration
from gleaner.cli.main import main as cli_main
from gleaner.testing.kube import KubeEmulator

NODE = "sim-node-1"
T = TypeVar("T")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(fn: Callable[[], T | None], timeout: float = 20.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = fn()
        except (httpx.HTTPError, OSError):
            value = None
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[KubeEmulator, str, subprocess.Popen[bytes]]]:
    with KubeEmulator(tmp_path, namespaces=("default", "team")) as kube:
        port = _free_port()
        log = (tmp_path / "agent.log").open("wb")
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "gleaner.cli.main", "agent",
                "--backend", "simulated", "--node", NODE, "--gpus", "2",
                "--metrics-host", "127.0.0.1", "--metrics-port", str(port),
                "--report-interval", "1s", "--kubeconfig", str(kube.kubeconfig),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBERNETES_SERVICE_HOST": ""},
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            _wait(lambda: httpx.get(f"{base}/healthz").status_code == 200, what="healthz")
            yield kube, base, proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
            print((tmp_path / "agent.log").read_text())


def _samples(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{base}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


@pytest.mark.slow
def test_simulated_agent_end_to_end(agent: tuple[KubeEmulator, str, Any]) -> None:
    kube, base, _proc = agent
    health = httpx.get(f"{base}/healthz").json()
    assert health["backend"] == "simulated" and len(health["gpus"]) == 2

    def nodetrace() -> dict[str, Any] | None:
        objs = [o for o in kube.objects("gleaner.dev/v1alpha1/nodetraces") if o.get("status")]
        return objs[0] if objs else None

    obj = _wait(nodetrace, what="a NodeTrace report")
    status = NodeTraceStatus.model_validate(obj["status"])
    assert obj["metadata"]["name"] == NODE
    assert status.source == TraceSource.SIMULATED
    assert [g.uuid for g in status.gpus] == health["gpus"]

    # An offline Pod bound to this node is picked up from its labels and annotation.
    core: Any = kubernetes.client.CoreV1Api(kube.api_client())
    core.create_namespaced_pod(
        "team",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "llm-batch-0",
                "namespace": "team",
                "labels": {"gleaner.dev/role": "offline", "gleaner.dev/job": "llm-batch"},
                "annotations": {"gleaner.dev/gpus": "0,1"},
            },
            "spec": {"nodeName": NODE, "containers": [{"name": "w", "image": "x"}]},
        },
    )
    _wait(
        lambda: httpx.get(f"{base}/healthz").json()["offline_jobs"] == {"0": "team/llm-batch",
                                                                        "1": "team/llm-batch"},
        what="the offline job",
    )  # fmt: skip
    key = (
        "gleaner_offline_job_timeslice_seconds_total",
        (("job", "llm-batch"), ("namespace", "team"), ("node", NODE)),
    )
    _wait(lambda: _samples(base).get(key, 0.0) > 0, what="job timeslices")

    # An injected burst closes both gates for its duration.
    r = httpx.post(f"{base}/simulate/burst", params={"gpus": "0,1", "seconds": 30, "busy": 1.0})
    assert r.status_code == 200, r.text
    gates = httpx.get(f"{base}/healthz").json()["gates"]
    assert gates == {"0": False, "1": False}
    before = _samples(base)[key]
    time.sleep(1.0)
    assert _samples(base)[key] == before  # no timeslices during the burst
    bad = httpx.post(f"{base}/simulate/burst", params={"gpus": "7", "seconds": 1})
    assert bad.status_code == 400 and "GPU 7" in bad.json()["detail"]

    def reported_job() -> bool:
        obj = nodetrace()
        if obj is None:
            return False
        st = NodeTraceStatus.model_validate(obj["status"])
        return st.offline_jobs == 1 and st.per_gpu[0].offline_job == "team/llm-batch"

    _wait(reported_job, what="the job in the NodeTrace")


def test_cli_rejects_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["agent", "--backend", "simulated", "--node", "n", "--report-interval",
                     "soon", "--no-kube"]) == 2  # fmt: skip
    assert "bad duration" in capsys.readouterr().err
    assert cli_main(["agent", "--backend", "nvidia", "--node", "n", "--trace", "x.csv"]) == 2
    assert "--trace needs" in capsys.readouterr().err
    assert cli_main(["agent", "--backend", "gpu", "--node", "n"]) == 2


def test_parse_duration() -> None:
    assert parse_duration("15s") == 15.0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("2m") == 120.0
    assert parse_duration("3") == 3.0
    with pytest.raises(ValueError):
        parse_duration("0s")
