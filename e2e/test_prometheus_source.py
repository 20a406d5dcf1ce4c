"""Scenario 7: the operator reads the agents' metrics from Prometheus (``--prometheus-url``).

Instead of NodeTraces, the operator takes its node summaries and its SLA observations from
the real Prometheus that scrapes the agents. ``gleaner place --prometheus --at`` asks the
same Prometheus about the same window and must agree on where the Mistral example goes; the
SLA monitor must observe the job's throughput from the agent's per-job timeslice counter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gleaner.testing.system import GleanerSystem

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JOB = "mistral-7b-ticket-triage"
SLA = 0.6


def test_operator_on_prometheus(start_system: Callable[..., GleanerSystem], examples: Path) -> None:
    system = start_system(operator_reads_prometheus=True)
    manifest = examples / "mistral-7b-profile-configmap.yaml"
    system.apply_file(manifest)
    job = system.wait_phase(JOB, "Running")
    placement = job["status"]["placement"]
    assert placement["throughputFraction"] >= SLA

    # Asked about the same window as the operator's pass (which ends at decidedAt): the
    # agents' metrics keep moving, and a later window may well choose another GPU.
    done = system.gleaner(
        "place",
        "--prometheus",
        system.prom.url,
        "--at",
        placement["decidedAt"],
        "--format",
        "json",
        str(manifest),
    )
    assert done.returncode == 0, done.stderr
    [expected] = json.loads(done.stdout)["placements"]
    assert (placement["node"], placement["gpuIndices"]) == (expected["node"], expected["gpus"])
    assert placement["compute"] == pytest.approx(expected["compute"], abs=0.06)

    # The SLA monitor observes the job through Prometheus (the per-job timeslice rate). One
    # 2 s window can land on a scrape gap or a stalled test machine, so the test waits for a
    # window at the prediction (within 0.1) rather than judging the first one above the SLA.
    predicted = placement["throughputFraction"]
    observed = system.wait_job(
        JOB,
        lambda j: (
            abs(
                ((j.get("status") or {}).get("observed") or {}).get("throughputFraction", -1.0)
                - predicted
            )
            <= 0.1
        ),
        "an SLA window observed through Prometheus at the prediction",
    )["status"]["observed"]
    assert observed["windowSeconds"] == pytest.approx(2.0)
    assert observed["throughputFraction"] >= SLA
    [pod] = system.pods("batch", JOB)
    assert pod["spec"]["nodeName"] == placement["node"]

    # GPU UUIDs come from the NodeTraces (agent metrics carry none): the binding contract holds.
    uuids = system.agent_health(placement["node"])["gpus"]
    assert placement["gpuUUIDs"] == [uuids[g] for g in placement["gpuIndices"]]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(placement["gpuUUIDs"])
