"""DCGM exporter metrics saved from Prometheus, read as a trace file.

Every file here is written by the test in the formats a user saves: the JSON answer of
``/api/v1/query_range`` (one per metric appended to one file, or one answer for all three
metrics) and the text exposition format with millisecond timestamps (scrapes appended, each
with its ``# HELP``/``# TYPE`` lines).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gleaner.cli.main import main
from gleaner.perfmodel import (
    FileTraceSource,
    TraceFormatError,
    read_trace_frame,
    validate_trace_frame,
)
from gleaner.perfmodel.dcgm import MetricSeries, dcgm_trace_frame

T0 = 1_717_243_200.0  # 2024-06-01T12:00:00Z
STEP = 15.0
N = 9
H100 = "NVIDIA H100 80GB HBM3"

# (node, gpu) -> util % per step; free MiB per step
UTIL: dict[tuple[str, int], list[float]] = {
    ("gpu-a", 0): [0, 10, 20, 30, 40, 50, 60, 70, 80],
    ("gpu-a", 1): [100, 100, 0, 0, 50, 50, 25, 25, 75],
    ("gpu-b", 0): [5, 5, 5, 5, 5, 5, 5, 5, 5],
}
FREE: dict[tuple[str, int], list[float]] = {
    ("gpu-a", 0): [40960, 39936, 38912, 37888, 36864, 35840, 34816, 33792, 32768],
    ("gpu-a", 1): [20480] * N,
    ("gpu-b", 0): [61440] * N,
}


def labels(node: str, gpu: int, **extra: str) -> dict[str, str]:
    return {
        "Hostname": node,
        "gpu": str(gpu),
        "UUID": f"GPU-{node}-{gpu}",
        "modelName": H100,
        "device": f"nvidia{gpu}",
        **extra,
    }


def matrix(metric: str, rows: dict[tuple[str, int], list[float]]) -> list[dict[str, Any]]:
    return [
        {
            "metric": {"__name__": metric, **labels(node, gpu)},
            "values": [[T0 + STEP * i, f"{v:g}"] for i, v in enumerate(values)],
        }
        for (node, gpu), values in rows.items()
    ]


def answer(result: list[dict[str, Any]], result_type: str = "matrix") -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": result_type, "result": result}}


def used() -> dict[tuple[str, int], list[float]]:
    return {k: [81920 - f for f in v] for k, v in FREE.items()}


def write_json(path: Path, answers: list[dict[str, Any]]) -> Path:
    # As `curl ... >> file` leaves it: one answer per query, one after the other.
    path.write_text("\n".join(json.dumps(a) for a in answers) + "\n")
    return path


def three_answers() -> list[dict[str, Any]]:
    return [
        answer(matrix("DCGM_FI_DEV_GPU_UTIL", UTIL)),
        answer(matrix("DCGM_FI_DEV_FB_FREE", FREE)),
        answer(matrix("DCGM_FI_DEV_FB_USED", used())),
    ]


def dcgm_answer(t: np.ndarray, util: dict[tuple[str, int], np.ndarray]) -> dict[str, Any]:
    """One range-query answer holding GPU_UTIL and FB_FREE (free falls as load grows)."""
    result: list[dict[str, Any]] = []
    for (node, gpu), u in util.items():
        for metric, values in (
            ("DCGM_FI_DEV_GPU_UTIL", u),
            ("DCGM_FI_DEV_FB_FREE", 40960 - 100 * u),
        ):
            rows = [[float(a), f"{b:.1f}"] for a, b in zip(t, values, strict=True)]
            result.append({"metric": {"__name__": metric, **labels(node, gpu)}, "values": rows})
    return answer(result)


def exposition_line(metric: str, lab: dict[str, str], value: float, t: float) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in lab.items())
    return f"{metric}{{{inner}}} {value:g} {round(t * 1000)}"


def test_query_range_json_becomes_trace_rows(tmp_path: Path) -> None:
    frame = validate_trace_frame(read_trace_frame(write_json(tmp_path / "dcgm", three_answers())))
    assert len(frame) == 3 * N
    a1 = frame[(frame["node"] == "gpu-a") & (frame["gpu"] == 1)]
    assert a1["online_busy"].tolist() == [v / 100 for v in UTIL[("gpu-a", 1)]]  # percent
    assert a1["free_memory_gib"].tolist() == [20.0] * N  # MiB -> GiB
    assert set(frame["gpu_memory_gib"]) == {80.0}  # free + used
    assert a1["gpu_uuid"].iloc[0] == "GPU-gpu-a-1" and a1["gpu_product"].iloc[0] == H100
    assert frame["timestamp"].min() == T0 and frame["timestamp"].max() == T0 + STEP * (N - 1)


def test_one_answer_for_all_metrics_gives_the_same_summaries(tmp_path: Path) -> None:
    together = answer([r for a in three_answers() for r in a["data"]["result"]])
    one = FileTraceSource(write_json(tmp_path / "one.json", [together])).load()
    three = FileTraceSource(write_json(tmp_path / "three.json", three_answers())).load()
    assert sorted(one) == sorted(three) == ["gpu-a", "gpu-b"]
    for node in one:
        assert np.array_equal(one[node].online_busy_seconds, three[node].online_busy_seconds)
        assert one[node].gpus == three[node].gpus
    a = one["gpu-a"]
    assert a.window_seconds == pytest.approx(N * STEP)
    busy = [sum(UTIL[("gpu-a", g)]) / 100 * STEP for g in (0, 1)]
    assert a.online_busy_seconds.tolist() == pytest.approx(busy)
    assert a.gpus[0].memory_gib == 80.0 and a.gpus[0].uuid == "GPU-gpu-a-0"
    # The memory sketch holds the tightest GPU's free memory over time: GPU 1's 20 GiB.
    assert a.memory.levels.min() * a.memory.step_gib == pytest.approx(20.0)


def test_exposition_scrapes_with_jitter_gaps_and_a_restarted_exporter(tmp_path: Path) -> None:
    """Scrapes appended to one file, each a few ms late; one scrape of gpu-b missing (carried
    forward, as Prometheus would); the exporter Pod restarted halfway (a new `pod` label)."""
    lines: list[str] = []
    for i in range(N):
        t = T0 + STEP * i + 0.004 * (i % 3)
        lines += [
            "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
            "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        ]
        for (node, gpu), util in UTIL.items():
            if node == "gpu-b" and i == 4:
                continue
            lab = labels(node, gpu, pod="dcgm-exporter-1" if i < 5 else "dcgm-exporter-2")
            lines.append(exposition_line("DCGM_FI_DEV_GPU_UTIL", lab, util[i], t))
            lines.append(exposition_line("DCGM_FI_DEV_FB_FREE", lab, FREE[(node, gpu)][i], t))
            used_mib = 81920 - FREE[(node, gpu)][i]
            lines.append(exposition_line("DCGM_FI_DEV_FB_USED", lab, used_mib, t))
    path = tmp_path / "scrapes.prom"
    path.write_text("\n".join(lines) + "\n")
    frame = validate_trace_frame(read_trace_frame(path))
    assert len(frame) == 3 * N  # one series per GPU and metric despite the two pod labels
    b = frame[frame["node"] == "gpu-b"]
    assert b["online_busy"].tolist() == [0.05] * N
    a0 = frame[(frame["node"] == "gpu-a") & (frame["gpu"] == 0)]
    assert a0["online_busy"].tolist() == pytest.approx([v / 100 for v in UTIL[("gpu-a", 0)]])
    summary = FileTraceSource(path).load()["gpu-b"]
    assert summary.gpus[0].product == H100 and summary.gpus[0].memory_gib == 80.0


def test_the_cli_reads_a_saved_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_json(tmp_path / "dcgm.json", three_answers())
    rc = main(
        [
            "predict",
            "--job",
            "examples/mistral-7b-profile-configmap.yaml",
            "--node",
            "gpu-b",
            "--gpus",
            "0",
            "--trace",
            str(path),
            "--format",
            "json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["compute"] == pytest.approx(0.95) and out["memory"] == 1.0


def series(metric: str, node: str | None, gpu: int, times: list[float]) -> MetricSeries:
    lab = {"gpu": str(gpu)} | ({"Hostname": node} if node else {})
    return MetricSeries(metric, lab, np.array(times), np.full(len(times), 10.0))


GRID = [T0 + STEP * i for i in range(N)]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            [
                series("DCGM_FI_DEV_GPU_UTIL", "n1", 0, GRID),
                series("DCGM_FI_DEV_FB_USED", "n1", 0, GRID),
            ],
            r'GPU 0 of node n1 has DCGM_FI_DEV_GPU_UTIL\{Hostname="n1",gpu="0"\} but no '
            "DCGM_FI_DEV_FB_FREE series",
        ),
        (
            [series("DCGM_FI_DEV_GPU_UTIL", None, 0, GRID)],
            r'series DCGM_FI_DEV_GPU_UTIL\{gpu="0"\} has no node label \(Hostname\)',
        ),
        ([series("DCGM_FI_DEV_SM_CLOCK", "n1", 0, GRID)], "no DCGM series"),
    ],
)
def test_unusable_series_are_named(given: list[MetricSeries], message: str) -> None:
    with pytest.raises(TraceFormatError, match=message):
        dcgm_trace_frame(given)


def test_a_gap_longer_than_the_lookback_names_the_series_and_the_time() -> None:
    gap = GRID[:2] + GRID[-1:]  # 12:00:15 .. 12:02:00 missing, 105 s
    given = [
        series("DCGM_FI_DEV_GPU_UTIL", "n1", 0, GRID),
        series("DCGM_FI_DEV_FB_FREE", "n1", 0, gap),
    ]
    frame = dcgm_trace_frame(given)  # within Prometheus' 5 minutes: carried forward
    assert len(frame) == N
    with pytest.raises(TraceFormatError) as err:
        dcgm_trace_frame(given, lookback_seconds=60)
    assert str(err.value) == (
        'series DCGM_FI_DEV_FB_FREE{Hostname="n1",gpu="0"} has no sample from '
        "2024-06-01T12:01:30Z to 2024-06-01T12:01:45Z (a sample stands for 60 s at most): "
        "save a time range every GPU's series covers"
    )
    # A live query drops those times for the node instead.
    assert len(dcgm_trace_frame(given, lookback_seconds=60, on_gap="drop")) == N - 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"status": "success", "data": {"resultType": "vector", "result": []}}',
            "result type 'vector', not 'matrix': save a range query",
        ),
        ('{"status": "error", "error": "parse error"}', "Prometheus answered an error"),
        (
            '{"status": "success", "data": {"resultType": "matrix", "result": '
            '[{"metric": {"gpu": "0"}, "values": [[1, "2"]]}]}}',
            "series 1: no __name__ label",
        ),
        (
            '{"status": "success", "data": {"resultType": "matrix", "result": '
            '[{"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL"}, "values": [[1, "x"]]}]}}',
            r'values must be \[time, "number"\] pairs',
        ),
        ('{"status": "success",\n "data": {', "not valid JSON at line 2"),
        (
            'DCGM_FI_DEV_GPU_UTIL{Hostname="n1",gpu="0"} 30\n',
            r'DCGM_FI_DEV_GPU_UTIL\{Hostname="n1",gpu="0"\}: a sample without a timestamp',
        ),
        ('DCGM_FI_DEV_GPU_UTIL{Hostname="n1",gpu="0" 30 1000\n', "not in the Prometheus text"),
    ],
)
def test_malformed_files_get_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "saved.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError) as err:
        read_trace_frame(path)
    assert re.search(message, str(err.value))
    assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)


def test_simulate_replays_a_saved_answer_at_the_cluster_level(tmp_path: Path) -> None:
    """Four hours of two nodes at a one-minute step: the cluster's online load is the file's."""
    t = T0 + 60.0 * np.arange(240)
    hours = (t - T0) / 3600
    util = {
        ("gpu-a", 0): 50 + 40 * np.sin(hours),
        ("gpu-a", 1): 50 + 40 * np.cos(hours),
        ("gpu-b", 0): np.full(t.size, 90.0),
        ("gpu-b", 1): np.full(t.size, 10.0),
    }
    path = write_json(tmp_path / "dcgm.json", [dcgm_answer(t, util)])
    scenario = tmp_path / "cluster.yaml"
    scenario.write_text("name: replay\ncluster: {history_h: 1, jobs: {per_100_gpus: 100}}\n")
    out = tmp_path / "out"
    rc = main(
        [
            "simulate",
            "--scenario",
            str(scenario),
            "--trace",
            str(path),
            "--no-progress",
            "--format",
            "json",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    cluster = json.loads((out / "results.json").read_text())["cluster"]
    assert cluster["nodes"] == 2 and cluster["gpus"] == 4
    assert cluster["config"]["step_s"] == 60 and cluster["config"]["duration_h"] == 3
    # The online utilization is the file's over the simulated hours (after the history hour).
    run = np.concatenate([u[60:] for u in util.values()]) / 100
    for m in cluster["policies"].values():
        assert m["online_utilization"] == pytest.approx(run.mean(), abs=0.01)


def test_backtest_reads_a_saved_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two days of two nodes, busy by day: the backtest runs on DCGM history alone."""
    t = T0 + 300.0 * np.arange(12 * 48)
    hour = ((t - T0) / 3600 + 12) % 24
    util = {(node, 0): np.where((hour > 8) & (hour < 20), 80.0, 10.0) for node in ("n1", "n2")}
    path = write_json(tmp_path / "two-days.json", [dcgm_answer(t, util)])
    rc = main(["backtest", "--trace", str(path), "--jobs",
               "examples/mistral-7b-profile-configmap.yaml", "--format", "json"])  # fmt: skip
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["origins"] and out["placed"] > 0  # placed on the file's nodes, and judged
    assert 0.0 <= out["attainment"] <= 1.0
