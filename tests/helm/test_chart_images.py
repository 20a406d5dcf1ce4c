"""Where the chart's workloads get their image, and the agent's priority.

Contract: the image is ``image.registry/image.repository:tag`` (tag defaulting to the
chart's appVersion), ``global.imageRegistry`` replacing ``image.registry`` when set; both
workloads carry ``imagePullSecrets``; the agent DaemonSet runs at ``system-node-critical``
unless ``agent.priorityClassName`` says otherwise. docs/image.md documents these values.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]
ROOT = Path(__file__).resolve().parents[2]
APP_VERSION = yaml.safe_load((ROOT / "helm/gleaner/Chart.yaml").read_text())["appVersion"]


def workloads(render: Render, values: dict[str, Any]) -> dict[str, Manifest]:
    return {m["kind"]: m for m in render(values) if m["kind"] in {"Deployment", "DaemonSet"}}


def images(workload: Manifest) -> set[str]:
    pod = workload["spec"]["template"]["spec"]
    return {c["image"] for c in pod["containers"] + pod.get("initContainers", [])}


def test_image_values_and_the_global_registry(render: Render) -> None:
    default = workloads(render, {})
    for workload in default.values():
        assert images(workload) == {f"docker.io/gleaner/gleaner:{APP_VERSION}"}
    mine = {"image": {"registry": "registry.example.com", "repository": "ml/gleaner", "tag": "1.2"}}
    for workload in workloads(render, mine).values():
        assert images(workload) == {"registry.example.com/ml/gleaner:1.2"}
    mirrored = {**mine, "global": {"imageRegistry": "mirror.internal:5000"}}
    for workload in workloads(render, mirrored).values():
        assert images(workload) == {"mirror.internal:5000/ml/gleaner:1.2"}


def test_pull_secrets_reach_both_workloads(render: Render) -> None:
    values = {"imagePullSecrets": [{"name": "regcred"}]}
    for workload in workloads(render, values).values():
        assert workload["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def test_the_agent_runs_node_critical_by_default(render: Render) -> None:
    agent = workloads(render, {})["DaemonSet"]["spec"]["template"]["spec"]
    assert agent["priorityClassName"] == "system-node-critical"
    custom = workloads(render, {"agent": {"priorityClassName": "gpu-infra"}})
    assert custom["DaemonSet"]["spec"]["template"]["spec"]["priorityClassName"] == "gpu-infra"
    cleared = workloads(render, {"agent": {"priorityClassName": ""}})
    assert "priorityClassName" not in cleared["DaemonSet"]["spec"]["template"]["spec"]


def test_docs_image_names_the_values() -> None:
    text = (ROOT / "docs" / "image.md").read_text()
    for key in (
        "image.registry",
        "image.repository",
        "image.tag",
        "image.digest",
        "global.imageRegistry",
        "imagePullSecrets[0].name",
    ):
        assert key in text, key
