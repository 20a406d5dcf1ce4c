"""KubeSource against kmock's Kubernetes API emulator over real HTTP, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gleaner.dashboard.sources import KubeSource, SourceError
from gleaner.scheduler import EvictionReport
from gleaner.testing.dashboard import example_record
from gleaner.testing.kube import KubeApi, KubeEmulator
from gleaner.testing.net import free_port


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeEmulator]:
    with KubeEmulator(tmp_path, namespaces=("default", "batch", "research")) as emulator:
        yield emulator


def seed(kube: KubeEmulator) -> None:
    """The example record's objects, written as the agents and the operator would."""
    record = example_record()
    api = KubeApi(kube)
    for trace in record.node_traces:
        api.apply_nodetrace(trace)
    for job in record.offline_jobs:
        body = {k: v for k, v in job.items() if k != "status"}
        meta = body["metadata"]
        if meta["name"] == "translate":
            windows = [[p.t, p.v] for p in record.job_series["batch/translate"]]
            meta["annotations"] = {
                "gleaner.dev/sla-windows": json.dumps(
                    {"node": "gpu-node-b", "gpus": [0], "placedAt": 0, "windows": windows}
                )
            }
        api.create_job(body)
        api.custom.patch_namespaced_custom_object_status(
            "gleaner.dev",
            "v1alpha1",
            meta["namespace"],
            "offlinejobs",
            meta["name"],
            {"status": job["status"]},
        )
    api.core.create_namespaced_config_map(
        "research",
        {
            "metadata": {"name": "llama-profile"},
            "data": {"profile.yaml": json.dumps(record.profiles["research/from-configmap"])},
        },
    )
    for rec in record.eviction_reports:
        report = EvictionReport.from_json(rec.report)
        name = rec.config_map or f"{report.job.split('/')[-1]}-sla-eviction-1"
        api.core.create_namespaced_config_map(
            rec.namespace,
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        "gleaner.dev/report": "sla-eviction",
                        "gleaner.dev/job": report.job.split("/")[-1],
                    },
                },
                "data": {"report.json": json.dumps(report.to_json())},
            },
        )
    # a ConfigMap without the label is no report
    api.core.create_namespaced_config_map(
        "batch", {"metadata": {"name": "unrelated"}, "data": {"report.json": "{}"}}
    )


def test_kube_source_reads_the_cluster(kube: KubeEmulator) -> None:
    seed(kube)
    clock = [1_000_000.0]
    source = KubeSource(kube.client(), ttl_seconds=10, clock=lambda: clock[0])
    snap = source.data().snapshot
    assert snap.source == "cluster" and snap.warnings == []
    assert [n.name for n in snap.nodes] == ["gpu-node-a", "gpu-node-b", "gpu-node-c"]
    assert len(snap.jobs) == 7
    assert sorted(e.id for e in snap.evictions) == [
        "batch.translate-old-sla-eviction-1",
        "research.long-context-sla-eviction-1",
    ]
    translate = snap.job("batch", "translate")
    assert translate is not None and len(translate.observed_series) == 24  # from the annotation
    # profileFrom is resolved through the ConfigMap, so the pending job gets runner-ups
    pending = source.data().job_detail("research", "from-configmap")
    assert pending is not None and pending.runner_ups
    # cached within the TTL, then one more history point per refresh
    assert len(source.data().snapshot.series.harvested_utilization) == 1
    clock[0] += 30
    series = source.data().snapshot.series.harvested_utilization
    assert [p.t for p in series] == [1_000_000.0, 1_000_030.0]


def test_kube_source_namespace_filter(kube: KubeEmulator) -> None:
    seed(kube)
    snap = KubeSource(kube.client(), namespace="research").data().snapshot
    assert {j.namespace for j in snap.jobs} == {"research"}
    assert [e.namespace for e in snap.evictions] == ["research"]


def test_kube_source_keeps_last_data_when_the_cluster_goes_away(tmp_path: Path) -> None:
    clock = [0.0]
    with KubeEmulator(tmp_path) as kube:
        source = KubeSource(kube.client(), ttl_seconds=1, clock=lambda: clock[0])
        assert source.data().snapshot.nodes == []
    clock[0] = 100.0
    snap = source.data().snapshot
    assert any("cannot read the cluster" in w for w in snap.warnings)
    fresh = KubeSource(kube.client())
    with pytest.raises(SourceError, match="cannot read the cluster"):
        fresh.data()


def gleaner(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gleaner.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.slow
def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    r = gleaner("dashboard", "--snapshot", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "missing.json" in r.stderr
    r = gleaner("dashboard", "--snapshot", "x.json", "--kubeconfig", "k")
    assert r.returncode == 2 and "cannot be combined" in r.stderr
    r = gleaner("dashboard", "--kubeconfig", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and r.stderr.startswith("error: kubeconfig")
    r = gleaner("dashboard", "--port", "70000")
    assert r.returncode == 2
    r = gleaner("dashboard", "--kubeconfig", str(tmp_path / "nope.yaml"), "--risk-target", "2")
    assert r.returncode == 2 and "--risk-target must be between 0 and 1" in r.stderr
    r = gleaner("dashboard", "--kubeconfig", "k", "--trace-stale-after", "soon")
    assert r.returncode == 2 and r.stderr.startswith("error: --trace-stale-after:"), r.stderr


@pytest.mark.slow
def test_cli_serves_a_cluster_and_a_snapshot(kube: KubeEmulator, tmp_path: Path) -> None:
    seed(kube)
    snapshot = tmp_path / "dashboard.json"
    snapshot.write_text(json.dumps(example_record().to_json()))
    for args in (
        ["--kubeconfig", str(kube.kubeconfig)],
        ["--snapshot", str(snapshot)],
    ):
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gleaner.cli.main", "dashboard", *args, "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "NO_COLOR": "1"},
        )
        try:
            body = None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and body is None:
                try:
                    r = httpx.get(f"http://127.0.0.1:{port}/api/cluster", timeout=2)
                    body = r.json()
                except httpx.TransportError:
                    time.sleep(0.2)
            assert body is not None, "the dashboard did not answer"
            assert body["summary"]["nodes"] == 3
            assert httpx.get(f"http://127.0.0.1:{port}/jobs", timeout=5).status_code == 200
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_an_evicted_jobs_throughput_history_stays(kube: KubeEmulator) -> None:
    from gleaner.api.contract import ANNOTATION_SLA_WINDOWS

    seed(kube)
    clock = [1_000_000.0]
    source = KubeSource(kube.client(), ttl_seconds=10, clock=lambda: clock[0])
    before = source.data().snapshot.job("batch", "translate")
    assert before is not None and len(before.observed_series) == 24
    # The operator evicts the job: it clears the window annotation of the old placement.
    KubeApi(kube).custom.patch_namespaced_custom_object(
        "gleaner.dev",
        "v1alpha1",
        "batch",
        "offlinejobs",
        "translate",
        {"metadata": {"annotations": {ANNOTATION_SLA_WINDOWS: None}}},
    )
    clock[0] += 30
    after = source.data().snapshot.job("batch", "translate")
    assert after is not None and after.observed_series == before.observed_series


def test_the_live_dashboard_judges_with_the_operators_sla_monitor(kube: KubeEmulator) -> None:
    """The operator mounts the dashboard with its own SLA monitor settings, and the record
    (hence every SLA-window verdict) carries them."""
    from gleaner.dashboard import routers
    from gleaner.dashboard.build import record_monitor
    from gleaner.dashboard.model import SlaMonitorSettings
    from gleaner.scheduler.monitor import SLAMonitorConfig

    seed(kube)
    config = SLAMonitorConfig(window_seconds=1.0, grace_seconds=0.0, max_sla_window_seconds=1.0)
    source = KubeSource(kube.client(), sla_monitor=SlaMonitorSettings.of(config))
    judged = record_monitor(source.record())
    assert (judged.window_seconds, judged.grace_seconds, judged.max_sla_window_seconds) == (
        1.0,
        0.0,
        1.0,
    )
    assert record_monitor(KubeSource(kube.client()).record()).grace_seconds == 300.0
    assert len(routers(client=kube.client(), sla_monitor=config)) == 1


def test_runner_ups_are_judged_with_the_operators_bias_table(kube: KubeEmulator) -> None:
    """A node the operator has learned under-delivers is not offered as one that fits: the
    live dashboard reads the operator's ConfigMap gleaner-bias from its state namespace and
    scores other nodes with it at the operator's risk target, as the scheduler does."""
    from gleaner.dashboard.model import AdmissionSettings
    from gleaner.operator.bias import to_configmap
    from gleaner.scheduler.bias import BiasTable
    from gleaner.scheduler.risk import AdmissionRisk

    seed(kube)
    taken = example_record().generated_at.timestamp()  # when the agents last reported
    before = KubeSource(kube.client(), state_namespace="default", clock=lambda: taken).data()
    pending = before.job_detail("research", "from-configmap")
    assert pending is not None
    fits = [r for r in pending.runner_ups if r.feasible]
    assert fits, "without corrections some node fits the pending job"
    node = fits[0].node
    assert node is not None and "bias" not in fits[0].why

    # The operator observed that node deliver a fifth of what the model said, 40 times.
    api = KubeApi(kube)
    observed = [(0.2, 0.9)] * 40
    table = BiasTable(AdmissionRisk(0.95).bias_config())
    for seen, said in observed:
        table.observe(node, "", observed=seen, predicted=said)
    api.core.create_namespaced_config_map("default", to_configmap(table, "default"))
    unbiased = fits[0].factors.throughput_fraction if fits[0].factors else None
    assert unbiased is not None

    for risk in (0.95, None):
        same = BiasTable(AdmissionRisk(risk).bias_config())  # the operator's, at this target
        for seen, said in observed:
            same.observe(node, "", observed=seen, predicted=said)
        source = KubeSource(
            kube.client(),
            state_namespace="default",
            admission=AdmissionSettings(risk_target=risk),
            clock=lambda: taken,
        )
        after = source.data().job_detail("research", "from-configmap")
        assert after is not None
        [there] = [r for r in after.runner_ups if r.node == node]
        assert there.factors is not None
        assert there.factors.throughput_fraction == pytest.approx(
            unbiased * same.factor(node), rel=1e-6
        )
        assert f"bias {same.factor(node):.2f}" in there.why, there.why
        if risk is not None:  # the residual quantile takes it below the SLA
            assert not there.feasible, there.why

    # Not told where the operator keeps it: not read (the other nodes judged as before).
    blind = KubeSource(kube.client()).data().job_detail("research", "from-configmap")
    assert blind is not None
    assert next(r.node for r in blind.runner_ups if r.feasible) == node


def test_an_unreadable_bias_table_is_a_warning(kube: KubeEmulator) -> None:
    seed(kube)
    KubeApi(kube).core.create_namespaced_config_map(
        "default", {"metadata": {"name": "gleaner-bias"}, "data": {"bias.json": "{not json"}}
    )
    snap = KubeSource(kube.client(), state_namespace="default").data().snapshot
    assert [w for w in snap.warnings if w.startswith("bias table gleaner-bias: malformed")]


def test_runner_ups_say_a_node_is_stale_as_the_operator_does(kube: KubeEmulator) -> None:
    """A node whose agent stopped reporting is not offered as one that fits: past the
    operator's --trace-stale-after it is unavailable, in the scheduler's words."""
    from gleaner.dashboard.model import AdmissionSettings

    seed(kube)
    taken = example_record().generated_at.timestamp()

    def pending(after_s: float, stale_after_s: float = 600.0) -> dict[str, str]:
        source = KubeSource(
            kube.client(),
            admission=AdmissionSettings(trace_stale_after_seconds=stale_after_s),
            clock=lambda: taken + after_s,
        )
        job = source.data().job_detail("research", "from-configmap")
        assert job is not None
        return {str(r.node): r.why for r in job.runner_ups}

    fresh = pending(60.0)
    assert fresh and not any("stale" in why for why in fresh.values()), fresh
    assert set(pending(601.0).values()) == {"node unavailable: stale trace"}
    assert not any("stale" in why for why in pending(601.0, stale_after_s=3600.0).values())


def test_runner_ups_use_the_operators_last_scheduling_pass(kube: KubeEmulator) -> None:
    """In the operator, a job's other nodes are scored on what its last scheduling pass
    judged them by (on a node with hours, the bound over the coming hours), while that pass
    is recent; an old pass is not used."""
    from dataclasses import replace
    from datetime import UTC, datetime

    import numpy as np

    from gleaner.dashboard.sources import JUDGED_MAX_AGE_S

    seed(kube)
    taken = example_record().generated_at.timestamp()
    plain = KubeSource(kube.client(), clock=lambda: taken).data()
    job = plain.job_detail("research", "from-configmap")
    assert job is not None
    fits = [r for r in job.runner_ups if r.feasible]
    assert fits
    node = str(fits[0].node)
    latest = plain.summaries[node]
    # What the pass judged the node by: its GPUs open to offline work a tenth of the time.
    busy = replace(
        latest,
        offline_enabled_seconds=np.full(len(latest.gpus), 0.1 * latest.window_seconds),
        online_busy_seconds=np.full(len(latest.gpus), 0.9 * latest.window_seconds),
    )

    def scored(pass_age_s: float) -> str:
        at = datetime.fromtimestamp(taken - pass_age_s, tz=UTC)
        source = KubeSource(kube.client(), clock=lambda: taken, judged=lambda: (at, {node: busy}))
        detail = source.data().job_detail("research", "from-configmap")
        assert detail is not None
        [there] = [r for r in detail.runner_ups if r.node == node]
        return there.why

    assert "compute 0.10" in scored(5.0)
    assert scored(JUDGED_MAX_AGE_S + 5.0) == fits[0].why
