"""The Prometheus trace source against a real Prometheus server with backfilled history.

The server is Debian's ``prometheus``, started on loopback by ``gleaner.testing.prometheus``
after ``promtool tsdb create-blocks-from openmetrics`` wrote one hour of history: agent
metrics for node ``gpu-a`` (with a counter reset) and DCGM exporter metrics for ``gpu-b``
(and for ``gpu-a``, which must be ignored there because agent metrics exist).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from gleaner.cli.main import main
from gleaner.operator.sources.prometheus import PrometheusSourceError, PrometheusTraceSource
from gleaner.perfmodel import (
    JobProfile,
    compute_factor,
    memory_factor,
    multi_gpu_factor,
    predict,
)
from gleaner.testing.net import free_port
from gleaner.testing.prometheus import PrometheusServer, Series

T_END = 1_700_003_600.0
STEP = 15.0
TIMES = T_END - 3600 + STEP * np.arange(241)  # inclusive grid, like a range query's
GIB = 2.0**30
PROFILE = JobProfile(100.0, 12.0, (4.0, 12.0), (20.0, 100.0), 2.0)


def counter(per_step: float, reset_at: int | None = None) -> list[tuple[float, float]]:
    values = per_step * np.arange(241)
    if reset_at is not None:  # the agent restarted just after the previous scrape
        values[reset_at:] = per_step * np.arange(1, 242 - reset_at)
    return [(float(t), float(v)) for t, v in zip(TIMES, values, strict=True)]


def gauge(values: np.ndarray) -> list[tuple[float, float]]:
    return [(float(t), float(v)) for t, v in zip(TIMES, values, strict=True)]


MEM_GPU0 = np.where(np.arange(241) % 2 == 0, 10.0, 20.0)
MEM_GPU1 = np.full(241, 16.0)


def history() -> list[Series]:
    node = {"node": "gpu-a"}
    out = [
        Series("gleaner_gpu_online_busy_seconds_total", {**node, "gpu": "0"},
               counter(7.5, reset_at=100), "counter"),
        Series("gleaner_gpu_online_busy_seconds_total", {**node, "gpu": "1"}, counter(3.0),
               "counter"),
        Series("gleaner_gpu_offline_enabled_seconds_total", {**node, "gpu": "0"}, counter(6.0),
               "counter"),
        Series("gleaner_gpu_offline_enabled_seconds_total", {**node, "gpu": "1"},
               counter(12.0), "counter"),
        Series("gleaner_gpu_pair_busy_overlap_seconds_total",
               {**node, "gpu_a": "0", "gpu_b": "1"}, counter(3.0), "counter"),
        Series("gleaner_gpu_pair_busy_union_seconds_total",
               {**node, "gpu_a": "0", "gpu_b": "1"}, counter(7.5), "counter"),
        Series("gleaner_preemptions_total", {**node, "gpu": "0"}, counter(1.0), "counter"),
        Series("gleaner_gpu_harvestable_memory_bytes", {**node, "gpu": "0"},
               gauge(MEM_GPU0 * GIB)),
        Series("gleaner_gpu_harvestable_memory_bytes", {**node, "gpu": "1"},
               gauge(MEM_GPU1 * GIB)),
    ]  # fmt: skip
    for host, util in (("gpu-b", 30.0), ("gpu-a", 90.0)):
        labels = {"Hostname": host, "gpu": "0", "UUID": f"GPU-{host}-0",
                  "modelName": "NVIDIA H100 80GB HBM3"}  # fmt: skip
        out += [
            Series("DCGM_FI_DEV_GPU_UTIL", labels, gauge(np.full(241, util))),
            Series("DCGM_FI_DEV_FB_FREE", labels, gauge(np.full(241, 40960.0))),
            Series("DCGM_FI_DEV_FB_USED", labels, gauge(np.full(241, 40960.0))),
        ]
    return out


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusServer]:
    with PrometheusServer(history()) as server:
        yield server


def source(url: str, **kwargs: object) -> PrometheusTraceSource:
    return PrometheusTraceSource(
        url, window_seconds=3600, step_seconds=STEP,
        end=datetime.fromtimestamp(T_END, UTC), **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def test_agent_metrics(prometheus: PrometheusServer) -> None:
    nodes = source(prometheus.url).load()
    assert sorted(nodes) == ["gpu-a", "gpu-b"]
    a = nodes["gpu-a"]
    assert a.gpu_indices == (0, 1)
    assert a.offline_enabled_seconds is not None
    # Enabled 6 s of every 15 s on GPU 0, 12 of 15 on GPU 1; the reset costs nothing.
    assert compute_factor(a, [0]) == pytest.approx(0.4)
    assert compute_factor(a, [1]) == pytest.approx(0.8)
    assert a.online_busy_seconds[0] / a.window_seconds == pytest.approx(0.5)
    assert multi_gpu_factor(a, [0, 1]) == pytest.approx(0.4)
    assert a.events is not None and int(a.events.preemptions[0]) == round(a.window_seconds / 15)
    # Tightest-GPU memory: min(GPU0, GPU1) at every grid point of the range query.
    expected = PROFILE.memory_factor_of(np.minimum(MEM_GPU0, MEM_GPU1), np.ones(241))
    assert memory_factor(PROFILE, a, [0, 1]) == pytest.approx(expected)
    assert memory_factor(PROFILE, a, [1]) == pytest.approx(1.0)
    pred = predict(PROFILE, 0.3, a, [0, 1])
    assert not pred.feasible
    assert any("busy overlap 0.40 < 0.95" in r for r in pred.reasons)


def test_dcgm_fallback(prometheus: PrometheusServer) -> None:
    b = source(prometheus.url).load()["gpu-b"]
    assert b.offline_enabled_seconds is None
    assert b.gpus[0].uuid == "GPU-gpu-b-0"
    assert b.gpus[0].product == "NVIDIA H100 80GB HBM3"
    assert b.gpus[0].memory_gib == pytest.approx(80.0)
    assert compute_factor(b, [0]) == pytest.approx(0.7)
    assert memory_factor(PROFILE, b, [0]) == pytest.approx(1.0)
    assert source(prometheus.url, dcgm_fallback=False).load().keys() == {"gpu-a"}


def test_window_without_series_and_unreachable_server(prometheus: PrometheusServer) -> None:
    empty = PrometheusTraceSource(
        prometheus.url, window_seconds=600, end=datetime.fromtimestamp(T_END - 86400, UTC)
    )
    with pytest.raises(PrometheusSourceError, match="no agent"):
        empty.load()
    with pytest.raises(PrometheusSourceError, match="failed"):
        PrometheusTraceSource(f"http://127.0.0.1:{free_port()}", retries=0).load()


def test_cli_predict_from_prometheus(
    prometheus: PrometheusServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: gleaner.dev/v1alpha1\nkind: OfflineJob\nmetadata: {name: j}\n"
        "spec:\n  gpus: 1\n  throughputSLA: 0.5\n"
        "  template: {spec: {containers: [{name: w, image: x}]}}\n"
        "  profile: {standaloneTokensPerSecond: 100, requiredMemoryGiB: 12,\n"
        "    memoryCurve: [{memoryGiB: 4, tokensPerSecond: 20},"
        " {memoryGiB: 12, tokensPerSecond: 100}]}\n"
    )
    args = ["predict", "--job", str(job), "--prometheus", prometheus.url, "--gpus", "0",
            "--at", str(T_END), "--window", "1h", "--format", "json"]  # fmt: skip
    assert main([*args, "--node", "gpu-b"]) == 0
    out = capsys.readouterr().out
    assert '"compute": 0.7' in out and '"feasible": true' in out
    assert main([*args, "--node", "gpu-z"]) == 2
    assert "error: unknown node 'gpu-z'" in capsys.readouterr().err
