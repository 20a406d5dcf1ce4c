"""DCGM metrics pushed into a real Prometheus, range-queried as a user would with ``curl``,
saved, and replayed: the saved file and the live Prometheus source give the same summaries,
and ``gleaner simulate`` replays the file as a cluster's online load.

The server is Debian's ``prometheus`` (``gleaner.testing.prometheus``), backfilled with two
hours of dcgm-exporter series for two nodes of two GPUs each.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from gleaner.cli.main import main
from gleaner.operator.sources.prometheus import PrometheusTraceSource
from gleaner.perfmodel import FileTraceSource
from gleaner.testing.prometheus import PrometheusServer, Series, to_openmetrics

T_END = 1_717_250_400.0  # 2024-06-01T14:00:00Z
STEP = 60.0
HOURS = 2
TIMES = T_END - HOURS * 3600 + STEP * np.arange(HOURS * 60 + 1)
QUERY = '{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_FREE|DCGM_FI_DEV_FB_USED"}'


def _gauge(values: np.ndarray) -> list[tuple[float, float]]:
    return [(float(t), float(v)) for t, v in zip(TIMES, values, strict=True)]


def history() -> list[Series]:
    rng = np.random.default_rng(3)
    out = []
    for node in ("gpu-a", "gpu-b"):
        for gpu in (0, 1):
            labels = {"Hostname": node, "gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}",
                      "modelName": "NVIDIA H100 80GB HBM3", "device": f"nvidia{gpu}"}  # fmt: skip
            util = np.round(rng.uniform(0, 100, TIMES.size))
            free = np.round(81920 - 20480 - 300 * util)
            out += [
                Series("DCGM_FI_DEV_GPU_UTIL", labels, _gauge(util)),
                Series("DCGM_FI_DEV_FB_FREE", labels, _gauge(free)),
                Series("DCGM_FI_DEV_FB_USED", labels, _gauge(81920 - free)),
            ]
    return out


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusServer]:
    with PrometheusServer(history()) as server:
        yield server


def save_range_query(url: str, path: Path) -> Path:
    """What ``curl -G URL/api/v1/query_range --data-urlencode query=... > FILE`` saves."""
    params = urllib.parse.urlencode(
        {"query": QUERY, "start": T_END - HOURS * 3600, "end": T_END, "step": f"{STEP:g}s"}
    )
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=30) as resp:
        path.write_bytes(resp.read())
    return path


def test_saved_answer_equals_the_live_source(prometheus: PrometheusServer, tmp_path: Path) -> None:
    saved = save_range_query(prometheus.url, tmp_path / "dcgm.json")
    from_file = FileTraceSource(saved).load()
    live = PrometheusTraceSource(
        prometheus.url,
        window_seconds=HOURS * 3600,
        step_seconds=STEP,
        end=datetime.fromtimestamp(T_END, UTC),
    ).load()
    assert sorted(from_file) == sorted(live) == ["gpu-a", "gpu-b"]
    for node, f in from_file.items():
        s = live[node]
        assert f.gpus == s.gpus
        assert f.gpus[1].memory_gib == 80.0 and f.gpus[1].uuid == f"GPU-{node}-1"
        assert f.window_seconds == s.window_seconds == (TIMES.size) * STEP
        np.testing.assert_allclose(f.online_busy_seconds, s.online_busy_seconds)
        np.testing.assert_allclose(f.pair_overlap_seconds, s.pair_overlap_seconds)
        np.testing.assert_array_equal(f.memory.levels, s.memory.levels)
        np.testing.assert_allclose(f.memory.seconds, s.memory.seconds)
    # The numbers are the pushed ones, in the trace's units.
    pushed = [s for s in history() if s.name == "DCGM_FI_DEV_GPU_UTIL"]
    busy = sum(v for _, v in pushed[0].samples) / 100 * STEP
    assert from_file["gpu-a"].online_busy_seconds[0] == pytest.approx(busy)


def test_the_openmetrics_text_behind_the_server_reads_the_same(
    prometheus: PrometheusServer, tmp_path: Path
) -> None:
    """The OpenMetrics text promtool backfilled the server from (what ``promtool tsdb
    dump-openmetrics`` gives back), read as a trace file, equals the live range query."""
    dump = tmp_path / "dump.om.txt"
    dump.write_text(to_openmetrics(history()))
    from_dump = FileTraceSource(dump).load()
    from_answer = FileTraceSource(save_range_query(prometheus.url, tmp_path / "a.json")).load()
    assert sorted(from_dump) == sorted(from_answer)
    for node, d in from_dump.items():
        a = from_answer[node]
        assert d.gpus == a.gpus and d.window_seconds == a.window_seconds
        np.testing.assert_allclose(d.online_busy_seconds, a.online_busy_seconds)
        np.testing.assert_array_equal(d.memory.levels, a.memory.levels)


def test_simulate_replays_the_saved_answer(prometheus: PrometheusServer, tmp_path: Path) -> None:
    saved = save_range_query(prometheus.url, tmp_path / "dcgm.json")
    scenario = tmp_path / "cluster.yaml"
    scenario.write_text("name: replay\ncluster: {history_h: 1, jobs: {per_100_gpus: 100}}\n")
    out = tmp_path / "out"
    rc = main(["simulate", "--scenario", str(scenario), "--trace", str(saved),
               "--no-progress", "--format", "json", "--out", str(out)])  # fmt: skip
    assert rc == 0
    cluster = json.loads((out / "results.json").read_text())["cluster"]
    assert (cluster["nodes"], cluster["gpus"], cluster["config"]["step_s"]) == (2, 4, 60)
    util = np.array([[v for _, v in s.samples] for s in history()
                     if s.name == "DCGM_FI_DEV_GPU_UTIL"]) / 100  # fmt: skip
    # The first hour is history; the rest is the run the utilization is measured on.
    expected = util[:, 60:].mean()
    for m in cluster["policies"].values():
        assert m["online_utilization"] == pytest.approx(expected, abs=0.01)
