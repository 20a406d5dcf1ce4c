"""``gleaner place`` end to end: manifests and a DESIGN.md trace file in, JSON/table out."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from gleaner.cli.main import main

PROFILE = {
    "standaloneTokensPerSecond": 1000,
    "requiredMemoryGiB": 40,
    "memoryCurve": [
        {"memoryGiB": 10, "tokensPerSecond": 200},
        {"memoryGiB": 40, "tokensPerSecond": 1000},
    ],
    "memoryDeficitCoefficient": 0,
}


def _job(name: str, gpus: int, sla: float, profile: str | None = None) -> str:
    if profile is None:
        prof = f"  profile: {json.dumps(PROFILE)}"
    else:
        prof = f"  profileFrom: {{name: {profile}}}"
    return f"""apiVersion: gleaner.dev/v1alpha1
kind: OfflineJob
metadata: {{name: {name}}}
spec:
  template: {{spec: {{containers: [{{name: w, image: busybox}}]}}}}
  gpus: {gpus}
  throughputSLA: {sla}
{prof}
"""


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """n1: GPUs 0-2 busy together 25% of the time, GPU 3 at other times; n2: two loners."""
    rows = []
    for t in range(40):
        for gpu in range(4):
            busy = (t % 4 == 0) if gpu < 3 else (t % 4 == 2)
            rows.append((float(t), "n1", gpu, float(busy), 60.0))
        for gpu in range(2):
            rows.append((float(t), "n2", gpu, float(t % 2 == gpu), 60.0))
    path = tmp_path / "trace.csv"
    pd.DataFrame(
        rows, columns=["timestamp", "node", "gpu", "online_busy", "free_memory_gib"]
    ).to_csv(path, index=False)
    return path


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    d = tmp_path / "jobs"
    d.mkdir()
    service = "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}]}\n"
    (d / "a.yaml").write_text(
        "\n---\n".join([_job("one", 1, 0.5), service, _job("big", 2, 0.6), _job("huge", 8, 0.1)])
    )
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "prof"},
        "data": {"profile.yaml": json.dumps(PROFILE)},
    }
    (d / "b.yaml").write_text(json.dumps(cm) + "\n---\n" + _job("fromcm", 1, 0.4, "prof"))
    (d / "c.yml").write_text(_job("nocm", 1, 0.4, "missing"))
    (d / "notes.txt").write_text("not a manifest")
    return d


def test_json_output(trace: Path, jobs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["place", "--jobs", str(jobs), "--trace", str(trace), "--format", "json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    data = json.loads(out)
    assert set(data) == {"placements", "unschedulable"}
    placed = {p["job"]: p for p in data["placements"]}
    assert set(placed) == {"default/one", "default/big", "default/fromcm"}
    for p in placed.values():
        assert list(p) == [
            "job",
            "node",
            "gpus",
            "compute",
            "memory",
            "multi_gpu",
            "throughput_fraction",
        ]
    big = placed["default/big"]
    assert big["node"] == "n1" and set(big["gpus"]) <= {0, 1, 2}
    assert big["compute"] == pytest.approx(0.75) and big["multi_gpu"] == pytest.approx(1.0)
    assert big["throughput_fraction"] == pytest.approx(0.75)
    why = {u["job"]: u["reasons"] for u in data["unschedulable"]}
    assert why == {
        "default/huge": ["2 fewer than 8 GPUs on the node"],
        "default/nocm": ["profile ConfigMap default/missing not found in the given files"],
    }


def test_table_output_and_extra_paths(
    trace: Path, jobs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(
        ["place", "--jobs", str(jobs / "a.yaml"), str(jobs / "b.yaml"), "--trace", str(trace)]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "3 placed" in out and "default/fromcm" in out
    assert "0/2 nodes are available: 2 fewer than 8 GPUs on the node." in out


def test_directories_read_their_own_files_unless_recursive(
    trace: Path, jobs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A subdirectory of broken manifests (like examples/invalid/) is left alone, as by
    # `kubectl apply -f DIR`; -R reads it too, and its invalid job is then refused.
    nested = jobs / "invalid"
    nested.mkdir()
    (nested / "x.yaml").write_text(_job("x", 9, 0.5))
    rc = main(["place", "--jobs", str(jobs), "--trace", str(trace), "--format", "json"])
    captured = capsys.readouterr()
    assert (rc, captured.err) == (0, "")
    jobs_seen = {p["job"] for p in json.loads(captured.out)["placements"]}
    assert jobs_seen == {"default/one", "default/big", "default/fromcm"}
    for flag in ("-R", "--recursive"):
        rc = main(["place", "--jobs", str(jobs), flag, "--trace", str(trace)])
        captured = capsys.readouterr()
        assert rc == 2
        assert captured.err.startswith(f"error: {nested / 'x.yaml'}: invalid OfflineJob x:")


def test_repository_examples_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    trace = tmp_path / "t.csv"
    pd.DataFrame(
        [(float(t), "n1", g, 0.0, 70.0) for t in range(4) for g in range(4)],
        columns=["timestamp", "node", "gpu", "online_busy", "free_memory_gib"],
    ).to_csv(trace, index=False)
    # The examples select H100s and a node pool label: a nodes file says what n1 is.
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        "nodes:\n- name: n1\n  labels: {gleaner.dev/pool: h100-serving}\n"
        "  gpuProduct: NVIDIA H100 80GB HBM3\n  gpuMemoryGiB: 80\n"
    )
    args = ["place", "--jobs", str(examples), "--trace", str(trace), "--format", "json"]
    rc = main([*args, "--nodes", str(nodes)])
    captured = capsys.readouterr()
    assert (rc, captured.err) == (0, "")
    data = json.loads(captured.out)
    listed = {p["job"] for p in data["placements"]} | {u["job"] for u in data["unschedulable"]}
    assert listed == {
        "batch/llama-8b-nightly-summaries",
        "batch/mistral-7b-ticket-triage",
        "batch/qwen-32b-eval-sweep",
        "batch/llama-8b-weekly-digest",
    }
    auto_job = "batch/llama-8b-weekly-digest"
    # every example is placeable, but the one whose profile the operator measures on submit
    assert {p["job"] for p in data["placements"]} == listed - {auto_job}

    # Without the nodes file the selectors cannot match, and a note says why in plain words.
    rc = main(args)
    captured = capsys.readouterr()
    assert rc == 0
    unplaced = {u["job"] for u in json.loads(captured.out)["unschedulable"]}
    assert unplaced == {"batch/llama-8b-nightly-summaries", "batch/qwen-32b-eval-sweep", auto_job}
    assert "gives no node labels: give them with --nodes FILE" in captured.err
    assert "add a gpu_product column to the trace or give --nodes FILE" in captured.err
    # Profile on submit: its profile exists only once the operator has measured it.
    (auto,) = [u for u in data["unschedulable"] if u["job"] == "batch/llama-8b-weekly-digest"]
    assert auto["reasons"] == [
        "profile ConfigMap batch/llama-8b-weekly-profile not found in the given files"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "{trace}"], "give the jobs with --jobs"),
        (["--jobs", "{jobs}"], "give exactly one of --trace FILE and --prometheus URL"),
        (
            ["--jobs", "{jobs}", "--trace", "{trace}", "--prometheus", "http://x"],
            "give exactly one of",
        ),
        (["--jobs", "{missing}", "--trace", "{trace}"], "no such file or directory"),
        (["--jobs", "{bad}", "--trace", "{trace}"], "not valid YAML"),
        (["--jobs", "{invalid}", "--trace", "{trace}"], "invalid OfflineJob x: spec.gpus"),
        (["--jobs", "{jobs}", "--trace", "{missing}"], "no such trace file"),
        (["--jobs", "{empty}", "--trace", "{trace}"], "no OfflineJob found"),
        (["--jobs", "{jobs}", "--prometheus", "http://127.0.0.1:9"], "error:"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path,
    trace: Path,
    jobs: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    (tmp_path / "bad.yaml").write_text("a: [1, 2\n")
    (tmp_path / "invalid.yaml").write_text(_job("x", 9, 0.5))
    (tmp_path / "empty.yaml").write_text("kind: Service\nmetadata: {name: s}\n")
    paths = {
        "trace": trace,
        "jobs": jobs,
        "missing": tmp_path / "nope",
        "bad": tmp_path / "bad.yaml",
        "invalid": tmp_path / "invalid.yaml",
        "empty": tmp_path / "empty.yaml",
    }
    argv = ["place", *(a.format(**paths) for a in args)]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
