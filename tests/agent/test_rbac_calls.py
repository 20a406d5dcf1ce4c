"""The agent's real API calls are all granted by its declared RBAC rules (AGENT_RULES).

The Helm chart renders the agent's ClusterRole from ``gleaner.agent.rbac.AGENT_RULES``
(tests/helm checks that). This test closes the other side: a real ``gleaner agent
--backend simulated`` process runs against the kmock API emulator through what it does on a
node (list and watch its node's Pods, pick up an offline Pod, create its NodeTrace, then
update its status on later reports), the emulator records each (API group, resource, verb)
the agent's client used, and the test fails on any that no rule grants: on a cluster that
call would be a 403.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from gleaner.agent.rbac import AGENT_RULES
from gleaner.testing.kube import KubeEmulator, ungranted
from gleaner.testing.net import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NODE = "gpu-rbac-1"
AGENT_CLIENT = "OpenAPI-Generator"  # the kubernetes Python client the agent uses
T = TypeVar("T")


def _wait(check: Callable[[], T | None], what: str, timeout: float = 40.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except (httpx.HTTPError, OSError):
            value = None
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _create_pod(kube: KubeEmulator) -> None:
    """Create the offline Pod as a different client, so its calls are not the agent's."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "batch-0",
            "namespace": "team",
            "labels": {"gleaner.dev/role": "offline", "gleaner.dev/job": "batch"},
            "annotations": {"gleaner.dev/gpus": "0"},
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "w", "image": "x"}]},
    }
    request = urllib.request.Request(
        f"{kube.url}/api/v1/namespaces/team/pods",
        method="POST",
        data=json.dumps(pod).encode(),
        headers={"User-Agent": "rbac-test/1.0", "Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).close()


def test_every_agent_call_is_granted_by_agent_rules(tmp_path: Path) -> None:
    with KubeEmulator(tmp_path, namespaces=("default", "team")) as kube:
        port = free_port()
        log_path = tmp_path / "agent.log"
        with log_path.open("wb") as log:
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
                _wait(lambda: httpx.get(f"{base}/healthz").status_code == 200, "healthz")
                _create_pod(kube)
                _wait(
                    lambda: httpx.get(f"{base}/healthz").json()["offline_jobs"].get("0"),
                    "the agent picking up the offline Pod",
                )

                def reported_job() -> bool:
                    for obj in kube.objects("gleaner.dev/v1alpha1/nodetraces"):
                        per_gpu = (obj.get("status") or {}).get("perGPU") or []
                        if any(g.get("offlineJob") == "team/batch" for g in per_gpu):
                            return True
                    return False

                # A report after the Pod appeared is an update of an existing NodeTrace.
                _wait(reported_job, "a NodeTrace status naming the offline job")
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()

        accesses = kube.accesses(AGENT_CLIENT)
        log_tail = log_path.read_text()[-2000:]
        # The recorder saw the agent's work (so an empty result below means something).
        verbs = {(a.resource, a.verb) for a in accesses}
        assert ("pods", "list") in verbs or ("pods", "watch") in verbs, (accesses, log_tail)
        assert any(a.resource.startswith("nodetraces") for a in accesses), (accesses, log_tail)
        assert ungranted(accesses, AGENT_RULES) == [], log_tail
        # And the check bites: without the Pod rule the same calls would be refused.
        without_pods = [r for r in AGENT_RULES if "pods" not in r["resources"]]
        assert ungranted(accesses, without_pods), accesses
