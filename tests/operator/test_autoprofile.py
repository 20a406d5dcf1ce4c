"""Profile on submit, the pure part: runs from Pods, the next step, the Pods and the status.

The runs are played the way the kubelet would report them: each profiling Pod's engine
command goes to the fake ``vllm bench throughput`` (``gleaner.testing.vllm_bench``) and its
JSON becomes the container's termination message.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from gleaner.api import ConditionType, OfflineJob, OfflineJobStatus, Profile
from gleaner.api.common import find_condition
from gleaner.api.contract import (
    ANNOTATION_PROFILE_GPU_TIME,
    ANNOTATION_PROFILE_IMAGE,
    LABEL_JOB,
    LABEL_PROFILING_RUN,
)
from gleaner.operator.autoprofile import (
    ACCOUNTING_GRACE_S,
    TERMINATION_LOG,
    Fail,
    Launch,
    ProfilingRun,
    RunAccounting,
    Store,
    Wait,
    build_profile_configmap,
    build_profiling_pod,
    count_window,
    measured_how,
    next_step,
    on_pool,
    profiled,
    profiling,
    profiling_failed,
    profiling_started,
    provisional_profile,
    runs_of,
)
from gleaner.operator.config import ProfilingPool
from gleaner.operator.observation import ObservedWindow, observe_from_nodetrace
from gleaner.operator.validation import InvalidJob, NeedsProfile, ValidJob, validate_job
from gleaner.perfmodel.engine import GIB
from gleaner.perfmodel.profiling import GpuTime, Measurement, fit_profile, profile_document
from gleaner.testing.fixtures import make_placement
from gleaner.testing.kube import nodetrace_manifest, offlinejob_manifest
from gleaner.testing.vllm_bench import result_json

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PLACEMENT = make_placement("gpu-node-1", [0], uuids=["GPU-aaa"], decided_at=NOW)
MEASUREMENT = {
    "command": ["python", "-m", "gleaner.testing.vllm_bench"],
    "kvMinGiB": 0.5,
    "kvMaxGiB": 8.0,
    "baseGiB": 16.0,
    "runs": 5,
    "refine": 2,
    "inputLen": 256,
    "outputLen": 64,
    "numPrompts": 200,
}


def auto_job(
    name: str = "summarize", model: str | None = "meta-llama/Llama-3.1-8B"
) -> dict[str, Any]:
    body = offlinejob_manifest(name, profile_from=f"{name}-profile")
    body["metadata"]["uid"] = "uid-1"
    body["spec"]["profileFrom"].update({"auto": True, "measurement": dict(MEASUREMENT)})
    worker = body["spec"]["template"]["spec"]["containers"][0]
    worker["command"] = ["python", "-m", "vllm.entrypoints.openai.run_batch"]
    worker["args"] = ["--input-file=/data/in.jsonl", "--dtype=bfloat16"]
    if model:
        worker["args"].append(f"--model={model}")
    sidecar = {"name": "uploader", "image": "busybox", "command": ["sleep", "inf"]}
    body["spec"]["template"]["spec"]["containers"].append(sidecar)
    return body


def _job(body: dict[str, Any]) -> OfflineJob:
    verdict = validate_job(body)
    assert isinstance(verdict, NeedsProfile), verdict
    return verdict.job


def _finish(
    pod: dict[str, Any],
    ok: bool = True,
    message: str | None = None,
    span: tuple[datetime, datetime] | None = None,
) -> dict[str, Any]:
    """Play the kubelet: run the Pod's command on the fake engine, report it terminated
    (``span``: when the container started and finished)."""
    container = pod["spec"]["containers"][0]
    if message is None:
        message = result_json(container["command"][3:])
    times = {} if span is None else {"startedAt": _iso(span[0]), "finishedAt": _iso(span[1])}
    pod["status"] = {
        "phase": "Succeeded" if ok else "Failed",
        "containerStatuses": [
            {
                "name": container["name"],
                "state": {
                    "terminated": {
                        "exitCode": 0 if ok else 1,
                        "reason": "Completed" if ok else "Error",
                        "message": message,
                        **times,
                    }
                },
            }
        ],
    }
    return pod


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _settings(job: OfflineJob) -> Any:
    assert job.spec.profile_from is not None
    return job.spec.profile_from.measurement


def test_validation_auto_missing_configmap_needs_a_profile() -> None:
    verdict = validate_job(auto_job())
    assert isinstance(verdict, NeedsProfile)
    assert "default/summarize-profile not found" in verdict.message
    # Without auto a missing ConfigMap stays an error, as before.
    plain = offlinejob_manifest("a", profile_from="p")
    assert isinstance(validate_job(plain), InvalidJob)


def test_validation_auto_with_the_configmap_uses_it() -> None:
    doc = {
        "standaloneTokensPerSecond": 900,
        "requiredMemoryGiB": 20,
        "memoryCurve": [
            {"memoryGiB": 17, "tokensPerSecond": 300},
            {"memoryGiB": 24, "tokensPerSecond": 900},
        ],
    }
    verdict = validate_job(auto_job(), {"data": {"profile.yaml": yaml.safe_dump(doc)}})
    assert isinstance(verdict, ValidJob)
    assert verdict.profile.standalone_tokens_per_second == 900


def test_validation_auto_without_a_model_is_invalid() -> None:
    verdict = validate_job(auto_job(model=None))
    assert isinstance(verdict, InvalidJob)
    assert verdict.message.startswith("spec.profileFrom.auto: spec.template")
    assert "--model" in verdict.message


def test_measurement_kv_range_is_checked() -> None:
    body = auto_job()
    body["spec"]["profileFrom"]["measurement"]["kvMinGiB"] = 9.0
    verdict = validate_job(body)
    assert isinstance(verdict, InvalidJob)
    assert "kvMinGiB must be less than kvMaxGiB" in verdict.message


def test_profiling_pod_is_the_jobs_offline_pod_running_the_benchmark() -> None:
    job = _job(auto_job())
    pod = build_profiling_pod(job, PLACEMENT, 2, Launch(3, 1.5, 7), _settings(job))
    meta = pod["metadata"]
    assert meta["name"] == "summarize-profile-2-3"
    assert meta["labels"][LABEL_PROFILING_RUN] == "2-3"
    assert meta["labels"][LABEL_JOB] == "summarize"
    assert meta["ownerReferences"][0]["uid"] == "uid-1"
    spec = pod["spec"]
    assert spec["nodeName"] == "gpu-node-1"
    assert [c["name"] for c in spec["containers"]] == ["worker"]  # the sidecar is dropped
    worker = spec["containers"][0]
    cmd = worker["command"]
    assert cmd[:5] == ["python", "-m", "gleaner.testing.vllm_bench", "bench", "throughput"]
    assert "--model=meta-llama/Llama-3.1-8B" in cmd
    assert f"--kv-cache-memory-bytes={int(1.5 * GIB)}" in cmd
    assert f"--output-json={TERMINATION_LOG}" in cmd
    assert "--dtype=bfloat16" in cmd  # the job's throughput flags pass through
    assert not any("input-file" in w for w in cmd)
    assert "args" not in worker
    assert worker["terminationMessagePolicy"] == "FallbackToLogsOnError"
    env = {e["name"]: e.get("value") for e in worker["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaa"  # bound like any offline Pod


def test_the_loop_runs_the_budgets_then_stores_the_same_fit_as_gleaner_profile() -> None:
    job = _job(auto_job())
    settings = _settings(job)
    pods: list[dict[str, Any]] = []
    step = next_step(settings, runs_of(pods, "summarize", 0), NOW)
    launched: list[float] = []
    while isinstance(step, Launch):
        assert step.index == len(pods) and step.total == 7
        launched.append(step.kv_gib)
        pod = build_profiling_pod(job, PLACEMENT, 0, step, settings)
        pods.append(pod)
        # While its Pod runs, the measurement waits.
        assert isinstance(next_step(settings, runs_of(pods, "summarize", 0), NOW), Wait)
        _finish(pod)
        step = next_step(settings, runs_of(pods, "summarize", 0), NOW)
    assert isinstance(step, Store), step
    assert launched[0] == pytest.approx(0.5) and launched[4] == pytest.approx(8.0)
    assert len(pods) == 7  # 5 geometric budgets + 2 refinements
    # The same fit as `gleaner profile` on the same runs: one rule, one place.
    measured = []
    for kv in launched:
        argv = ["bench", "throughput", f"--kv-cache-memory-bytes={int(kv * GIB)}"]
        argv += ["--input-len=256", "--output-len=64", "--num-prompts=200", "--output-json=-"]
        data = json.loads(result_json(argv))
        measured.append(Measurement(kv, 16.0 + kv, data["output_tokens"], data["elapsed_time"]))
    assert step.document == profile_document(fit_profile(measured))
    profile = Profile.model_validate(step.document)
    assert profile.memory_curve[0].memory_gi_b == pytest.approx(16.5)
    assert step.fit["runs"] == 7
    # Runs of another attempt do not count.
    assert runs_of(pods, "summarize", 1) == []


def test_a_failed_run_fails_the_attempt_and_says_why() -> None:
    job = _job(auto_job())
    settings = _settings(job)
    pod = build_profiling_pod(job, PLACEMENT, 0, Launch(0, 0.5, 7), settings)
    _finish(pod, ok=False, message="loading model\nValueError: CUDA out of memory")
    step = next_step(settings, runs_of([pod], "summarize", 0), NOW)
    assert isinstance(step, Fail)
    assert step.message == (
        "profiling run 0 at 0.5 GiB KV failed: Error (exit code 1): ValueError: CUDA out of memory"
    )


def test_a_run_without_usable_json_fails_the_attempt() -> None:
    job = _job(auto_job())
    settings = _settings(job)
    pod = build_profiling_pod(job, PLACEMENT, 0, Launch(0, 0.5, 7), settings)
    _finish(pod, message='{"num_requests": 3}')
    step = next_step(settings, runs_of([pod], "summarize", 0), NOW)
    assert isinstance(step, Fail)
    assert "wrote no usable JSON" in step.message and "elapsed_time" in step.message


def test_the_fit_refusing_the_runs_fails_the_attempt() -> None:
    settings = _settings(_job(auto_job()))
    zero = json.dumps({"elapsed_time": 1.0, "output_tokens": 0})
    runs = [ProfilingRun(i, kv, "Succeeded", zero) for i, kv in enumerate([0.5, 1, 2, 4, 8])]
    step = next_step(settings.model_copy(update={"refine": 0}), runs, NOW)
    assert isinstance(step, Fail)
    assert step.message.startswith("the fit refused the runs: ")


def test_provisional_profile_needs_the_runs_memory() -> None:
    settings = _settings(_job(auto_job()))
    p = provisional_profile(settings, 4.0)
    assert p.required_memory_gi_b == pytest.approx(20.0)
    assert p.memory_curve[-1].memory_gi_b == pytest.approx(20.0)


def test_profile_configmap_is_owned_by_the_job_and_holds_the_profile() -> None:
    job = _job(auto_job())
    doc = {
        "standaloneTokensPerSecond": 900.0,
        "requiredMemoryGiB": 20.0,
        "memoryDeficitCoefficient": 0.0,
        "memoryCurve": [
            {"memoryGiB": 17.0, "tokensPerSecond": 300.0},
            {"memoryGiB": 24.0, "tokensPerSecond": 900.0},
        ],
    }
    cm = build_profile_configmap(job, "summarize-profile", "profile.yaml", Store(doc, {"runs": 7}))
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert cm["metadata"]["namespace"] == "default"
    verdict = validate_job(auto_job(), cm)
    assert isinstance(verdict, ValidJob)
    assert verdict.profile.required_memory_gi_b == 20.0


def test_status_tells_the_profiling_story() -> None:
    cur = OfflineJobStatus()
    assert not profiling_started(cur)
    cur = profiling(cur, "profiling run 1/7", NOW)
    assert profiling_started(cur)
    cond = find_condition(cur.conditions, ConditionType.PROFILED.value)
    assert cond is not None and cond.reason == "Profiling" and cond.message == "profiling run 1/7"
    retry = NOW + timedelta(seconds=30)
    failed = profiling_failed(cur, "run 0 failed: OOM", NOW, retry)
    assert failed.profiling_attempts == 1 and failed.next_attempt_after == retry
    assert failed.phase is cur.phase  # the job stays queued
    cond = find_condition(failed.conditions, ConditionType.PROFILED.value)
    assert cond is not None and cond.reason == "ProfilingFailed"
    assert cond.message == "run 0 failed: OOM"
    done = profiled(failed, "profile measured in 7 runs", NOW)
    cond = find_condition(done.conditions, ConditionType.PROFILED.value)
    assert cond is not None and cond.status.value == "True" and cond.reason == "Profiled"
    assert done.next_attempt_after is None and not profiling_started(done)
    # Profiling again (ConfigMap deleted, or another image) is a new attempt: the old
    # attempt's Pods hold the old measurement.
    again = profiling(done, "measuring again", NOW)
    assert again.profiling_attempts == failed.profiling_attempts + 1
    assert profiling(again, "run 2/7", NOW).profiling_attempts == again.profiling_attempts


def test_a_profile_measured_with_another_image_is_measured_again() -> None:
    job = _job(auto_job())
    doc = {
        "standaloneTokensPerSecond": 900.0,
        "requiredMemoryGiB": 20.0,
        "memoryCurve": [
            {"memoryGiB": 17.0, "tokensPerSecond": 300.0},
            {"memoryGiB": 24.0, "tokensPerSecond": 900.0},
        ],
    }
    cm = build_profile_configmap(job, "summarize-profile", "profile.yaml", Store(doc, {}))
    assert cm["metadata"]["annotations"][ANNOTATION_PROFILE_IMAGE] == "vllm/vllm-openai:latest"
    assert isinstance(validate_job(auto_job(), cm), ValidJob)
    newer = auto_job()
    newer["spec"]["template"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.9.0"
    verdict = validate_job(newer, cm)
    assert isinstance(verdict, NeedsProfile)
    assert verdict.message == (
        "ConfigMap summarize-profile was measured with image vllm/vllm-openai:latest; the job "
        "runs vllm/vllm-openai:v0.9.0: profile on submit measures it again"
    )
    # A ConfigMap someone else wrote (no image annotation) is never replaced.
    del cm["metadata"]["annotations"][ANNOTATION_PROFILE_IMAGE]
    assert isinstance(validate_job(newer, cm), ValidJob)


# --- Tokens per offline GPU-second -----------------------------------------------------------


def _window(end_s: float, seconds: float, share: float) -> ObservedWindow:
    return ObservedWindow(NOW + timedelta(seconds=end_s), seconds, share, share, 1.0)


def _run(start_s: float, end_s: float | None) -> ProfilingRun:
    end = None if end_s is None else NOW + timedelta(seconds=end_s)
    phase = "Running" if end is None else "Succeeded"
    return ProfilingRun(0, 1.0, phase, "", started=NOW + timedelta(seconds=start_s), finished=end)


def test_count_window_adds_the_overlap_of_each_new_report_once() -> None:
    run = _run(10.0, None)
    # A report ending before the run started adds nothing but is remembered.
    acc = count_window(RunAccounting(), _window(10.0, 15.0, 0.5), run)
    assert acc == RunAccounting(GpuTime(0.0, 0.0), NOW + timedelta(seconds=10))
    # 15 s window [10, 25]: all of it is the run, at a share of 0.4.
    acc = count_window(acc, _window(25.0, 15.0, 0.4), run)
    assert acc is not None
    assert acc.gpu_time.wall_seconds == pytest.approx(15.0)
    assert acc.gpu_time.offline_seconds == pytest.approx(6.0)
    # The same report again (no new NodeTrace yet) counts nothing.
    assert count_window(acc, _window(25.0, 15.0, 0.4), run) is None
    # The run finished at 30 s: of the window [25, 40], only 5 s were the run.
    done = _run(10.0, 30.0)
    acc = count_window(acc, _window(40.0, 15.0, 1.0), done)
    assert acc is not None
    assert acc.gpu_time.wall_seconds == pytest.approx(20.0)
    assert acc.gpu_time.offline_seconds == pytest.approx(11.0)
    assert acc.through == NOW + timedelta(seconds=40)
    assert ProfilingRun(**{**done.__dict__, "accounting": acc}).accounted
    # A report missed in between leaves a gap, not a bias: the share is over what was seen.
    gap = count_window(RunAccounting(), _window(40.0, 15.0, 1.0), done)
    assert gap is not None and gap.gpu_time.offline_share == pytest.approx(1.0)
    # Not started: nothing to count.
    idle = ProfilingRun(0, 1.0, "", "")
    assert count_window(RunAccounting(), _window(40.0, 15.0, 1.0), idle) is None


def test_the_window_share_is_the_sla_monitors_observed_fraction() -> None:
    trace = nodetrace_manifest(
        "gpu-node-1", gpus=2, offline_enabled=[0.25, 0.75], window_seconds=60.0, end=NOW
    )
    window = observe_from_nodetrace(trace, [0], 1.0, NOW - timedelta(seconds=90))
    assert window is not None and window.throughput_fraction == pytest.approx(0.25)
    acc = count_window(RunAccounting(), window, _run(-30.0, None))
    assert acc is not None and acc.gpu_time == GpuTime(30.0, 7.5)


def test_accounting_round_trips_through_the_pod_annotation() -> None:
    job = _job(auto_job())
    pod = build_profiling_pod(job, PLACEMENT, 0, Launch(0, 0.5, 7), _settings(job))
    _finish(pod, span=(NOW, NOW + timedelta(seconds=40)))
    acc = RunAccounting(GpuTime(30.0, 12.5), NOW + timedelta(seconds=45))
    pod["metadata"]["annotations"][ANNOTATION_PROFILE_GPU_TIME] = acc.to_annotation()
    (run,) = runs_of([pod], "summarize", 0)
    assert run.accounting == acc and run.accounted
    assert (run.started, run.finished) == (NOW, NOW + timedelta(seconds=40))
    pod["metadata"]["annotations"][ANNOTATION_PROFILE_GPU_TIME] = "not json"
    assert runs_of([pod], "summarize", 0)[0].accounting == RunAccounting()


def _profile_all(share: float | None, waited_s: float) -> tuple[Any, list[dict[str, Any]]]:
    """Profile the job with every run taking 40 s of wall clock, its gate open ``share`` of
    it per the agent (None: no report), asking ``waited_s`` after each run."""
    job = _job(auto_job())
    settings = _settings(job)
    pods: list[dict[str, Any]] = []
    t = NOW
    step = next_step(settings, [], t)
    while isinstance(step, Launch):
        pod = build_profiling_pod(job, PLACEMENT, 0, step, settings)
        _finish(pod, span=(t, t + timedelta(seconds=40)))
        if share is not None:
            acc = RunAccounting(GpuTime(40.0, 40.0 * share), t + timedelta(seconds=45))
            pod["metadata"]["annotations"][ANNOTATION_PROFILE_GPU_TIME] = acc.to_annotation()
        pods.append(pod)
        t += timedelta(seconds=40 + waited_s)
        step = next_step(settings, runs_of(pods, "summarize", 0), t)
    return step, pods


def test_runs_on_a_shared_gpu_are_fitted_per_offline_gpu_second() -> None:
    mono, _ = _profile_all(1.0, 0.0)
    shared, _ = _profile_all(0.5, 0.0)
    assert isinstance(mono, Store) and isinstance(shared, Store)
    # The same runs with the gate open half the time: twice the wall-clock rate.
    rates = [float(str(s.document["standaloneTokensPerSecond"])) for s in (shared, mono)]
    assert rates[0] / rates[1] == pytest.approx(2.0, rel=1e-3)
    assert shared.document["requiredMemoryGiB"] == mono.document["requiredMemoryGiB"]
    assert shared.fit["offlineShare"] == 0.5 and shared.fit["runsWithoutGpuTime"] == 0
    assert measured_how(shared.fit) == (
        "on a shared GPU, in tokens per offline GPU-second (the gate was open 50% of the "
        "runs' time)"
    )


def test_a_finished_run_waits_for_its_report_then_counts_as_measured() -> None:
    job = _job(auto_job())
    settings = _settings(job)
    pod = build_profiling_pod(job, PLACEMENT, 0, Launch(0, 0.5, 7), settings)
    end = NOW + timedelta(seconds=40)
    _finish(pod, span=(NOW, end))
    step = next_step(settings, runs_of([pod], "summarize", 0), end + timedelta(seconds=5))
    assert step == Wait(until=end + timedelta(seconds=ACCOUNTING_GRACE_S))
    # Past the grace without any report: it counts at its wall-clock rate, and says so.
    step = next_step(settings, runs_of([pod], "summarize", 0), end + timedelta(seconds=500))
    assert isinstance(step, Launch) and step.index == 1
    late, _ = _profile_all(None, ACCOUNTING_GRACE_S + 1)
    assert isinstance(late, Store)
    assert late.fit["runsWithoutGpuTime"] == 7 and "offlineShare" not in late.fit
    assert measured_how(late.fit) == (
        "7 of 7 runs had no GPU time from the node's agent and count at their wall-clock "
        "rate (a lower bound)"
    )


def test_a_run_whose_gate_never_opened_fails_the_attempt() -> None:
    step, _ = _profile_all(0.0, 0.0)
    assert isinstance(step, Fail)
    assert "the agent accounts no offline GPU time" in step.message


# --- A dedicated profiling node pool ---------------------------------------------------------

POOL = ProfilingPool(
    {"gleaner.dev/pool": "profiling"},
    ({"key": "profiling", "operator": "Exists", "effect": "NoSchedule"},),
)


def test_on_a_profiling_pool_runs_are_placed_on_the_pool_only() -> None:
    body = auto_job()
    body["spec"]["gpuSelector"] = {
        "nodeSelector": {"pool": "serving"},
        "products": ["NVIDIA H100 80GB HBM3"],
    }
    job = _job(body)
    assert on_pool(job, None) is job
    placed = on_pool(job, POOL)
    selector = placed.spec.gpu_selector
    assert selector is not None
    assert selector.node_selector == {"gleaner.dev/pool": "profiling"}
    assert selector.products == ["NVIDIA H100 80GB HBM3"]  # the GPU it will run on
    assert job.spec.gpu_selector is not None
    assert job.spec.gpu_selector.node_selector == {"pool": "serving"}  # unchanged


def test_a_pool_run_carries_the_pools_selector_and_tolerations_and_is_not_corrected() -> None:
    job = _job(auto_job())
    settings = _settings(job)
    pod = build_profiling_pod(job, PLACEMENT, 0, Launch(0, 0.5, 7), settings, POOL)
    assert pod["spec"]["nodeSelector"] == {"gleaner.dev/pool": "profiling"}
    assert pod["spec"]["tolerations"] == [dict(POOL.tolerations[0])]
    assert pod["metadata"]["labels"]["gleaner.dev/profiling-pool"] == "true"
    end = NOW + timedelta(seconds=40)
    _finish(pod, span=(NOW, end))
    (run,) = runs_of([pod], "summarize", 0)
    assert not run.shared and run.accounted
    # No agent report is awaited, and the run counts at its wall-clock rate.
    step = next_step(settings, [run], end)
    assert isinstance(step, Launch) and step.index == 1
    shared = build_profiling_pod(job, PLACEMENT, 0, Launch(0, 0.5, 7), settings)
    assert "nodeSelector" not in shared["spec"] and "tolerations" not in shared["spec"]


def test_a_profile_from_the_pool_says_it_had_a_gpu_of_its_own() -> None:
    job = _job(auto_job())
    settings = _settings(job)
    pods: list[dict[str, Any]] = []
    step = next_step(settings, [], NOW)
    while isinstance(step, Launch):
        pod = build_profiling_pod(job, PLACEMENT, 0, step, settings, POOL)
        pods.append(_finish(pod, span=(NOW, NOW + timedelta(seconds=40))))
        step = next_step(settings, runs_of(pods, "summarize", 0), NOW + timedelta(seconds=41))
    assert isinstance(step, Store)
    assert step.fit["monopolisedRuns"] == 7 and "offlineShare" not in step.fit
    assert measured_how(step.fit) == (
        "on the dedicated profiling node pool (a GPU of its own: no correction)"
    )
