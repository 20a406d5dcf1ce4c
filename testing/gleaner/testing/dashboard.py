"""A small, varied cluster record for dashboard tests, demos and screenshots.

Contract: :func:`example_record` returns a deterministic :class:`ClusterRecord` (seeded) with
three GPU nodes of different sizes and loads (varying harvestable memory, partly aligned
GPU pairs, preemption and reclamation counts), OfflineJobs in several phases (running on
one and two GPUs, one missing its SLA, one evicted and requeued with its SLA eviction
report, one unschedulable, one pending with its profile in a ConfigMap), per-job observed
series and a day of cluster time series. Everything is built through the real API models
and the scheduler's ``EvictionReport``, so the record is exactly what the sources produce.
:func:`batch_record` adds three ``spec.batch`` jobs on gpu-node-c: one on track for its
deadline, one that will miss it, one finished. :func:`planned_exit_record` adds a 4-GPU job
whose placement is a planned exit.
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from gleaner.api import (
    BatchProgress,
    EvictionRecord,
    GpuInfo,
    GpuPair,
    GpuTrace,
    MemorySketch,
    MemoryState,
    NodeTrace,
    NodeTraceSpec,
    NodeTraceStatus,
    ObjectMeta,
    Observed,
    OfflineJob,
    OfflineJobSpec,
    OfflineJobStatus,
    Phase,
    Placement,
    Profile,
    TraceWindow,
)
from gleaner.dashboard.model import ClusterRecord, ClusterSeries, Point, RecordedReport
from gleaner.scheduler import EvictionReport, ObservedSummary, PredictedFactors
from gleaner.testing.fixtures import make_placement
from gleaner.testing.net import free_port

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
WINDOW = 3600.0


def _nodetrace(
    name: str,
    gpus: int,
    idle: list[float],
    free_gib: list[float],
    jobs: dict[int, str],
    overlap: float,
    rng: random.Random,
    now: datetime,
) -> dict[str, Any]:
    states: dict[tuple[float, ...], float] = {}
    for _ in range(120):
        state = tuple(float(max(0, min(80, math.floor(f + rng.gauss(0, 6))))) for f in free_gib)
        states[state] = states.get(state, 0.0) + WINDOW / 120
    pairs = []
    for a in range(gpus):
        for b in range(a + 1, gpus):
            union = max(1 - idle[a], 1 - idle[b]) * WINDOW
            score = overlap if (a // 2 == b // 2) else overlap * 0.7
            pairs.append(
                GpuPair(gpu_a=a, gpu_b=b, overlap_seconds=union * score, union_seconds=union)
            )
    trace = NodeTrace(
        metadata=ObjectMeta(name=name),
        spec=NodeTraceSpec(node_name=name),
        status=NodeTraceStatus(
            last_report_time=now,
            gpus=[
                GpuInfo(
                    index=i,
                    uuid=f"GPU-{name}-{i:04d}",
                    product="NVIDIA H100 80GB HBM3",
                    memory_gi_b=80,
                )
                for i in range(gpus)
            ],
            window=TraceWindow(start=now - timedelta(seconds=WINDOW), end=now, seconds=WINDOW),
            per_gpu=[
                GpuTrace(
                    index=i,
                    offline_enabled_seconds=idle[i] * WINDOW,
                    online_busy_seconds=(1 - idle[i]) * WINDOW * 0.97,
                    preemptions=rng.randint(50, 400),
                    online_requests=rng.randint(400, 900),
                    max_preemptions_per_request=1,
                    reclamations=rng.randint(0, 12),
                    reclaimed_bytes=rng.randint(0, 8) * 2**30,
                    offline_job=jobs.get(i),
                )
                for i in range(gpus)
            ],
            pairs=pairs,
            memory=MemorySketch(
                step_gi_b=1.0,
                states=[MemoryState(free_gi_b=list(s), seconds=sec) for s, sec in states.items()],
            ),
            idle_fraction=sum(idle) / gpus,
            offline_jobs=len(set(jobs.values())),
        ),
    )
    return trace.to_k8s()


PROFILE = Profile(
    standalone_tokens_per_second=2400,
    required_memory_gi_b=40,
    memory_curve=[
        {"memoryGiB": 10, "tokensPerSecond": 600},
        {"memoryGiB": 25, "tokensPerSecond": 1700},
        {"memoryGiB": 40, "tokensPerSecond": 2400},
    ],
    memory_deficit_coefficient=5,
)


def _job(
    name: str,
    *,
    namespace: str = "batch",
    gpus: int = 1,
    sla: float = 0.5,
    status: OfflineJobStatus | None = None,
    created: datetime,
    profile_from: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {"spec": {"containers": [{"name": "worker", "image": "vllm/vllm:latest"}]}},
        "gpus": gpus,
        "throughputSLA": sla,
    }
    if profile_from:
        spec["profileFrom"] = {"name": profile_from}
    else:
        spec["profile"] = PROFILE.to_k8s()
    job = OfflineJob(
        metadata=ObjectMeta(name=name, namespace=namespace, creation_timestamp=created),
        spec=OfflineJobSpec.model_validate(spec),
        status=status or OfflineJobStatus(),
    )
    return job.to_k8s()


def _placement(
    node: str, gpus: list[int], c: float, m: float, mg: float, at: datetime
) -> Placement:
    uuids = [f"GPU-{node}-{g:04d}" for g in gpus]
    tokens = c * m * mg * 2400
    return make_placement(
        node,
        gpus,
        uuids=uuids,
        compute=c,
        memory=m,
        multi_gpu=mg,
        tokens_per_second=tokens,
        decided_at=at,
    )


def _series(
    rng: random.Random, start: float, n: int, step: float, base: float, amp: float
) -> list[Point]:
    return [
        Point(
            t=start + i * step,
            v=max(0.0, base + amp * math.sin(2 * math.pi * i / n) + rng.gauss(0, amp / 6)),
        )
        for i in range(n)
    ]


def example_record(now: datetime = NOW, seed: int = 7) -> ClusterRecord:
    """The example cluster (see the module docstring)."""
    rng = random.Random(seed)
    t_now = now.timestamp()
    traces = [
        _nodetrace(
            "gpu-node-a",
            4,
            [0.72, 0.65, 0.58, 0.81],
            [52, 44, 30, 61],
            {0: "batch/summarize-news", 2: "batch/embed-docs", 3: "batch/embed-docs"},
            0.97,
            rng,
            now,
        ),
        _nodetrace("gpu-node-b", 2, [0.35, 0.41], [18, 22], {0: "batch/translate"}, 0.9, rng, now),
        _nodetrace(
            "gpu-node-c",
            8,
            [0.88, 0.86, 0.9, 0.84, 0.6, 0.55, 0.7, 0.75],
            [66, 64, 70, 62, 40, 35, 48, 50],
            {},
            0.96,
            rng,
            now,
        ),
    ]
    created = now - timedelta(hours=20)
    placed_at = now - timedelta(hours=6)
    evicted_at = now - timedelta(hours=3)
    report = EvictionReport(
        job="batch/translate-old",
        node="gpu-node-b",
        gpus=(1,),
        gpu_uuids=("GPU-gpu-node-b-0001",),
        sla=0.6,
        predicted=PredictedFactors(
            compute=0.78, memory=0.85, multi_gpu=1.0, throughput_fraction=0.663
        ),
        observed=ObservedSummary(
            mean=0.41, min=0.33, last=0.38, windows=5, windows_missed=4, window_seconds=300
        ),
        reason="observed throughput below SLA in 4 of the last 5 windows (mean 0.41 < 0.60)",
        time=evicted_at.timestamp(),
        eviction_count=1,
        failed=False,
        next_attempt_after=(evicted_at + timedelta(minutes=10)).timestamp(),
        excluded_nodes=("gpu-node-b",),
    )
    failed_report = EvictionReport(
        job="research/long-context",
        node="gpu-node-a",
        gpus=(1,),
        sla=0.8,
        predicted=PredictedFactors(
            compute=0.9, memory=0.92, multi_gpu=1.0, throughput_fraction=0.828
        ),
        observed=ObservedSummary(
            mean=0.52, min=0.4, last=0.5, windows=5, windows_missed=5, window_seconds=300
        ),
        reason="observed throughput below SLA in 5 of the last 5 windows (mean 0.52 < 0.80)",
        time=(now - timedelta(hours=9)).timestamp(),
        eviction_count=1,
        failed=True,
        next_attempt_after=None,
        excluded_nodes=("gpu-node-a",),
    )
    jobs = [
        _job(
            "summarize-news",
            sla=0.5,
            created=created,
            status=OfflineJobStatus(
                phase=Phase.RUNNING,
                message="running on gpu-node-a GPU 0",
                placement=_placement("gpu-node-a", [0], 0.72, 0.93, 1.0, placed_at),
                observed=Observed(throughput_fraction=0.64, window_seconds=300),
            ),
        ),
        _job(
            "embed-docs",
            gpus=2,
            sla=0.4,
            created=created + timedelta(minutes=5),
            status=OfflineJobStatus(
                phase=Phase.RUNNING,
                placement=_placement("gpu-node-a", [2, 3], 0.58, 0.81, 0.97, placed_at),
                observed=Observed(throughput_fraction=0.44, window_seconds=300),
            ),
        ),
        _job(
            "translate",
            sla=0.45,
            created=created + timedelta(minutes=9),
            status=OfflineJobStatus(
                phase=Phase.RUNNING,
                placement=_placement("gpu-node-b", [0], 0.35, 0.6, 1.0, placed_at),
                observed=Observed(throughput_fraction=0.19, window_seconds=300),
                message="observed 0.19 < SLA 0.45 in 2 of 5 windows",
            ),
        ),
        _job(
            "translate-old",
            sla=0.6,
            created=created - timedelta(hours=1),
            status=OfflineJobStatus(
                phase=Phase.EVICTED,
                message="evicted from gpu-node-b; requeued",
                evictions=[
                    EvictionRecord(
                        time=evicted_at,
                        node="gpu-node-b",
                        gpu_indices=[1],
                        reason=report.reason,
                        sla=0.6,
                        predicted_throughput_fraction=0.663,
                        observed_throughput_fraction=0.41,
                        report="translate-old-sla-eviction-1",
                    )
                ],
                eviction_count=1,
                excluded_nodes=["gpu-node-b"],
            ),
        ),
        _job(
            "giant-batch",
            gpus=8,
            sla=0.9,
            created=created + timedelta(hours=2),
            status=OfflineJobStatus(
                phase=Phase.UNSCHEDULABLE,
                message="0/3 nodes are available: 2 fewer than 8 GPUs, "
                "1 predicted throughput below SLA (best 0.52 < 0.90)",
            ),
        ),
        _job(
            "from-configmap",
            namespace="research",
            sla=0.3,
            created=created + timedelta(hours=3),
            profile_from="llama-profile",
            status=OfflineJobStatus(phase=Phase.PENDING),
        ),
        _job(
            "long-context",
            namespace="research",
            sla=0.8,
            created=created - timedelta(hours=2),
            status=OfflineJobStatus(
                phase=Phase.FAILED,
                message="gave up after 1 SLA eviction",
                eviction_count=1,
                excluded_nodes=["gpu-node-a"],
            ),
        ),
    ]
    start = t_now - 24 * 3600
    step = 1800.0
    n = 48
    job_series = {
        "batch/summarize-news": _series(rng, t_now - 6 * 3600, 24, 900, 0.63, 0.05),
        "batch/embed-docs": _series(rng, t_now - 6 * 3600, 24, 900, 0.45, 0.04),
        "batch/translate": _series(rng, t_now - 6 * 3600, 24, 900, 0.3, 0.12),
    }
    series = ClusterSeries(
        harvested_utilization=[
            Point(t=p.t, v=min(1.0, p.v)) for p in _series(rng, start, n, step, 0.42, 0.15)
        ],
        offline_throughput=_series(rng, start, n, step, 2.4, 0.8),
        sla_attainment=[
            Point(t=p.t, v=min(1.0, p.v)) for p in _series(rng, start, n, step, 0.85, 0.1)
        ],
        preemptions=[Point(t=p.t, v=round(p.v)) for p in _series(rng, start, n, step, 300, 120)],
        reclamations=[Point(t=p.t, v=round(p.v)) for p in _series(rng, start, n, step, 12, 8)],
    )
    return ClusterRecord(
        generated_at=now,
        source="simulation",
        title="example cluster",
        node_traces=traces,
        offline_jobs=jobs,
        profiles={"research/from-configmap": PROFILE.to_k8s()},
        eviction_reports=[
            RecordedReport(
                namespace="batch",
                config_map="translate-old-sla-eviction-1",
                report=report.to_json(),
            ),
            RecordedReport(namespace="research", config_map="", report=failed_report.to_json()),
        ],
        job_series=job_series,
        series=series,
    )


BATCH_JOBS = ("nightly-summaries", "backfill-labels", "weekly-report")
"""The batch jobs :func:`batch_record` adds (namespace ``batch``)."""


def _batch_job(
    name: str,
    *,
    now: datetime,
    deadline: datetime,
    status: OfflineJobStatus,
) -> dict[str, Any]:
    spec = OfflineJobSpec.model_validate(
        {
            "gpus": 1,
            "throughputSLA": 0.3,
            "profile": PROFILE.to_k8s(),
            "batch": {
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "engineImage": "vllm/vllm-openai:v0.8.5",
                "claimName": "batch-data",
                "input": f"{name}/input.jsonl",
                "output": f"{name}/run",
                "deadline": deadline.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }
    )
    job = OfflineJob(
        metadata=ObjectMeta(
            name=name, namespace="batch", creation_timestamp=now - timedelta(hours=4)
        ),
        spec=spec,
        status=status,
    )
    return job.to_k8s()


def batch_record(now: datetime = NOW, seed: int = 7) -> ClusterRecord:
    """:func:`example_record` with three batch jobs on gpu-node-c (GPUs 0 to 2): on track
    (projected 2 h before its deadline), late (projected 3 h after it), and finished."""
    record = example_record(now, seed)
    placed = now - timedelta(hours=2)

    def running(gpu: int, done: int, total: int, finish: timedelta) -> OfflineJobStatus:
        return OfflineJobStatus(
            phase=Phase.RUNNING,
            placement=_placement("gpu-node-c", [gpu], 0.86, 0.9, 1.0, placed),
            observed=Observed(
                throughput_fraction=0.74, window_seconds=300, tokens_per_second=0.74 * 2400
            ),
            batch=BatchProgress(
                requests_total=total,
                requests_done=done,
                requests_failed=done // 100,
                tokens=done * 700,
                summary=f"{done}/{total}",
                projected_finish=now + finish,
                updated_at=now - timedelta(seconds=10),
                deadline_sla=0.35,
                required_fraction=0.27,
            ),
        )

    finished = OfflineJobStatus(
        phase=Phase.SUCCEEDED,
        placement=_placement("gpu-node-c", [2], 0.88, 0.9, 1.0, now - timedelta(hours=3)),
        batch=BatchProgress(requests_total=500, requests_done=500, summary="500/500"),
    )
    jobs = [
        _batch_job(
            BATCH_JOBS[0],
            now=now,
            deadline=now + timedelta(hours=5),
            status=running(0, 2500, 9000, timedelta(hours=3)),
        ),
        _batch_job(
            BATCH_JOBS[1],
            now=now,
            deadline=now + timedelta(hours=6),
            status=running(1, 1200, 10000, timedelta(hours=9)),
        ),
        _batch_job(BATCH_JOBS[2], now=now, deadline=now + timedelta(hours=1), status=finished),
    ]
    return record.model_copy(update={"offline_jobs": [*record.offline_jobs, *jobs]})


PLANNED_EXIT_JOB = "long-summaries"
"""The 4-GPU job :func:`planned_exit_record` adds (namespace ``batch``)."""


def planned_exit_record(now: datetime = NOW, seed: int = 7) -> ClusterRecord:
    """:func:`example_record` with a 4-GPU job running on gpu-node-c (GPUs 0 to 3) whose
    placement is a planned exit (``status.placement.plannedExit``)."""
    record = example_record(now, seed)
    placement = _placement("gpu-node-c", [0, 1, 2, 3], 0.84, 0.9, 0.95, now - timedelta(hours=1))
    job = _job(
        PLANNED_EXIT_JOB,
        gpus=4,
        sla=0.5,
        created=now - timedelta(hours=5),
        status=OfflineJobStatus(
            phase=Phase.RUNNING,
            message="running on gpu-node-c GPUs 0-3",
            placement=placement.model_copy(update={"planned_exit": True}),
        ),
    )
    return record.model_copy(update={"offline_jobs": [*record.offline_jobs, job]})


# ---------------------------------------------------------------------------------------
# Serving an app on loopback, and the browser
# ---------------------------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
)
"""Debian's Chromium, driven by Playwright (never ``playwright install``)."""


@contextlib.contextmanager
def serving(app: Any, port: int | None = None) -> Iterator[str]:
    """Serve ``app`` with uvicorn on ``127.0.0.1:<free port>`` from a thread; yield its URL."""
    import uvicorn

    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="dashboard-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the dashboard server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def scaled_record(
    nodes: int = 125, gpus_per_node: int = 8, jobs: int = 500, seed: int = 11
) -> ClusterRecord:
    """A large synthetic cluster (benchmarks): ``nodes`` x ``gpus_per_node`` GPUs, ``jobs``
    jobs of 1, 2 or 4 GPUs, running where a GPU set is free, pending otherwise."""
    rng = random.Random(seed)
    now = NOW
    traces: list[dict[str, Any]] = []
    free_sets: list[tuple[str, list[int]]] = []
    holders: dict[str, dict[int, str]] = {}
    for n in range(nodes):
        name = f"node-{n:04d}"
        holders[name] = {}
        idle = [rng.uniform(0.3, 0.95) for _ in range(gpus_per_node)]
        free = [rng.uniform(15, 70) for _ in range(gpus_per_node)]
        traces.append(_nodetrace(name, gpus_per_node, idle, free, {}, 0.96, rng, now))
        free_sets.append((name, list(range(gpus_per_node))))
    out_jobs: list[dict[str, Any]] = []
    series: dict[str, list[Point]] = {}
    cursor = 0
    for j in range(jobs):
        k = rng.choice((1, 1, 1, 2, 4))
        name = f"job-{j:04d}"
        status = OfflineJobStatus(phase=Phase.PENDING)
        while cursor < len(free_sets) and len(free_sets[cursor][1]) < k:
            cursor += 1
        if cursor < len(free_sets):
            node, left = free_sets[cursor]
            gpus, free_sets[cursor] = left[:k], (node, left[k:])
            c, m = rng.uniform(0.4, 0.95), rng.uniform(0.6, 1.0)
            status = OfflineJobStatus(
                phase=Phase.RUNNING,
                placement=_placement(node, gpus, c, m, 1.0 if k == 1 else 0.97, now),
                observed=Observed(
                    throughput_fraction=c * m * rng.uniform(0.8, 1.1), window_seconds=300
                ),
            )
            for g in gpus:
                holders[node][g] = f"batch/{name}"
            series[f"batch/{name}"] = _series(rng, now.timestamp() - 7200, 24, 300, c * m, 0.05)
        out_jobs.append(
            _job(name, gpus=k, sla=rng.choice((0.3, 0.4, 0.5)), created=now, status=status)
        )
    for trace in traces:
        held = holders[trace["metadata"]["name"]]
        for gpu in trace["status"]["perGPU"]:
            gpu["offlineJob"] = held.get(gpu["index"])
    return ClusterRecord(
        generated_at=now,
        source="simulation",
        title=f"synthetic {nodes}x{gpus_per_node}",
        node_traces=traces,
        offline_jobs=out_jobs,
        job_series=series,
    )
