"""``gleaner predict`` end to end on trace files: output formats and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from gleaner.cli.main import main

JOB = """\
apiVersion: gleaner.dev/v1alpha1
kind: OfflineJob
metadata: {name: summarize, namespace: default}
spec:
  gpus: 2
  throughputSLA: 0.3
  template: {spec: {containers: [{name: w, image: vllm}]}}
  PROFILE
"""
INLINE = """profile:
    standaloneTokensPerSecond: 100
    requiredMemoryGiB: 12
    memoryCurve: [{memoryGiB: 4, tokensPerSecond: 20}, {memoryGiB: 12, tokensPerSecond: 100}]
    memoryDeficitCoefficient: 2"""
PROFILE_YAML = """standaloneTokensPerSecond: 100
requiredMemoryGiB: 12
memoryCurve: [{memoryGiB: 4, tokensPerSecond: 20}, {memoryGiB: 12, tokensPerSecond: 100}]
memoryDeficitCoefficient: 2
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    # 4 one-second samples on two GPUs, worked by hand:
    # busy GPU0 1,1,0,0 / GPU1 1,0,0,0 -> compute min(0.5, 0.75) = 0.5, pair 1/2 = 0.5
    # free min(12,8)=8, min(4,12)=4, 12, 12 -> P_memory (70 - 2*3) / 100 = 0.64
    rows = []
    busy = [[1, 1], [1, 0], [0, 0], [0, 0]]
    free = [[12, 8], [4, 12], [12, 12], [12, 12]]
    for t in range(4):
        for g in range(2):
            rows.append((float(t), "n1", g, busy[t][g], free[t][g]))
    trace = tmp_path / "trace.csv"
    pd.DataFrame(
        rows, columns=["timestamp", "node", "gpu", "online_busy", "free_memory_gib"]
    ).to_csv(trace, index=False)
    job = tmp_path / "job.yaml"
    job.write_text(JOB.replace("PROFILE", INLINE))
    ref_job = tmp_path / "ref-job.yaml"
    ref_job.write_text(JOB.replace("PROFILE", "profileFrom: {name: prof, key: p.yaml}"))
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE_YAML)
    configmap = tmp_path / "cm.yaml"
    configmap.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: prof}\ndata:\n  p.yaml: |\n"
        + "".join(f"    {line}\n" for line in PROFILE_YAML.splitlines())
    )
    return {"trace": trace, "job": job, "ref_job": ref_job, "profile": profile, "cm": configmap}


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["predict", *args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_json_output(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        ["--job", str(files["job"]), "--trace", str(files["trace"]), "--node", "n1",
         "--gpus", "0,1", "--format", "json"],
        capsys,
    )  # fmt: skip
    assert rc == 0
    data = json.loads(out)
    assert list(data) == [
        "job", "node", "gpus", "compute", "memory", "multi_gpu",
        "throughput_fraction", "tokens_per_second", "sla", "feasible", "reasons",
    ]  # fmt: skip
    assert data["job"] == "summarize" and data["gpus"] == [0, 1]
    assert data["compute"] == pytest.approx(0.5)
    assert data["memory"] == pytest.approx(0.64)
    assert data["multi_gpu"] == pytest.approx(0.5)
    assert data["throughput_fraction"] == pytest.approx(0.16)
    assert data["tokens_per_second"] == pytest.approx(16.0)
    assert data["feasible"] is False
    assert data["reasons"][0] == "predicted 0.16 < SLA 0.30 (compute 0.50)"


def test_table_output_and_relaxed_admission(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(
        ["--job", str(files["job"]), "--trace", str(files["trace"]), "--node", "n1",
         "--gpus", "0,1", "--min-pair-overlap", "0.5"],
        capsys,
    )  # fmt: skip
    assert rc == 0
    for text in ("compute (P_compute)", "0.500", "0.640", "throughput_fraction", "0.160",
                 "16.0", "feasible", "no", "predicted 0.16 < SLA 0.30"):  # fmt: skip
        assert text in out
    assert "busy overlap" not in out  # 0.5 >= the relaxed threshold


def test_profile_from_configmap_needs_profile_option(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--job", str(files["ref_job"]), "--trace", str(files["trace"]), "--node", "n1",
            "--gpus", "0,1", "--format", "json"]  # fmt: skip
    rc, _, err = run(base, capsys)
    assert rc == 2
    assert err.strip() == (
        "error: job summarize: the profile is in ConfigMap 'prof'; pass it with --profile FILE"
    )
    for profile in (files["profile"], files["cm"]):
        rc, out, _ = run([*base, "--profile", str(profile)], capsys)
        assert rc == 0
        assert json.loads(out)["memory"] == pytest.approx(0.64)


def test_profile_configmap_in_the_same_file_as_the_job(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The ConfigMap and the job in one multi-document manifest (as examples/ keeps them):
    # predict finds the profile there, with or without --profile naming the same file.
    both = tmp_path / "both.yaml"
    both.write_text(files["cm"].read_text() + "---\n" + files["ref_job"].read_text())
    base = ["--job", str(both), "--trace", str(files["trace"]), "--node", "n1",
            "--gpus", "0,1", "--format", "json"]  # fmt: skip
    for extra in ([], ["--profile", str(both)]):
        rc, out, err = run([*base, *extra], capsys)
        assert (rc, err) == (0, "")
        assert json.loads(out)["memory"] == pytest.approx(0.64)


def test_profile_configmap_must_be_the_one_the_job_names(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other-cm.yaml"
    other.write_text(files["cm"].read_text().replace("name: prof", "name: other"))
    both = tmp_path / "both.yaml"
    both.write_text(other.read_text() + "---\n" + files["ref_job"].read_text())
    base = ["--trace", str(files["trace"]), "--node", "n1", "--gpus", "0,1"]
    rc, _, err = run([*base, "--job", str(both)], capsys)
    assert rc == 2
    assert err == (
        "error: job summarize: the profile is in ConfigMap 'prof'; pass it with --profile FILE\n"
    )
    rc, _, err = run([*base, "--job", str(files["ref_job"]), "--profile", str(other)], capsys)
    assert rc == 2
    assert err == (
        f"error: profile {other}: no ConfigMap named 'prof' for job summarize "
        "(ConfigMaps in the file: 'other')\n"
    )


def test_repository_example_with_a_configmap_profile(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = Path(__file__).resolve().parents[2] / "examples/mistral-7b-profile-configmap.yaml"
    trace = tmp_path / "one-gpu.csv"
    pd.DataFrame(
        [(float(t), "n1", 0, t % 2, 40.0) for t in range(10)],
        columns=["timestamp", "node", "gpu", "online_busy", "free_memory_gib"],
    ).to_csv(trace, index=False)
    rc, out, err = run(
        ["--job", str(example), "--trace", str(trace), "--node", "n1", "--gpus", "0",
         "--format", "json"],
        capsys,
    )  # fmt: skip
    assert (rc, err) == (0, "")
    data = json.loads(out)
    # 40 GiB free all the time: curve 6300 of 6800 tokens/s, deficit 8 GiB x 95 = 760.
    assert data["memory"] == pytest.approx((6300 - 8 * 95) / 6800)
    assert data["compute"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--node": "n9"}, "error: unknown node 'n9' (the trace has: n1)"),
        ({"--gpus": "0"}, "error: job summarize runs on 2 GPU(s) but --gpus lists 1"),
        ({"--gpus": "0,5"}, "error: node n1 has no GPU 5 (GPUs: [0, 1])"),
        ({"--gpus": "0,x"}, "error: --gpus must be comma-separated GPU indices, got '0,x'"),
        ({"--window": "soon"}, "error: --window: not a duration: 'soon'"),
        ({"--trace": "BAD_TRACE"}, "column 'free_memory_gib' must be a finite number"),
        ({"--trace": "EMPTY_TRACE"}, "the trace has no samples"),
        ({"--job": "BAD_JOB"}, "error: job "),
        ({"--job": "INVALID_JOB"}, "invalid OfflineJob: spec.throughputSLA"),
        ({"--prometheus": "http://127.0.0.1:1"}, "exactly one of --trace FILE and --prometheus"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, str],
    message: str,
) -> None:
    bad_trace = tmp_path / "bad.csv"
    bad_trace.write_text("timestamp,node,gpu,online_busy,free_memory_gib\n0,n1,0,0,lots\n")
    empty_trace = tmp_path / "empty.csv"
    empty_trace.write_text("timestamp,node,gpu,online_busy,free_memory_gib\n")
    bad_job = tmp_path / "bad.yaml"
    bad_job.write_text("spec: [unclosed\n")
    invalid_job = tmp_path / "invalid.yaml"
    invalid_job.write_text(JOB.replace("PROFILE", INLINE).replace("0.3", "1.7"))
    aliases = {"BAD_TRACE": bad_trace, "EMPTY_TRACE": empty_trace, "BAD_JOB": bad_job,
               "INVALID_JOB": invalid_job}  # fmt: skip
    opts = {"--job": str(files["job"]), "--trace": str(files["trace"]), "--node": "n1",
            "--gpus": "0,1"}  # fmt: skip
    opts.update({k: str(aliases.get(v, v)) for k, v in change.items()})
    rc, out, err = run([x for kv in opts.items() for x in kv], capsys)
    assert rc == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert message in err


def test_installed_entry_point_exit_code(files: dict[str, Path]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gleaner.cli.main", "predict", "--job", str(files["job"]),
         "--trace", str(files["trace"]), "--node", "nope", "--gpus", "0,1"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: unknown node 'nope'")


def test_the_verdict_is_the_schedulers(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A gpuSelector the node cannot match fails here as it fails in the operator's pass.
    job = tmp_path / "selective.yaml"
    job.write_text(
        JOB.replace("PROFILE", INLINE + "\n  gpuSelector: {products: [NVIDIA-H100-80GB-HBM3]}")
    )
    rc, out, _ = run(
        ["--job", str(job), "--trace", str(files["trace"]), "--node", "n1", "--gpus", "0,1",
         "--format", "json", "--min-pair-overlap", "0.5"],
        capsys,
    )  # fmt: skip
    assert rc == 0
    data = json.loads(out)
    assert data["feasible"] is False
    assert data["reasons"] == [
        "predicted 0.16 < SLA 0.30 (compute 0.50)",
        "fewer than 2 GPUs of product NVIDIA-H100-80GB-HBM3 (GPU product not reported)",
    ]
