"""Pure builders: the offline Pod and the eviction-report ConfigMap (no cluster)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gleaner.api import OfflineJob
from gleaner.api.contract import ANNOTATION_GPUS, SHIM_PATH
from gleaner.operator.builders import (
    build_eviction_report_configmap,
    build_offline_pod,
    gpus_of_pod,
    pod_name,
)
from gleaner.testing.fixtures import container_env, make_placement
from gleaner.testing.kube import offlinejob_manifest


def _job(**kwargs: Any) -> OfflineJob:
    manifest = offlinejob_manifest("llama", namespace="team-a", gpus=2, **kwargs)
    manifest["metadata"]["uid"] = "uid-123"
    return OfflineJob.model_validate(manifest)


PLACEMENT = make_placement(
    "gpu-node-7",
    [2, 3],
    uuids=["GPU-aaa", "GPU-bbb"],
    compute=0.8,
    memory=0.9,
    multi_gpu=0.97,
    fraction=0.7,
    decided_at=datetime(2025, 1, 1, tzinfo=UTC),
)


def test_pod_follows_the_binding_contract() -> None:
    pod = build_offline_pod(_job(), PLACEMENT, attempt=2)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "llama-2" == pod_name("llama", 2)
    assert meta["namespace"] == "team-a"
    assert meta["labels"] == {
        "app": "llama",
        "gleaner.dev/job": "llama",
        "gleaner.dev/role": "offline",
        "gleaner.dev/attempt": "2",
    }
    assert meta["annotations"][ANNOTATION_GPUS] == "2,3"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "gleaner.dev/v1alpha1",
            "kind": "OfflineJob",
            "name": "llama",
            "uid": "uid-123",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert spec["nodeName"] == "gpu-node-7"
    assert spec["restartPolicy"] == "Never"
    env = container_env(spec["containers"][0])
    assert env == {
        "MODEL": "test",
        "NVIDIA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb",
        "LD_PRELOAD": SHIM_PATH,
        "GLEANER_ROLE": "offline",
        "GLEANER_SOCKET": "/run/gleaner/agent.sock",
        "GLEANER_JOB": "team-a/llama",
    }
    volumes = {v["name"]: v["hostPath"] for v in spec["volumes"]}
    assert volumes == {
        "gleaner-shim": {"path": "/var/lib/gleaner/lib", "type": "Directory"},
        "gleaner-run": {"path": "/run/gleaner", "type": "DirectoryOrCreate"},
    }
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["gleaner-shim"]["readOnly"] is True
    assert mounts["gleaner-run"]["mountPath"] == "/run/gleaner"


def test_pod_requests_no_gpus_and_keeps_other_resources() -> None:
    pod = build_offline_pod(_job(), PLACEMENT, attempt=0)
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"memory": "16Gi"}}
    assert "nvidia.com/gpu" not in json.dumps(pod)


def test_pod_prepends_the_shim_to_an_existing_ld_preload() -> None:
    job = _job()
    assert job.spec.template is not None
    container = job.spec.template["spec"]["containers"][0]
    container["env"].append({"name": "LD_PRELOAD", "value": "/opt/their.so"})
    container["env"].append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
    env = container_env(build_offline_pod(job, PLACEMENT, 0)["spec"]["containers"][0])
    assert env["LD_PRELOAD"] == f"{SHIM_PATH}:/opt/their.so"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaa,GPU-bbb"


def test_pod_builder_does_not_mutate_the_job() -> None:
    job = _job()
    before = json.dumps(job.spec.template, sort_keys=True)
    build_offline_pod(job, PLACEMENT, 1)
    assert json.dumps(job.spec.template, sort_keys=True) == before


def test_init_containers_get_the_shim_too_and_node_selector_is_dropped() -> None:
    job = _job()
    assert job.spec.template is not None
    job.spec.template["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    job.spec.template["spec"]["nodeSelector"] = {"pool": "gpu"}
    job.spec.template["spec"]["restartPolicy"] = "OnFailure"
    spec = build_offline_pod(job, PLACEMENT, 0)["spec"]
    assert container_env(spec["initContainers"][0])["GLEANER_JOB"] == "team-a/llama"
    assert "nodeSelector" not in spec
    assert spec["restartPolicy"] == "OnFailure"


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [("2,3", ("n", [2, 3])), ("", None), ("x", None)],
)
def test_gpus_of_pod_reads_back_what_the_builder_wrote(
    annotation: str, expected: tuple[str, list[int]] | None
) -> None:
    pod = {"metadata": {"annotations": {ANNOTATION_GPUS: annotation}}, "spec": {"nodeName": "n"}}
    assert gpus_of_pod(pod) == expected
    built = build_offline_pod(_job(), PLACEMENT, 0)
    assert gpus_of_pod(built) == ("gpu-node-7", [2, 3])


def test_eviction_report_configmap() -> None:
    cm = build_eviction_report_configmap("llama", "team-a", 3, {"job": "team-a/llama"})
    assert cm["metadata"]["name"] == "llama-sla-eviction-3"
    assert cm["metadata"]["labels"] == {
        "gleaner.dev/report": "sla-eviction",
        "gleaner.dev/job": "llama",
    }
    assert json.loads(cm["data"]["report.json"]) == {"job": "team-a/llama"}
    assert "ownerReferences" not in cm["metadata"]
