"""``gleaner place --prometheus`` against a real Prometheus server with backfilled DCGM history.

Two nodes export only NVIDIA DCGM metrics (the what-if fallback): ``gpu-b`` is 30% busy
(P_compute 0.7), ``gpu-c`` 80% (0.2). A 1-GPU job with SLA 0.5 must land on ``gpu-b``; a
second one finds no other GPU good enough and is explained.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gleaner.cli.main import main
from gleaner.testing.prometheus import PrometheusServer, Series

T_END = 1_700_003_600.0
TIMES = T_END - 3600 + 15.0 * np.arange(241)

JOB = """apiVersion: gleaner.dev/v1alpha1
kind: OfflineJob
metadata: {{name: {name}, namespace: team}}
spec:
  template: {{spec: {{containers: [{{name: w, image: busybox}}]}}}}
  gpus: 1
  throughputSLA: 0.5
  profile:
    standaloneTokensPerSecond: 1000
    requiredMemoryGiB: 30
    memoryCurve: [{{memoryGiB: 10, tokensPerSecond: 200}}, {{memoryGiB: 30, tokensPerSecond: 1000}}]
"""


def _gauge(value: float) -> list[tuple[float, float]]:
    return [(float(t), value) for t in TIMES]


def _history() -> list[Series]:
    out = []
    for host, util in (("gpu-b", 30.0), ("gpu-c", 80.0)):
        labels = {
            "Hostname": host,
            "gpu": "0",
            "UUID": f"GPU-{host}-0",
            "modelName": "NVIDIA H100 80GB HBM3",
        }
        out += [
            Series("DCGM_FI_DEV_GPU_UTIL", labels, _gauge(util)),
            Series("DCGM_FI_DEV_FB_FREE", labels, _gauge(40960.0)),
            Series("DCGM_FI_DEV_FB_USED", labels, _gauge(40960.0)),
        ]
    return out


def test_place_from_prometheus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(JOB.format(name="first") + "---\n" + JOB.format(name="second"))
    with PrometheusServer(_history()) as prom:
        rc = main(
            [
                "place",
                "--jobs",
                str(jobs),
                "--prometheus",
                prom.url,
                "--window",
                "1h",
                "--at",
                str(T_END),
                "--format",
                "json",
            ]
        )
    out = capsys.readouterr().out
    assert rc == 0, out
    data = json.loads(out)
    (placed,) = data["placements"]
    assert (placed["job"], placed["node"], placed["gpus"]) == ("team/first", "gpu-b", [0])
    assert placed["compute"] == pytest.approx(0.7)
    assert placed["memory"] == pytest.approx(1.0)
    assert data["unschedulable"] == [
        {
            "job": "team/second",
            "reasons": [
                "1 no free GPU",
                "1 predicted throughput below SLA (best 0.20 < 0.50, compute 0.20)",
            ],
        }
    ]
