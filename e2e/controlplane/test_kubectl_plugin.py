"""``kubectl gleaner``: the plugin found by the real kubectl, against a real kube-apiserver.

Contract: with the ``gleaner`` package's scripts on PATH, ``kubectl gleaner why JOB`` reads
the OfflineJob (its status written through the status subresource, as the operator does)
and explains it: phase, the placement's predicted factors against the SLA, the eviction and
the node it is kept off; ``--format json`` gives the same lines; a missing job is one
``error:`` line with exit status 2; ``kubectl gleaner evictions`` lists the job's SLA
eviction report ConfigMap (the ``gleaner report evictions`` command).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gleaner.api.contract import eviction_report_data, eviction_report_labels, eviction_report_name
from gleaner.testing.controlplane import ControlPlane

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]

T = "2026-01-01T09:00:00Z"
JOB = "summaries"


def job_manifest(namespace: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "gleaner.dev/v1alpha1",
            "kind": "OfflineJob",
            "metadata": {"name": JOB, "namespace": namespace},
            "spec": {
                "gpus": 1,
                "throughputSLA": 0.5,
                "profile": {
                    "standaloneTokensPerSecond": 100,
                    "requiredMemoryGiB": 12,
                    "memoryCurve": [
                        {"memoryGiB": 4, "tokensPerSecond": 20},
                        {"memoryGiB": 12, "tokensPerSecond": 100},
                    ],
                },
                "template": {"spec": {"containers": [{"name": "w", "image": "vllm"}]}},
            },
        }
    )


STATUS = {
    "status": {
        "phase": "Running",
        "message": "running on gpu-node-7",
        "placement": {
            "node": "gpu-node-7",
            "gpuIndices": [1],
            "compute": 0.8,
            "memory": 0.9,
            "multiGPU": 1.0,
            "throughputFraction": 0.72,
            "decidedAt": T,
        },
        "evictionCount": 1,
        "evictions": [
            {
                "time": "2026-01-01T07:00:00Z",
                "node": "gpu-node-3",
                "gpuIndices": [0],
                "reason": "missed SLA 0.50 in 3 of the last 5 windows",
                "sla": 0.5,
                "predictedThroughputFraction": 0.7,
                "observedThroughputFraction": 0.38,
            }
        ],
        "excludedNodes": ["gpu-node-3"],
    }
}


def report(namespace: str) -> dict[str, object]:
    return {
        "job": f"{namespace}/{JOB}",
        "node": "gpu-node-3",
        "gpus": [0],
        "sla": 0.5,
        "predicted": {"compute": 0.75, "memory": 0.93, "multiGPU": 1.0, "throughputFraction": 0.7},
        "observed": {
            "mean": 0.41,
            "min": 0.36,
            "last": 0.38,
            "windows": 5,
            "windowsMissed": 3,
            "windowSeconds": 600.0,
        },
        "reason": "missed SLA 0.50 in 3 of the last 5 windows",
        "time": 4102444800.0,  # far in the future: always within --since
        "evictionCount": 1,
        "outcome": "requeued",
        "nextAttemptAfter": 4102445100.0,
        "excludedNodes": ["gpu-node-3"],
    }


def test_kubectl_finds_the_plugin_and_it_explains_a_job(
    control_plane: ControlPlane, gleaner_crds: list[str], namespace: str
) -> None:
    scripts = Path(sys.executable).parent
    if not (scripts / "kubectl-gleaner").exists() or shutil.which("kubectl") is None:
        pytest.skip("needs kubectl and the installed kubectl-gleaner script")
    control_plane.kubectl("apply", "-f", "-", input=job_manifest(namespace))
    control_plane.kubectl(
        "patch",
        "offlinejob",
        JOB,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(STATUS),
    )
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": eviction_report_name(JOB, 1),
            "namespace": namespace,
            "labels": eviction_report_labels(JOB),
        },
        "data": eviction_report_data(report(namespace)),
    }
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(configmap))
    env = {
        **os.environ,
        "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(control_plane.admin_kubeconfig),
    }

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        exe = shutil.which("kubectl")
        assert exe is not None
        return subprocess.run(
            [exe, "gleaner", *args], env=env, capture_output=True, text=True, timeout=60
        )

    why = kubectl("why", JOB, "-n", namespace)
    assert why.returncode == 0, why.stderr
    flat = " ".join(why.stdout.split())
    assert "Running" in flat and "gpu-node-7" in flat
    assert "0.72 = compute 0.80 x memory 0.90 x multi-GPU 1.00 >= SLA 0.5" in flat
    assert "missed SLA 0.50 in 3 of the last 5 windows" in flat and "gpu-node-3" in flat

    as_json = kubectl("why", JOB, "-n", namespace, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    lines = {line["label"]: line["text"] for line in json.loads(as_json.stdout)["lines"]}
    assert lines["kept off"] == "gpu-node-3"

    missing = kubectl("why", "nope", "-n", namespace)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f'error: offlinejobs.gleaner.dev "nope" not found in namespace {namespace}'
    ]

    evictions = kubectl("evictions", "-n", namespace, "--format", "json")
    assert evictions.returncode == 0, evictions.stderr
    rows = json.loads(evictions.stdout)
    assert [(r["job"], r["node"], r["configMap"]) for r in rows] == [
        (f"{namespace}/{JOB}", "gpu-node-3", eviction_report_name(JOB, 1))
    ]
