"""The test harness itself: kmock's emulator behaves enough like an API server."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes
import pytest
import yaml

from gleaner.testing.kube import (
    KubeApi,
    KubeEmulator,
    nodetrace_manifest,
    parse_label_selector,
    selector_matches,
)


def _pod(name: str, labels: dict[str, str]) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


@pytest.mark.parametrize(
    ("selector", "labels", "ok"),
    [
        ("a=1", {"a": "1"}, True),
        ("a==1,b", {"a": "1"}, False),
        ("a!=1", {}, True),
        ("!a", {"a": "2"}, False),
        ("a in (1, 2),b notin (3)", {"a": "2", "b": "4"}, True),
        ("", {"x": "y"}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], ok: bool) -> None:
    assert selector_matches(parse_label_selector(selector), {"metadata": {"labels": labels}}) is ok


def test_emulator_serves_over_http_like_an_api_server(tmp_path: Path) -> None:
    with KubeEmulator(tmp_path) as kube:
        config = yaml.safe_load(kube.kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"] == kube.url
        api = KubeApi(kube)
        a = api.core.create_namespaced_pod("default", _pod("a", {"x": "1"}))
        api.core.create_namespaced_pod("default", _pod("b", {"x": "2"}))
        assert a.metadata.uid and a.metadata.resource_version and a.metadata.creation_timestamp
        assert [p.metadata.name for p in api.pods(selector="x=1")] == ["a"]
        with pytest.raises(kubernetes.client.ApiException) as err:
            api.core.create_namespaced_pod("default", _pod("a", {}))
        assert err.value.status == 409
        # The status subresource changes only status; the object itself never changes it.
        patched = api.core.patch_namespaced_pod_status(
            "a", "default", {"status": {"phase": "Running"}, "spec": {"nodeName": "evil"}}
        )
        assert patched.status.phase == "Running" and patched.spec.node_name is None
        assert int(patched.metadata.resource_version) > int(a.metadata.resource_version)
        api.core.patch_namespaced_pod("a", "default", {"status": {"phase": "Failed"}})
        assert api.core.read_namespaced_pod("a", "default").status.phase == "Running"
        # A merge patch naming an older resourceVersion is refused (409), as by an API server;
        # the current one is a precondition that holds.
        current = api.core.read_namespaced_pod("a", "default").metadata.resource_version
        with pytest.raises(kubernetes.client.ApiException) as err:
            api.core.patch_namespaced_pod_status(
                "a",
                "default",
                {"metadata": {"resourceVersion": patched.metadata.resource_version}},
            )
        assert err.value.status == 409
        api.core.patch_namespaced_pod_status(
            "a",
            "default",
            {"metadata": {"resourceVersion": current}, "status": {"phase": "Succeeded"}},
        )
        assert api.core.read_namespaced_pod("a", "default").status.phase == "Succeeded"
        event = api.core.create_namespaced_event(
            "default", {"metadata": {"generateName": "ev-"}, "involvedObject": {"name": "a"}}
        )
        assert event.metadata.name.startswith("ev-") and len(event.metadata.name) > 3
        api.apply_nodetrace(nodetrace_manifest("node-1", gpus=1))
        trace = api.custom.get_cluster_custom_object(
            "gleaner.dev", "v1alpha1", "nodetraces", "node-1"
        )
        assert trace["status"]["gpus"][0]["index"] == 0
        assert [o["metadata"]["name"] for o in kube.objects("v1/pods")] == ["a", "b"]
        api.core.delete_namespaced_pod("a", "default")
        assert [p.metadata.name for p in api.pods()] == ["b"]


def test_emulator_serves_nodes_with_labels_cordons_and_a_watch(tmp_path: Path) -> None:
    with KubeEmulator(tmp_path) as kube:
        api = KubeApi(kube)
        api.apply_node("gpu-1", {"pool": "a100", "zone": "z1"})
        api.apply_node("gpu-2", {"pool": "h100"}, unschedulable=True, ready=False)
        nodes = {n.metadata.name: n for n in api.core.list_node().items}
        assert nodes["gpu-1"].metadata.labels == {"pool": "a100", "zone": "z1"}
        assert nodes["gpu-1"].status.conditions[0].status == "True"
        assert nodes["gpu-2"].spec.unschedulable is True
        assert nodes["gpu-2"].status.conditions[0].status == "False"
        # Relabelling replaces the labels (kubectl label --overwrite / label-): "zone" goes.
        api.apply_node("gpu-1", {"pool": "h100"})
        assert api.core.read_node("gpu-1").metadata.labels == {"pool": "h100"}
        assert [n.metadata.name for n in api.core.list_node(label_selector="pool=h100").items] == [
            "gpu-1",
            "gpu-2",
        ]
        # A watch replays the Nodes, then streams the deletion.
        stream = api.core.list_node(watch=True, timeout_seconds=2, _preload_content=False)
        seen: list[tuple[str, str]] = []
        for line in stream:
            event = json.loads(line)
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            if len(seen) == 2:
                api.delete_node("gpu-2")
            if len(seen) == 3:
                break
        stream.release_conn()
        assert sorted(seen[:2]) == [("ADDED", "gpu-1"), ("ADDED", "gpu-2")]
        assert seen[2] == ("DELETED", "gpu-2")
