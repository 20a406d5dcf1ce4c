"""``gleaner operator --prometheus-url`` against a real Prometheus and the real Kubernetes
control plane (docs/controlplane.md; namespace ``default``, which the backfilled series
name, emptied afterwards; KWOK runs the Pods), over HTTP.

Prometheus is Debian's server, backfilled by ``promtool`` (``gleaner.testing.prometheus``)
with agent metrics for two nodes: ``prom-good`` (offline work enabled 90% of the time) and
``prom-bad`` (30%), and with the per-job timeslice counters of two jobs. The cluster's
NodeTraces say the opposite about the two nodes, so a placement that follows them, or an
observation read from them, would fail the test: placement must follow Prometheus, the
SLA monitor must read ``gleaner_offline_job_timeslice_seconds_total``, and the GPU UUIDs in
the Pods come from the NodeTraces' inventory (agent metrics carry none). The operator's
per-job SLA gauges on its own ``/metrics`` follow the jobs.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gleaner.api.nodetrace import gpu_uuid
from gleaner.testing.controlplane import ControlPlane
from gleaner.testing.kube import (
    FAST_OPERATOR_FLAGS,
    KubeApi,
    OperatorProcess,
    nodetrace_manifest,
    offlinejob_manifest,
    wait_for,
)
from gleaner.testing.net import free_port
from gleaner.testing.prometheus import PrometheusServer, Series
from gleaner.testing.tenant import Tenant

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

GIB = 2.0**30
ENABLED = {"prom-good": 0.9, "prom-bad": 0.3}
TIMESLICE = {"steady": 0.8, "starved": 0.2}
"""Seconds of GPU time per second each job's work got (what its node's agent counted)."""
SLA_WINDOW = 2.0


def _counter(
    slope: float, start: float, end: float, step: float, labels: dict[str, str], name: str
) -> Series:
    times = np.arange(start, end, step)
    samples = [(float(t), float(slope * (t - start))) for t in times]
    return Series(name, labels, samples, "counter")


def agent_history(now: float) -> list[Series]:
    """Half an hour of agent metrics up to ten minutes from now (the test reads 'now')."""
    start, end = now - 1800, now + 600
    out: list[Series] = []
    for node, enabled in ENABLED.items():
        for gpu in ("0", "1"):
            labels = {"node": node, "gpu": gpu}
            out.append(
                _counter(
                    enabled, start, end, 15, labels, "gleaner_gpu_offline_enabled_seconds_total"
                )
            )
            out.append(
                _counter(
                    1 - enabled, start, end, 15, labels, "gleaner_gpu_online_busy_seconds_total"
                )
            )
            memory = [(float(t), 60 * GIB) for t in np.arange(start, end, 15)]
            out.append(Series("gleaner_gpu_harvestable_memory_bytes", labels, memory))
    # Per-job counters sampled finely enough for a rate over one SLA window.
    for job, rate in TIMESLICE.items():
        labels = {"namespace": "default", "job": job, "node": "prom-good", "gpu": "0"}
        out.append(
            _counter(
                rate, now - 120, end, 0.5, labels, "gleaner_offline_job_timeslice_seconds_total"
            )
        )
    return out


@pytest.fixture
def prometheus() -> Iterator[PrometheusServer]:
    with PrometheusServer(agent_history(time.time())) as server:
        yield server


@pytest.fixture
def default_tenant(
    control_plane: ControlPlane,
    gleaner_crds: list[str],
    kopf_crds: list[str],
    tmp_path: Path,
) -> Iterator[Tenant]:
    """The control plane's ``default`` namespace (the backfilled series name it) and the
    node names as they are (NodeTraces left by earlier tests are removed on open)."""
    with Tenant(control_plane, tmp_path / "tenant", namespaces=("default",)) as tenant:
        yield tenant


def test_placement_and_sla_follow_prometheus(
    default_tenant: Tenant, prometheus: PrometheusServer
) -> None:
    tenant = default_tenant
    api = tenant.api
    # The NodeTraces contradict Prometheus on the load; they only lend their inventory.
    tenant.apply_nodetrace(nodetrace_manifest("prom-good", gpus=2, offline_enabled=0.2))
    tenant.apply_nodetrace(nodetrace_manifest("prom-bad", gpus=2, offline_enabled=0.95))
    port = free_port()
    operator = OperatorProcess(
        tenant,
        [
            *FAST_OPERATOR_FLAGS,
            f"--peering={tenant.peering}",
            f"--sla-window={SLA_WINDOW:g}s",
            f"--prometheus-url={prometheus.url}",
            f"--http-port={port}",
            "--http-host=127.0.0.1",
        ],
    ).start()
    try:
        run_scenario(api, operator, f"http://127.0.0.1:{port}/metrics")
    finally:
        operator.stop()
        print(operator.log()[-6000:])  # shown by pytest only when the test failed


def job_series(metrics_url: str) -> dict[tuple[str, str], float]:
    """The operator's per-job SLA series: (metric, job) -> value."""
    with urllib.request.urlopen(metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("gleaner_operator_job_") and "job" in sample.labels:
                assert sample.labels["namespace"] == "default"
                out[(sample.name, sample.labels["job"])] = sample.value
    return out


def run_scenario(api: KubeApi, operator: OperatorProcess, metrics_url: str) -> None:
    def status(name: str) -> dict[str, Any]:
        return dict((api.get_job(name) or {}).get("status") or {})

    def wait_phase(name: str, *phases: str) -> dict[str, Any]:
        return wait_for(
            lambda: s if (s := status(name)).get("phase") in phases else {},
            timeout=40,
            message=lambda: f"{name} not in {phases}: {status(name)}\n{operator.log()[-3000:]}",
        )

    for name in TIMESLICE:
        api.create_job(offlinejob_manifest(name, sla=0.6))

    # Placement follows Prometheus: prom-good's 0.9, not its NodeTrace's 0.2 (nor prom-bad's
    # NodeTrace 0.95, which Prometheus puts at 0.3, below the SLA).
    gpus: dict[str, int] = {}
    for name in TIMESLICE:
        # KWOK runs the Pod as soon as it is bound: the job may be Running already.
        placement = wait_phase(name, "Scheduled", "Running")["placement"]
        assert placement["node"] == "prom-good"
        assert placement["compute"] == pytest.approx(0.9, abs=1e-6)
        assert placement["throughputFraction"] == pytest.approx(0.9, abs=1e-6)
        [gpus[name]] = placement["gpuIndices"]
        # Scheduled is recorded first, the Pod is created right after: wait for it.
        [pod] = wait_for(
            partial(api.pods, selector=f"gleaner.dev/job={name}"), message=operator.log
        )
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["NVIDIA_VISIBLE_DEVICES"] == gpu_uuid("prom-good", gpus[name])
        wait_phase(name, "Running")  # KWOK ran it
    assert sorted(gpus.values()) == [0, 1]

    # The SLA monitor reads the job's timeslice counter: 0.8 (kept), 0.2 (evicted).
    steady = wait_for(
        lambda: s if (s := status("steady")).get("observed") else {},
        timeout=40,
        message=lambda: f"steady never observed: {status('steady')}\n{operator.log()[-3000:]}",
    )
    assert steady["phase"] == "Running"
    assert steady["observed"]["throughputFraction"] == pytest.approx(0.8, abs=0.01)
    assert steady["observed"]["windowSeconds"] == SLA_WINDOW
    met = {c["type"]: c for c in steady["conditions"]}["SLAMet"]
    assert met["status"] == "True"

    starved = wait_phase("starved", "Evicted", "Unschedulable")
    [record] = starved["evictions"]
    assert record["node"] == "prom-good"
    assert record["observedThroughputFraction"] == pytest.approx(0.2, abs=0.01)
    assert starved["excludedNodes"] == ["prom-good"]
    # Away from prom-good only prom-bad is left, at 0.3 by Prometheus: below the SLA.
    starved = wait_phase("starved", "Unschedulable")
    assert starved["message"].startswith("0/2 nodes are available")
    assert status("steady")["phase"] == "Running"

    # The operator's per-job SLA gauges: both SLAs; an observation only for the bound job.
    observed = "gleaner_operator_job_observed_throughput_fraction"
    sla = "gleaner_operator_job_throughput_sla"
    series = job_series(metrics_url)
    assert series[(sla, "steady")] == series[(sla, "starved")] == 0.6
    assert series[(observed, "steady")] == pytest.approx(0.8, abs=0.01)
    assert (observed, "starved") not in series
    # Deleting the jobs removes their series.
    for name in TIMESLICE:
        api.delete_job(name)
    wait_for(
        lambda: job_series(metrics_url) == {},
        timeout=20,
        message=lambda: f"series left: {job_series(metrics_url)}\n{operator.log()[-3000:]}",
    )
