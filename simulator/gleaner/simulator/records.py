"""Turn a simulated cluster into the API objects the dashboard snapshot holds.

Contract. :func:`snapshot` builds, from one policy's run of ``gleaner.simulator.cluster``, the
NodeTraces the simulated agents would publish (last summary window, ``source: simulated``),
with the offline job each GPU holds, the OfflineJobs with the status the operator would write
(phase, placement with predicted factors built by ``PlacementDecision.to_placement``, the
builder the operator records placements with, observed fraction of the current placement,
eviction records), the scheduler's ``EvictionReport`` records, per-job observed series and
the cluster series sampled once per SLA window with the dashboard's own definitions (so the
charts end at the cards), and hands them to
``gleaner.simulator.snapshot.dashboard_record`` (the dashboard's format lives there, in one place).
Times are those of the simulated clock: the run starts at ``gleaner.simulator.online.EPOCH``;
series times are epoch seconds, as on a live cluster.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from gleaner.api import (
    EvictionRecord,
    LeaveType,
    MemoryPoint,
    NodeTrace,
    NodeTraceSpec,
    ObjectMeta,
    Observed,
    OfflineJob,
    OfflineJobSpec,
    OfflineJobStatus,
    Phase,
    Profile,
)
from gleaner.api.offlinejob import MAX_EVICTION_RECORDS
from gleaner.perfmodel import Prediction
from gleaner.perfmodel.admission import DEFAULT_RISK_TARGET
from gleaner.scheduler import EvictionReport, PlacementDecision
from gleaner.simulator.cluster import SimJob, current_observed
from gleaner.simulator.cluster_scenario import MonitorConfig
from gleaner.simulator.online import EPOCH, GateEfficiency, OnlineCluster, node_summary
from gleaner.simulator.snapshot import dashboard_record

WORKER_TEMPLATE: dict[str, Any] = {
    "spec": {"containers": [{"name": "worker", "image": "vllm/vllm-openai:latest"}]}
}


def gpu_holders(online: OnlineCluster, jobs: list[SimJob]) -> dict[int, list[str | None]]:
    """Per node, the job each GPU holds at the end of the run (what the agent reports as
    ``perGPU[].offlineJob``: the running job's ``namespace/name``)."""
    held: dict[int, list[str | None]] = {
        n: [None] * online.gpus_per_node for n in range(len(online.node_names))
    }
    for j in jobs:
        if j.phase is Phase.RUNNING and j.node is not None:
            for r in j.rows:
                held[j.node][r - j.node * online.gpus_per_node] = j.key
    return held


def node_traces(
    online: OnlineCluster, jobs: list[SimJob], window_h: float, eta: float | GateEfficiency
) -> list[NodeTrace]:
    """The NodeTraces the simulated agents publish at the end of the run: the trailing
    ``window_h`` window and, per GPU, the offline job it holds (as a live agent does)."""
    end = online.busy.shape[1]
    start = max(0, end - max(1, round(window_h * 3600 / online.step_s)))
    held = gpu_holders(online, jobs)
    out = []
    for n, name in enumerate(online.node_names):
        summary = replace(node_summary(online, n, start, end, eta), offline_jobs=tuple(held[n]))
        status = summary.to_nodetrace_status(
            source="simulated", agent_version="simulator", now=summary.window_end
        )
        out.append(
            NodeTrace(
                metadata=ObjectMeta(name=name),
                spec=NodeTraceSpec(node_name=name),
                status=status,
            )
        )
    return out


def phase_message(job: SimJob) -> str:
    """A one-line status message like the operator's, from what the simulation knows."""
    if job.phase is Phase.RUNNING and job.placements:
        last = job.placements[-1]
        gpus = ",".join(str(g) for g in last["gpus"])
        return f"running on {last['node']} GPUs {gpus}"
    if job.phase is Phase.SUCCEEDED:
        return "finished its work"
    if job.phase is Phase.FAILED:
        return f"gave up after {job.evictions} SLA eviction(s)"
    if job.exited:
        return (
            "left its node by its planned exit (its node no longer admitted it over the "
            "coming hour and no other node did); waiting to be placed again, progress kept"
        )
    if job.evictions:
        return (
            f"requeued after SLA eviction {job.evictions}; the simulated scheduler has not "
            "placed it again (see the runner-up nodes)"
        )
    return "waiting: the simulated scheduler has not placed it (see the runner-up nodes)"


def placement_decision(job: SimJob) -> PlacementDecision | None:
    """The decision behind the job's latest placement: the scheduler's own, or (first-fit,
    which asks no model) one holding the factors that policy assumed."""
    if not job.placements or job.predicted is None:
        return None
    last = job.placements[-1]
    if job.decision is not None and job.decision.node == last["node"]:
        return job.decision
    f = job.predicted
    prediction = Prediction(
        job=job.key,
        node=last["node"],
        gpus=tuple(last["gpus"]),
        compute=f.compute,
        memory=f.memory,
        multi_gpu=f.multi_gpu,
        throughput_fraction=f.throughput_fraction,
        tokens_per_second=f.throughput_fraction * job.profile.standalone_tokens_per_second,
        sla=job.sla,
        feasible=True,
    )
    return PlacementDecision(
        job=job.key,
        node=last["node"],
        gpus=tuple(last["gpus"]),
        gpu_uuids=(),
        prediction=prediction,
    )


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
    status = OfflineJobStatus(
        phase=job.phase, eviction_count=job.evictions, message=phase_message(job)
    )
    decision = placement_decision(job)
    if decision is not None:
        status.placement = decision.to_placement(EPOCH + timedelta(seconds=job.placements[-1]["t"]))
        if job.placements[-1].get("planned_exit"):  # placed by the planned exit's second pass
            status.placement = status.placement.model_copy(update={"planned_exit": True})
    # The operator clears status.observed when it places a job: a running job shows only a
    # window of its current placement.
    window = job.series[-1] if job.series else None
    if job.phase is Phase.RUNNING and current_observed(job) is None:
        window = None
    if window is not None:
        t, frac = window
        status.observed = Observed(
            throughput_fraction=frac,
            window_seconds=step_s,
            tokens_per_second=frac * prof.standalone_tokens_per_second,
            updated_at=EPOCH + timedelta(seconds=t),
        )
    mine = [r for r in reports if r.job == job.key]
    evicted = [
        EvictionRecord(
            time=EPOCH + timedelta(seconds=r.time - EPOCH.timestamp()),
            node=r.node,
            gpu_indices=list(r.gpus),
            reason=r.reason,
            sla=r.sla,
            predicted_throughput_fraction=min(1.0, r.predicted.throughput_fraction),
            observed_throughput_fraction=r.observed.mean,
        )
        for r in mine
    ]
    # Moves and planned exits, recorded as the operator records them (no report).
    left = [
        EvictionRecord(
            time=EPOCH + timedelta(seconds=stay["end"]),
            node=stay["node"],
            gpu_indices=list(stay["gpus"]),
            reason=stay["left"]["reason"],
            sla=job.sla,
            predicted_throughput_fraction=min(1.0, max(0.0, stay["predicted"])),
            observed_throughput_fraction=stay["left"]["observed"],
            type=LeaveType(stay["left"]["type"]),
        )
        for stay in job.placements
        if "left" in stay
    ]
    records = sorted([*evicted, *left], key=lambda rec: rec.time)
    status.evictions = records[-MAX_EVICTION_RECORDS:]
    status.move_count = job.moves
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
    # One point per SLA window, with the dashboard's definitions (cluster.dashboard_point):
    # what the operator's dashboard would have plotted, so the charts end at the cards.
    shown: list[tuple[float, float, float, float | None]] = metrics.get("_dashboard", [])
    t0 = EPOCH.timestamp()
    series = {
        "harvestedUtilization": [(t0 + t, h) for t, h, _, _ in shown],
        "offlineThroughput": [(t0 + t, tp) for t, _, tp, _ in shown],
        "slaAttainment": [(t0 + t, a) for t, _, _, a in shown if a is not None],
    }
    end = online.busy.shape[1] - online.t0_step
    return dashboard_record(
        node_traces=node_traces(online, jobs, cfg["window_h"], cluster_raw["gate"]),
        offline_jobs=[offline_job(j, reports, cfg["monitor"]["window_s"]) for j in jobs],
        eviction_reports=reports,
        job_series={j.key: [(t0 + t, v) for t, v in j.series] for j in jobs if j.series},
        series=series,
        series_notes=events_note(results),
        sla_monitor=MonitorConfig.model_validate(cfg["monitor"]).sla_monitor(),
        bias=metrics.get("_bias"),
        risk_target=metrics.get("_risk_target", DEFAULT_RISK_TARGET),
        # The run's own figures (every step, every job-window), as its summary table prints
        # them: the dashboard's cards then agree with it, not just with the plotted points.
        period_means={
            name: float(metrics[key])
            for name, key in (
                ("harvestedUtilization", "harvested_utilization"),
                ("offlineThroughput", "gpus_saved"),
                ("slaAttainment", "sla_attainment"),
            )
            if metrics.get(key) is not None
        },
        title=f"simulated cluster ({results.get('scenario')}, {policy})",
        generated_at=EPOCH + timedelta(seconds=end * online.step_s),
    )


def events_note(results: dict[str, Any]) -> dict[str, str]:
    """Why a simulation has no preemption/reclamation series: the cluster level works on
    minute-long busy fractions, not on online requests and KV allocations, so it counts
    neither; the node level does, and its gleaner run's rates are quoted when it ran."""
    text = (
        "Not modelled by the cluster-level simulation: it works on minute-long busy "
        "fractions, not on online requests and memory allocations, so it counts no "
        "preemptions or reclamations (the NodeTraces' counters stay 0)."
    )
    run = ((results.get("node") or {}).get("runs") or {}).get("gleaner")
    if run:
        text += (
            f" The node-level simulation measured them for the gleaner policy: "
            f"{run['preemptions_per_request']:.2f} preemptions per online request "
            f"(at most {run['max_preemptions_per_request']}) and "
            f"{run['reclamations_per_minute']:.2f} reclamations per minute per GPU "
            "(report.html)."
        )
    return {"preemptions": text, "reclamations": text}
