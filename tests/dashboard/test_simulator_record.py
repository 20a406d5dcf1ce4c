"""The simulator's dashboard record (gleaner.simulator.snapshot) is what the dashboard reads."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gleaner.api import NodeTrace, OfflineJob, Phase
from gleaner.dashboard.app import create_app
from gleaner.dashboard.build import build_dashboard, record_bias
from gleaner.dashboard.model import ClusterRecord
from gleaner.dashboard.sources import SnapshotSource, StaticSource
from gleaner.perfmodel import JobProfile
from gleaner.perfmodel.admission import DEFAULT_RISK_TARGET
from gleaner.scheduler import EvictionReport, PredictedFactors
from gleaner.simulator.cluster import SimJob, run_cluster
from gleaner.simulator.cluster_scenario import ClusterScenario
from gleaner.simulator.records import offline_job, snapshot
from gleaner.simulator.snapshot import dashboard_record, write_dashboard_record
from gleaner.testing.dashboard import PROFILE, example_record


def test_sim_record_validates_and_builds(tmp_path: Path) -> None:
    example = example_record()
    reports = [EvictionReport.from_json(r.report) for r in example.eviction_reports]
    raw = dashboard_record(
        node_traces=[NodeTrace.model_validate(t) for t in example.node_traces],
        offline_jobs=[OfflineJob.model_validate(j) for j in example.offline_jobs],
        eviction_reports=reports,
        job_series={"batch/translate": [(0.0, 0.3), (300.0, 0.4)]},
        series={"harvestedUtilization": [(0.0, 0.2), (60.0, 0.4)], "preemptions": [(0, 3)]},
        title="sim",
        generated_at=example.generated_at,
    )
    path = write_dashboard_record(tmp_path / "out" / "dashboard.json", raw)
    record = ClusterRecord.model_validate(json.loads(path.read_text()))
    snap = build_dashboard(record).snapshot
    assert snap.warnings == [] and snap.source == "simulation"
    assert len(snap.nodes) == 3 and len(snap.jobs) == 7 and len(snap.evictions) == 2
    assert [p.v for p in snap.series.harvested_utilization] == [0.2, 0.4]
    assert SnapshotSource(path).data().snapshot.title == "sim"
    with pytest.raises(ValueError, match="unknown series"):
        dashboard_record(node_traces=[], offline_jobs=[], series={"bogus": []})


@pytest.mark.slow
def test_real_simulation_output(tmp_path: Path) -> None:
    """A real quick ``gleaner simulate`` run writes a dashboard record the dashboard reads."""
    exe = shutil.which("gleaner")
    cli = [exe] if exe else [sys.executable, "-m", "gleaner.cli.main"]
    out = tmp_path / "sim"
    run = subprocess.run(
        [*cli, "simulate", "--out", str(out), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    snap = SnapshotSource(out / "dashboard.json").data().snapshot
    assert snap.source == "simulation" and snap.nodes and snap.warnings == []


# -- a record from a real (small) simulated cluster ---------------------------------------


def _simulated(seed: int = 5, node_runs: dict[str, Any] | None = None) -> ClusterRecord:
    cfg = ClusterScenario(
        nodes=4, duration_h=6.0, history_h=2.0, window_h=2.0, policies=["no-harvest", "gleaner"]
    )
    raw = run_cluster(cfg, seed=seed, gate_efficiency=0.96)
    results: dict[str, Any] = {"scenario": "test", "cluster": {"config": cfg.model_dump()}}
    if node_runs is not None:
        results["node"] = {"runs": node_runs}
    return ClusterRecord.model_validate(snapshot(raw, results))


@pytest.fixture(scope="module")
def sim_record() -> ClusterRecord:
    return _simulated()


def _running(record: ClusterRecord) -> list[OfflineJob]:
    jobs = [OfflineJob.model_validate(j) for j in record.offline_jobs]
    return [j for j in jobs if j.status.phase.value == "Running"]


def test_simulated_agents_report_the_job_on_each_gpu(sim_record: ClusterRecord) -> None:
    """The root cause of "GPUs harvested 0": perGPU[].offlineJob was never written."""
    running = _running(sim_record)
    assert len(running) >= 3
    expected: dict[tuple[str, int], str] = {}
    for job in running:
        assert job.status.placement is not None
        for g in job.status.placement.gpu_indices:
            key = (job.status.placement.node, g)
            assert key not in expected  # one job per GPU
            expected[key] = f"{job.metadata.namespace}/{job.metadata.name}"
    reported: dict[tuple[str, int], str] = {}
    for raw in sim_record.node_traces:
        trace = NodeTrace.model_validate(raw)
        for t in trace.status.per_gpu:
            if t.offline_job is not None:
                reported[(trace.metadata.name, t.index)] = t.offline_job
        assert trace.status.offline_jobs == len(
            {t.offline_job for t in trace.status.per_gpu if t.offline_job}
        )
    assert reported == expected


def test_cards_agree_with_jobs_nodetraces_and_charts(sim_record: ClusterRecord) -> None:
    snap = build_dashboard(sim_record).snapshot
    s = snap.summary
    running = [j for j in snap.jobs if j.phase == "Running"]
    gpus = [g for n in snap.nodes for g in n.gpus]
    held = [g for g in gpus if g.offline_job]
    # Cards = counts derived from the jobs and from the NodeTraces.
    assert s.gpus_with_offline_job == sum(j.gpu_count for j in running) == len(held) > 0
    assert {(n.name, g.index) for n in snap.nodes for g in n.gpus if g.offline_job} == {
        (j.node, g) for j in running for g in j.gpus
    }
    assert s.harvested_utilization == pytest.approx(
        sum(g.idle_fraction or 0.0 for g in held) / len(gpus)
    )
    assert s.harvested_utilization is not None and s.harvested_utilization > 0
    for n in snap.nodes:
        assert n.offline_jobs == sorted({j.key for j in running if j.node == n.name})
    # The charts end at the cards, at the record's (simulated) time.
    end = snap.generated_at.timestamp()
    series = snap.series
    for points, card in (
        (series.harvested_utilization, s.harvested_utilization),
        (series.offline_throughput, s.offline_throughput),
        (series.sla_attainment, s.sla_attainment),
    ):
        assert points and points[-1].t == pytest.approx(end)
        assert points[-1].v == pytest.approx(card, abs=1e-9)
    # Every time is on one clock: series, placements, evictions, the header.
    placed = [j.decided_at.timestamp() for j in running if j.decided_at is not None]
    assert placed and max(placed) <= end
    assert series.harvested_utilization[0].t >= end - 6 * 3600
    for e in snap.evictions:
        assert e.time.timestamp() <= end
        if e.next_attempt_after is not None:
            assert e.next_attempt_after > e.time


def test_period_cards_agree_with_the_simulation_summary() -> None:
    cfg = ClusterScenario(
        nodes=4, duration_h=6.0, history_h=2.0, window_h=2.0, policies=["no-harvest", "gleaner"]
    )
    raw = run_cluster(cfg, seed=5, gate_efficiency=0.96)
    results: dict[str, Any] = {"scenario": "test", "cluster": {"config": cfg.model_dump()}}
    metrics = raw["policies"]["gleaner"]
    period = build_dashboard(ClusterRecord.model_validate(snapshot(raw, results))).snapshot
    figures = period.summary.period
    assert figures is not None
    assert figures.harvested_utilization == pytest.approx(metrics["harvested_utilization"])
    assert figures.offline_throughput == pytest.approx(metrics["gpus_saved"])
    assert figures.sla_attainment == pytest.approx(metrics["sla_attainment"])


def test_a_live_cluster_shows_the_same_numbers_for_the_same_state(
    sim_record: ClusterRecord,
) -> None:
    """The builder does not depend on who wrote the record; an agent that has not reported
    a new placement yet does not change the cards either (placements win)."""
    live = sim_record.model_copy(update={"source": "cluster"})
    lagging_traces = []
    for raw in sim_record.node_traces:
        trace = NodeTrace.model_validate(raw)
        for t in trace.status.per_gpu:
            t.offline_job = None
        lagging_traces.append(trace.to_k8s())
    lagging = live.model_copy(update={"node_traces": lagging_traces})
    sim = build_dashboard(sim_record).snapshot.summary
    assert build_dashboard(live).snapshot.summary == sim
    assert build_dashboard(lagging).snapshot.summary == sim


def test_running_jobs_show_a_window_of_their_current_placement_only(
    sim_record: ClusterRecord,
) -> None:
    for job in _running(sim_record):
        placement, observed = job.status.placement, job.status.observed
        assert placement is not None and placement.decided_at is not None
        if observed is not None:
            assert observed.updated_at is not None
            assert observed.updated_at > placement.decided_at


def test_preemption_panel_explains_why_a_simulation_has_no_counts(tmp_path: Path) -> None:
    """The cluster level models no preemptions/reclamations: a note, not "no data" or 0."""
    node_runs = {
        "gleaner": {
            "preemptions_per_request": 0.25,
            "max_preemptions_per_request": 1,
            "reclamations_per_minute": 0.7,
        }
    }
    record = _simulated(node_runs=node_runs)
    notes = record.series.notes
    assert set(notes) == {"preemptions", "reclamations"}
    assert "Not modelled by the cluster-level simulation" in notes["preemptions"]
    assert "0.25 preemptions per online request" in notes["preemptions"]
    assert "0.70 reclamations per minute" in notes["reclamations"]
    assert not record.series.preemptions and not record.series.reclamations
    path = write_dashboard_record(tmp_path / "dashboard.json", record.to_json())
    with TestClient(create_app(SnapshotSource(path))) as client:
        assert client.get("/api/cluster").json()["series"]["notes"] == notes
        page = client.get("/").text
        panel = page.split("Preemptions and memory reclamations</figcaption>", 1)[1]
        panel = panel.split("</figure>", 1)[0]
        assert 'class="series-note"' in panel and "no data" not in panel
        assert "0.25 preemptions per online request" in panel
        # The node tables say "not modelled" (with the note) rather than a count of 0.
        nodes = len(record.node_traces)
        assert page.count('title="Not modelled') == 2 * nodes
        node = record.node_traces[0]["metadata"]["name"]
        gpus = len(record.node_traces[0]["status"]["gpus"])
        assert client.get(f"/nodes/{node}").text.count('title="Not modelled') == 2 * gpus
    # Without the node level the note still says why.
    bare = _simulated()
    assert "node-level" not in bare.series.notes["preemptions"]


def test_counts_show_when_a_source_has_them(record: ClusterRecord) -> None:
    """A cluster's NodeTrace counters still show as numbers (no note, no dash)."""
    snap = build_dashboard(record).snapshot
    assert snap.series.notes == {}
    with TestClient(create_app(StaticSource(build_dashboard(record)))) as client:
        page = client.get("/").text
    assert "series-note" not in page
    assert any(n.preemptions for n in snap.nodes)
    busiest = max(snap.nodes, key=lambda n: n.preemptions)
    assert f'<td data-value="{busiest.preemptions}">{busiest.preemptions}</td>' in page


@pytest.mark.parametrize("planned", [False, True])
def test_a_planned_exit_placement_is_recorded_as_the_operator_writes_it(planned: bool) -> None:
    """A simulated job placed by the planned exit's second pass carries
    ``status.placement.plannedExit``, so the dashboard shows it as it does on a cluster."""
    profile = JobProfile.from_api(PROFILE)
    job = SimJob(
        key="sim/large",
        gpus=4,
        sla=0.5,
        profile=profile,
        work_tokens=1e9,
        arrival=0.0,
        max_evictions=3,
        phase=Phase.RUNNING,
        predicted=PredictedFactors(
            compute=0.8, memory=0.9, multi_gpu=0.95, throughput_fraction=0.684
        ),
        placements=[{"t": 600.0, "node": "node-0", "gpus": [0, 1, 2, 3], "planned_exit": planned}],
    )
    status = offline_job(job, [], 300.0).status
    assert status.placement is not None and status.placement.planned_exit is planned
    record = example_record()
    record = record.model_copy(
        update={"offline_jobs": [*record.offline_jobs, offline_job(job, [], 300.0).to_k8s()]}
    )
    view = build_dashboard(record).snapshot.job("sim", "large")
    assert view is not None and view.planned_exit is planned


def test_the_record_carries_the_bias_table_and_risk_target_the_run_admitted_by(
    sim_record: ClusterRecord,
) -> None:
    """The dashboard scores a simulated job's other nodes with the run's own learned table
    and risk target, as it does the operator's on a cluster."""

    assert sim_record.admission is not None
    assert sim_record.admission.risk_target == DEFAULT_RISK_TARGET
    assert sim_record.bias is not None, "a six-hour run learns from its SLA windows"
    warnings: list[str] = []
    table = record_bias(sim_record, warnings)
    assert warnings == [] and len(table) > 0
    assert table.config.risk_target == DEFAULT_RISK_TARGET
    data = build_dashboard(sim_record)
    assert data.bias.to_json() == table.to_json()
