"""``gleaner profile`` against the fake engine (gleaner.testing.vllm_bench): the files it
writes, that the profile they hold is one the API and ``gleaner predict`` accept, and its
one-line errors."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from gleaner.api import Profile
from gleaner.api.contract import LABEL_PROFILE
from gleaner.cli.main import main
from gleaner.cli.profile import EngineSpec, sample_lengths
from gleaner.perfmodel.engine import LLAMA31_8B_H100 as ENGINE
from gleaner.perfmodel.engine_args import job_engine

FAKE = f"{shlex.quote(sys.executable)} -m gleaner.testing.vllm_bench"


def profile_args(out: Path, *extra: str) -> list[str]:
    return [
        "profile",
        "--model=org/fake-8b",
        f"--base-gib={ENGINE.weights_gib}",
        "--kv-max-gib=24",
        "--points=4",
        "--refine=1",
        "--num-prompts=300",
        f"--engine-command={FAKE}",
        f"--out={out}",
        "--no-progress",
        *extra,
    ]


def test_profile_writes_profile_configmap_measurements_and_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(profile_args(out, "--name=fake-h100", "--namespace=batch")) == 0
    stdout = capsys.readouterr().out
    assert "standaloneTokensPerSecond" in stdout and "(not measured)" in stdout
    prof = Profile.model_validate(yaml.safe_load((out / "profile.yaml").read_text()))
    assert len(prof.memory_curve) == 5
    assert prof.memory_curve[0].memory_gi_b == pytest.approx(ENGINE.weights_gib + 0.5, abs=1e-3)
    cm = yaml.safe_load((out / "profile-configmap.yaml").read_text())
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "fake-h100"
    assert cm["metadata"]["namespace"] == "batch"
    assert cm["metadata"]["labels"] == {LABEL_PROFILE: "org-fake-8b"}
    assert Profile.model_validate(yaml.safe_load(cm["data"]["profile.yaml"])) == prof
    runs = json.loads((out / "measurements.json").read_text())
    assert len(runs["runs"]) == 5 and runs["fit"]["deficitMeasured"] is False
    assert "plotly" in (out / "profile.html").read_text()[:100000].lower()


def test_the_profile_feeds_gleaner_predict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The written ConfigMap is a profile `gleaner predict --profile` reads as it is: on an
    idle GPU with 80 GiB free the job runs at its standalone rate."""
    out = tmp_path / "out"
    assert main(profile_args(out, "--name=fake-prof")) == 0
    standalone = yaml.safe_load((out / "profile.yaml").read_text())["standaloneTokensPerSecond"]
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "timestamp,node,gpu,online_busy,free_memory_gib\n"
        + "".join(f"{t}.0,n1,0,0,80\n" for t in range(4))
    )
    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: gleaner.dev/v1alpha1\nkind: OfflineJob\n"
        "metadata: {name: j, namespace: default}\n"
        "spec:\n  gpus: 1\n  throughputSLA: 0.5\n"
        "  template: {spec: {containers: [{name: w, image: vllm}]}}\n"
        "  profileFrom: {name: fake-prof}\n"
    )
    capsys.readouterr()
    args = ["predict", f"--job={job}", f"--trace={trace}", "--node=n1", "--gpus=0"]
    assert main([*args, f"--profile={out / 'profile-configmap.yaml'}", "--format=json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["memory"] == pytest.approx(1.0)
    assert data["tokens_per_second"] == pytest.approx(standalone)


def test_swing_measures_the_deficit_coefficient(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(profile_args(out, "--swing=0.5:0.3")) == 0
    assert "(not measured)" not in capsys.readouterr().out
    prof = yaml.safe_load((out / "profile.yaml").read_text())
    assert prof["memoryDeficitCoefficient"] > 0
    assert json.loads((out / "measurements.json").read_text())["fit"]["deficitMeasured"]


def test_a_failed_engine_run_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(profile_args(tmp_path / "out", "--engine-arg=--fail=CUDA out of memory"))
    assert rc == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: engine run at 0.50 GiB KV failed (exit 1)")
    assert err.endswith("fake engine: CUDA out of memory")
    assert not (tmp_path / "out" / "profile.yaml").exists()


def test_a_missing_engine_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = profile_args(tmp_path / "out", "--engine-command=/no/such/vllm")
    assert main(args) == 1
    assert "cannot start the engine" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra",
    [["--kv-min-gib=30"], ["--base-gib=-1"], ["--swing=2:0.3"], ["--swing=half"]],
)
def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    assert main(profile_args(tmp_path / "out", *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_dataset_sample_sets_the_prompt_and_output_lengths(tmp_path: Path) -> None:
    sample = tmp_path / "sample.jsonl"
    rows = [
        {
            "custom_id": "a",
            "body": {"messages": [{"role": "user", "content": "x" * 400}], "max_tokens": 100},
        },
        {"prompt": "y" * 800, "max_tokens": 300},
        {"body": {"prompt": "z" * 1200}},
    ]
    sample.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    # (400 + 800 + 1200) / 3 / 4 = 200 tokens; (100 + 300 + 128) / 3 = 176.
    assert sample_lengths(sample) == (200, 176)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="no requests"):
        sample_lengths(empty)


def test_engine_argv_is_vllm_bench_throughput() -> None:
    spec = EngineSpec(("vllm",), "m", 512, 128, 1000, 64, extra=("--dtype=bfloat16",))
    argv = spec.argv(2.0, "/tmp/r.json")
    assert argv[:3] == ["vllm", "bench", "throughput"]
    assert "--kv-cache-memory-bytes=2147483648" in argv and "--max-num-seqs=64" in argv
    assert "--max-model-len=640" in argv
    assert argv[-1] == "--dtype=bfloat16"
    assert spec.argv(2.0, "/tmp/r.json", swing="1:0.5")[-1] == "--kv-swing=1:0.5"


def test_from_job_reads_the_jobs_engine_and_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The example job (a ConfigMap and an OfflineJob in one file): its model, its name and
    namespace for the ConfigMap; its --input-file is not readable here, so the prompt set
    stays synthetic."""
    example = Path(__file__).resolve().parents[2] / "examples/mistral-7b-profile-configmap.yaml"
    out = tmp_path / "out"
    args = [a for a in profile_args(out) if not a.startswith("--model")]
    assert main([*args, f"--from-job={example}"]) == 0
    stdout = capsys.readouterr().out
    assert "spec.profileFrom: {name: mistral-7b-ticket-triage-profile}" in stdout
    cm = yaml.safe_load((out / "profile-configmap.yaml").read_text())
    assert cm["metadata"]["name"] == "mistral-7b-ticket-triage-profile"
    assert cm["metadata"]["namespace"] == "batch"
    assert cm["metadata"]["labels"][LABEL_PROFILE] == "mistralai-Mistral-7B-Instruct-v0.3"
    assert "512/128-token prompts" in cm["data"]["profile.yaml"]


def test_job_engine_takes_the_vllm_containers_flags(tmp_path: Path) -> None:
    sample = tmp_path / "in.jsonl"
    sample.write_text(json.dumps({"prompt": "p" * 40, "max_tokens": 7}) + "\n")
    doc = {
        "kind": "OfflineJob",
        "metadata": {"name": "j"},
        "spec": {
            "gpus": 2,
            "template": {"spec": {"containers": [
                {"name": "sidecar", "image": "busybox", "command": ["sleep", "inf"]},
                {"name": "w", "image": "vllm/vllm-openai",
                 "command": ["python3", "-m", "vllm.entrypoints.openai.run_batch"],
                 "args": ["--model", "org/m", "--max-num-seqs=64", "--dtype=bfloat16",
                          "--enforce-eager", f"--input-file={sample}",
                          "--output-file=/o.jsonl"]},
            ]}},
        },
    }  # fmt: skip
    eng = job_engine(doc)
    assert (eng.name, eng.namespace, eng.model, eng.max_num_seqs) == ("j", "default", "org/m", 64)
    assert eng.engine_args == ("--dtype=bfloat16", "--enforce-eager", "--tensor-parallel-size=2")
    assert eng.input_file == str(sample)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    args = [a for a in profile_args(out) if not a.startswith("--model")]
    assert main([*args, f"--from-job={job}"]) == 0
    runs = json.loads((out / "measurements.json").read_text())["runs"]
    # The job's own input file set the lengths: 40 chars / 4 = 10 prompt, 7 output tokens.
    assert "10/7-token prompts" in (out / "profile.yaml").read_text()
    assert all(r["outputTokens"] == 300 * 7 for r in runs)


def test_from_job_without_a_model_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("kind: OfflineJob\nmetadata: {name: j}\nspec:\n  template: {spec: {containers:"
                   " [{name: w, image: i}]}}\n")  # fmt: skip
    args = [a for a in profile_args(tmp_path / "o") if not a.startswith("--model")]
    assert main([*args, f"--from-job={job}"]) == 2
    assert "--model is required" in capsys.readouterr().err
    other = tmp_path / "cm.yaml"
    other.write_text("kind: ConfigMap\n")
    assert main([*args, f"--from-job={other}"]) == 2
    assert "no OfflineJob" in capsys.readouterr().err


def test_an_engine_json_without_the_fields_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "engine.py"
    fake.write_text(
        "import sys\n"
        "out = [a.split('=', 1)[1] for a in sys.argv if a.startswith('--output-json=')][0]\n"
        "open(out, 'w').write('{\"tokens_per_second\": 1}')\n"
    )
    args = profile_args(tmp_path / "out", f"--engine-command={sys.executable} {fake}")
    assert main(args) == 1
    assert "wrote no usable --output-json" in capsys.readouterr().err
