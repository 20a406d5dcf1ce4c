"""Security posture of the rendered workloads.

The operator runs non-root with a read-only root filesystem, no privilege escalation, no
capabilities and the RuntimeDefault seccomp profile. The agent is never privileged, holds
no capabilities, shares no host namespace, mounts exactly the two contract host paths and
no device node, and requests no nvidia.com/gpu (those GPUs belong to the online pods).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gleaner.api.contract import KUBELET_POD_RESOURCES_DIR

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


def pod_spec(manifests: list[Manifest], kind: str) -> dict[str, Any]:
    workload = next(m for m in manifests if m["kind"] == kind)
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("kind", ["Deployment", "DaemonSet"])
def test_containers_are_locked_down(render: Render, kind: str) -> None:
    pod = pod_spec(render(), kind)
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for key in ("hostPID", "hostIPC", "hostNetwork"):
        assert not pod.get(key, False)
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert not context.get("privileged", False)
        assert "add" not in context["capabilities"]
        assert "limits" in container["resources"] and "requests" in container["resources"]
        assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/tmp"}


def test_operator_runs_as_non_root_without_host_access(render: Render) -> None:
    pod = pod_spec(render(), "Deployment")
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert [v for v in pod["volumes"] if "hostPath" in v] == []
    tmp = next(v for v in pod["volumes"] if v["name"] == "tmp")
    assert "emptyDir" in tmp


def test_agent_host_access_is_the_contract_paths_only(render: Render) -> None:
    pod = pod_spec(render(), "DaemonSet")
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    # The two Gleaner paths, and the kubelet's pod-resources directory (read-only: which
    # pods hold which GPUs, docs/agent.md).
    assert host_paths == {"/run/gleaner", "/var/lib/gleaner/lib", KUBELET_POD_RESOURCES_DIR}
    assert not any(path.startswith("/dev") for path in host_paths)
    container = pod["containers"][0]
    kubelet = next(
        m for m in container["volumeMounts"] if m["mountPath"] == KUBELET_POD_RESOURCES_DIR
    )
    assert kubelet["readOnly"] is True
    assert "volumeDevices" not in container
    requested = {
        **container["resources"].get("requests", {}),
        **container["resources"].get("limits", {}),
    }
    assert not [name for name in requested if name.startswith("nvidia.com/")]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    # NVML (inventory and free memory) sees every GPU without requesting any.
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"


def test_agent_nvml_access_can_be_turned_off(render: Render) -> None:
    pod = pod_spec(render({"agent": {"nvml": {"enabled": False}}}), "DaemonSet")
    names = {e["name"] for e in pod["containers"][0]["env"]}
    assert not names & {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}


def test_agent_pod_resources_access_can_be_turned_off(render: Render) -> None:
    pod = pod_spec(render({"agent": {"podResources": {"enabled": False}}}), "DaemonSet")
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {"/run/gleaner", "/var/lib/gleaner/lib"}
    args = pod["containers"][0]["args"]
    assert args[args.index("--pod-resources-socket") + 1] == ""
    assert args[args.index("--process-match") + 1] == "count"
