"""Turn a simulated cluster into the API objects the dashboard snapshot holds.

Contract. :func:`snapshot` builds, from one policy's run of ``gleaner.sim.cluster``, the
NodeTraces the simulated agents would publish (last summary window, ``source: simulated``),
the OfflineJobs with the status the operator would write (phase, placement with predicted
factors, observed fraction, eviction records), the scheduler's ``EvictionReport`` records,
per-job observed series and the cluster series, and hands them to
``gleaner.sim.snapshot.dashboard_record`` (the dashboard's format lives there, in one place).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gleaner.api import (
    EvictionRecord,
    MemoryPoint,
    NodeTrace,
    NodeTraceSpec,
    ObjectMeta,
    Observed,
    OfflineJob,
    OfflineJobSpec,
    OfflineJobStatus,
    Phase,
    Placement,
    Profile,
)
from gleaner.api.offlinejob import MAX_EVICTION_RECORDS
from gleaner.scheduler import EvictionReport
from gleaner.sim.cluster import EPOCH, OnlineCluster, SimJob, node_summary
from gleaner.sim.snapshot import dashboard_record

WORKER_TEMPLATE: dict[str, Any] = {
    "spec": {"containers": [{"name": "worker", "image": "vllm/vllm-openai:latest"}]}
}


def node_traces(
    online: OnlineCluster, jobs: list[SimJob], window_h: float, eta: float
) -> list[NodeTrace]:
    end = online.busy.shape[1]
    start = max(0, end - max(1, round(window_h * 3600 / online.step_s)))
    running: dict[int, int] = {}
    for j in jobs:
        if j.phase == "Running" and j.node is not None:
            running[j.node] = running.get(j.node, 0) + 1
    out = []
    for n, name in enumerate(online.node_names):
        summary = node_summary(online, n, start, end, eta)
        status = summary.to_nodetrace_status(
            source="simulated",
            agent_version="simulator",
            offline_jobs=running.get(n, 0),
            now=summary.window_end,
        )
        out.append(
            NodeTrace(
                metadata=ObjectMeta(name=name),
                spec=NodeTraceSpec(node_name=name),
                status=status,
            )
        )
    return out


def offline_job(job: SimJob, reports: list[EvictionReport], step_s: float) -> OfflineJob:
    ns, _, name = job.key.rpartition("/")
    prof = job.profile
    profile = Profile(
        standalone_tokens_per_second=prof.standalone_tokens_per_second,
        required_memory_gi_b=prof.required_memory_gib,
        memory_curve=[
            MemoryPoint(memory_gi_b=m, tokens_per_second=t)
            for m, t in zip(prof.curve_memory_gib, prof.curve_tokens_per_second, strict=True)
        ][:64],
        memory_deficit_coefficient=prof.memory_deficit_coefficient,
    )
    status = OfflineJobStatus(phase=Phase(job.phase), eviction_count=job.evictions)
    if job.placements and job.predicted is not None:
        last = job.placements[-1]
        f = job.predicted
        status.placement = Placement(
            node=last["node"],
            gpu_indices=last["gpus"],
            compute=min(1.0, f.compute),
            memory=min(1.0, f.memory),
            multi_gpu=min(1.0, f.multi_gpu),
            throughput_fraction=min(1.0, f.throughput_fraction),
            predicted_tokens_per_second=f.throughput_fraction * prof.standalone_tokens_per_second,
            decided_at=EPOCH + timedelta(seconds=last["t"]),
        )
    if job.series:
        t, frac = job.series[-1]
        status.observed = Observed(
            throughput_fraction=frac,
            window_seconds=step_s,
            tokens_per_second=frac * prof.standalone_tokens_per_second,
            updated_at=EPOCH + timedelta(seconds=t),
        )
    mine = [r for r in reports if r.job == job.key]
    status.evictions = [
        EvictionRecord(
            time=EPOCH + timedelta(seconds=r.time - EPOCH.timestamp()),
            node=r.node,
            gpu_indices=list(r.gpus),
            reason=r.reason,
            sla=r.sla,
            predicted_throughput_fraction=min(1.0, r.predicted.throughput_fraction),
            observed_throughput_fraction=r.observed.mean,
        )
        for r in mine[-MAX_EVICTION_RECORDS:]
    ]
    status.excluded_nodes = list(job.excluded)
    return OfflineJob(
        metadata=ObjectMeta(name=name, namespace=ns or "default"),
        spec=OfflineJobSpec(
            template=WORKER_TEMPLATE,
            gpus=job.gpus,
            throughput_sla=job.sla,
            profile=profile,
            max_evictions=job.max_evictions,
        ),
        status=status,
    )


def snapshot(
    cluster_raw: dict[str, Any], results: dict[str, Any], policy: str = "gleaner"
) -> dict[str, Any]:
    """The dashboard record of ``policy``'s run (falls back to the first policy run)."""
    pols = cluster_raw["policies"]
    if policy not in pols:
        policy = next(p for p in pols if p != "no-harvest") if len(pols) > 1 else next(iter(pols))
    online: OnlineCluster = cluster_raw["online"]
    jobs: list[SimJob] = cluster_raw["jobs"][policy]
    metrics = pols[policy]
    cfg = results["cluster"]["config"]
    reports: list[EvictionReport] = metrics["_reports"]
    s = metrics["series"]
    secs = [t * 3600.0 for t in s["t_h"]]
    series = {
        "harvestedUtilization": list(zip(secs, s["offline_used"], strict=True)),
        "offlineThroughput": list(zip(secs, s["gpus_saved"], strict=True)),
        "slaAttainment": [
            (t, v) for t, v in zip(secs, s["sla_attainment"], strict=True) if v is not None
        ],
    }
    return dashboard_record(
        node_traces=node_traces(online, jobs, cfg["window_h"], cluster_raw["gate_efficiency"]),
        offline_jobs=[offline_job(j, reports, cfg["monitor"]["window_s"]) for j in jobs],
        eviction_reports=reports,
        job_series={j.key: j.series for j in jobs if j.series},
        series=series,
        title=f"simulated cluster ({results.get('scenario')}, {policy})",
    )
