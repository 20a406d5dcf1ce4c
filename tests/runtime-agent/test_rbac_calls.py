"""The agent's real API calls are all granted by its declared RBAC rules (AGENT_RULES).

The Helm chart renders the agent's ClusterRole from ``gleaner.runtime_agent.rbac.AGENT_RULES``
(tests/helm checks that). This test closes the other side: a real ``gleaner agent
--backend simulated`` process runs against the kmock API emulator through what it does on a
node (list and watch its node's Pods, pick up an offline Pod, create its NodeTrace, then
update its status on later reports), the emulator records each (API group, resource, verb)
the agent's client used, and the test fails on any that no rule grants: on a cluster that
call would be a 403.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from gleaner.runtime_agent.rbac import AGENT_RULES
from gleaner.testing.agent import simulated_agent
from gleaner.testing.kube import KubeEmulator, ungranted, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NODE = "gpu-rbac-1"
AGENT_CLIENT = "gleaner"  # the User-Agent product of gleaner.clients.kube, the agent's client
T = TypeVar("T")


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
        with simulated_agent(kube, tmp_path, NODE) as agent:
            _create_pod(kube)
            wait_for(
                lambda: httpx.get(f"{agent.base}/healthz").json()["offline_jobs"].get("0"),
                timeout=40,
                message="the agent picking up the offline Pod",
            )

            def reported_job() -> bool:
                for obj in kube.objects("gleaner.dev/v1alpha1/nodetraces"):
                    per_gpu = (obj.get("status") or {}).get("perGPU") or []
                    if any(g.get("offlineJob") == "team/batch" for g in per_gpu):
                        return True
                return False

            # A report after the Pod appeared is an update of an existing NodeTrace.
            wait_for(reported_job, timeout=40, message="a NodeTrace status naming the offline job")
        log_tail = agent.log.read_text()[-2000:]

        accesses = kube.accesses(AGENT_CLIENT)
        # The recorder saw the agent's work (so an empty result below means something).
        verbs = {(a.resource, a.verb) for a in accesses}
        assert ("pods", "list") in verbs or ("pods", "watch") in verbs, (accesses, log_tail)
        assert any(a.resource.startswith("nodetraces") for a in accesses), (accesses, log_tail)
        assert ungranted(accesses, AGENT_RULES) == [], log_tail
        # And the check bites: without the Pod rule the same calls would be refused.
        without_pods = [r for r in AGENT_RULES if "pods" not in r["resources"]]
        assert ungranted(accesses, without_pods), accesses
