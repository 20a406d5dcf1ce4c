"""spec.batch: validated like the rest of the API (pydantic and the CRD's CEL alike), and
turned into the engine-and-runner Pod the operator binds like any other."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from gleaner.api import OfflineJob
from gleaner.api.contract import LABEL_JOB
from gleaner.api.schema_validation import validate_object
from gleaner.batch.pod import (
    DATA_DIR,
    ENGINE_CONTAINER,
    PROGRESS_PORT,
    RUNNER_CONTAINER,
    batch_template,
    progress_url,
    template_of,
)
from gleaner.operator.builders import build_offline_pod
from gleaner.testing.fixtures import make_placement
from gleaner.testing.kube import offlinejob_manifest

from .conftest import batch_manifest

PLACEMENT = make_placement(
    "gpu-node-1",
    [0],
    uuids=["GPU-aaa"],
    compute=0.8,
    memory=0.9,
    fraction=0.72,
    decided_at=datetime(2026, 1, 1, tzinfo=UTC),
)


def test_a_batch_job_is_valid_and_a_template_job_still_is() -> None:
    job = OfflineJob.model_validate(batch_manifest(deadline="2026-01-02T00:00:00Z"))
    assert job.spec.batch is not None and job.spec.template is None
    assert job.spec.batch.concurrency == 8
    assert job.spec.batch.deadline == datetime(2026, 1, 2, tzinfo=UTC)
    assert validate_object(batch_manifest()) == []
    assert validate_object(offlinejob_manifest("plain")) == []


@pytest.mark.parametrize("both", [True, False])
def test_exactly_one_of_template_and_batch(both: bool) -> None:
    manifest = batch_manifest()
    if both:
        manifest["spec"]["template"] = offlinejob_manifest("x")["spec"]["template"]
    else:
        del manifest["spec"]["batch"]
    with pytest.raises(ValidationError, match=r"exactly one of spec\.template and spec\.batch"):
        OfflineJob.model_validate(manifest)
    errors = [str(e) for e in validate_object(manifest)]
    assert any("exactly one of spec.template and spec.batch" in e for e in errors), errors


def test_batch_paths_are_relative_to_the_volume() -> None:
    manifest = batch_manifest(input="/etc/passwd")
    with pytest.raises(ValidationError, match="input"):
        OfflineJob.model_validate(manifest)
    assert any("input" in str(e) for e in validate_object(manifest))


def _container(spec: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    return next(c for c in spec[key] if c["name"] == name)


def test_the_pod_runs_the_engine_as_a_sidecar_and_the_runner_as_the_main_container() -> None:
    job = OfflineJob.model_validate(batch_manifest(engineArgs=["--max-model-len", "8192"]))
    pod = build_offline_pod(job, PLACEMENT, 2)
    spec = pod["spec"]
    engine = _container(spec, "initContainers", ENGINE_CONTAINER)
    runner = _container(spec, "containers", RUNNER_CONTAINER)
    assert [c["name"] for c in spec["containers"]] == [RUNNER_CONTAINER]
    assert engine["restartPolicy"] == "Always"  # a sidecar: the Pod ends with the runner
    assert engine["image"] == "vllm/vllm-openai:v0.8.5"
    assert engine["args"][:2] == ["--model", "meta-llama/Llama-3.1-8B-Instruct"]
    assert engine["args"][-2:] == ["--max-model-len", "8192"]
    assert runner["command"] == ["python", "-m", "gleaner.batch.runner"]
    args = runner["args"]
    assert args[args.index("--input") + 1] == f"{DATA_DIR}/jobs/in.jsonl"
    assert args[args.index("--state-dir") + 1] == f"{DATA_DIR}/jobs/run-1"
    assert args[args.index("--progress-port") + 1] == str(PROGRESS_PORT)
    assert spec["volumes"][0] == {
        "name": "batch-data",
        "persistentVolumeClaim": {"claimName": "batch-data"},
    }
    # Bound like any job: node, GPUs on the engine, labels; the same name per attempt.
    assert spec["nodeName"] == "gpu-node-1"
    assert spec["restartPolicy"] == "Never"
    assert pod["metadata"]["name"] == "summaries-2"
    assert pod["metadata"]["labels"][LABEL_JOB] == "summaries"
    env = {e["name"]: e.get("value") for e in engine["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaa"


def test_template_of_prefers_the_jobs_own_template() -> None:
    plain = OfflineJob.model_validate(offlinejob_manifest("plain"))
    assert template_of(plain) is plain.spec.template
    job = OfflineJob.model_validate(batch_manifest())
    assert job.spec.batch is not None
    before = copy.deepcopy(job.model_dump())
    assert template_of(job) == batch_template(job.spec.batch)
    assert job.model_dump() == before


def test_progress_url() -> None:
    assert progress_url({"status": {}}) is None
    assert progress_url({"status": {"podIP": "10.0.0.7"}}) == "http://10.0.0.7:8090/progress"
    assert progress_url({"status": {"podIP": "fd00::7"}}) == "http://[fd00::7]:8090/progress"
