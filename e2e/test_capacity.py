"""Scenario 3: a job that fits nowhere says why, and is placed when capacity appears.

A four-GPU tensor-parallel job on a cluster of two-GPU nodes fits nowhere: it must be
Unschedulable with the scheduler's reasons (the same ones ``gleaner place`` gives for the
same traces), a ``FailedScheduling`` Event, and no Pod. Then a fourth node joins: its agent
starts and publishes a NodeTrace, which alone must get the job placed there, on all four
GPUs, without anyone touching the job.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gleaner.testing.system import GleanerSystem, SimNode, poll

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JOB = "qwen-32b-tp4"
NEW_NODE = SimNode("node-d", busy=(0.1, 0.1, 0.1, 0.1), free_gib=76.0, aligned=True)


def test_unschedulable_until_a_node_joins(
    start_system: Callable[..., GleanerSystem], examples: Path, tmp_path: Path
) -> None:
    system = start_system()
    doc = yaml.safe_load((examples / "qwen2.5-32b-tp2.yaml").read_text())
    doc["metadata"]["name"] = JOB
    doc["spec"]["gpus"] = 4
    del doc["spec"]["gpuSelector"]
    manifest = tmp_path / f"{JOB}.yaml"
    manifest.write_text(yaml.safe_dump(doc))

    done = system.gleaner(
        "place", "--trace", str(system.combined_trace), "--format", "json", str(manifest)
    )
    assert done.returncode == 0, done.stderr
    expected = json.loads(done.stdout)
    assert expected["placements"] == []
    [refusal] = expected["unschedulable"]
    assert refusal["reasons"]

    system.apply_file(manifest)
    job = system.wait_phase(JOB, "Unschedulable")
    message = job["status"]["message"]
    assert message.startswith("0/3 nodes are available"), message
    for reason in refusal["reasons"]:
        assert reason in message
    scheduled = {c["type"]: c for c in job["status"]["conditions"]}["Scheduled"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    failed = system.wait_events(JOB, "FailedScheduling")
    assert failed[0]["type"] == "Warning"
    assert system.pods("batch", JOB) == []
    poll(
        lambda: (system.operator_metric("gleaner_operator_unschedulable_total") or 0) >= 1,
        timeout=20,
        what="the operator counting an unschedulable job",
    )
    system.wait_dashboard(
        "/api/jobs?phase=Unschedulable",
        lambda body: [j["name"] for j in body] == [JOB],
        "the job listed as Unschedulable",
    )

    # Capacity appears: a node with four aligned GPUs joins (its agent starts).
    system.add_agent(NEW_NODE)
    job = system.wait_phase(JOB, "Running", timeout=60)
    placement = job["status"]["placement"]
    assert placement["node"] == NEW_NODE.name
    assert sorted(placement["gpuIndices"]) == [0, 1, 2, 3]
    assert placement["throughputFraction"] >= doc["spec"]["throughputSLA"]
    uuids = system.agent_health(NEW_NODE.name)["gpus"]
    assert placement["gpuUUIDs"] == [uuids[i] for i in placement["gpuIndices"]]
    [pod] = system.pods("batch", JOB)
    assert pod["spec"]["nodeName"] == NEW_NODE.name
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(placement["gpuUUIDs"])
    assert "Scheduled" in [e["reason"] for e in system.events("batch", JOB)]

    # The new node is in Prometheus (its agent is scraped) and on the dashboard.
    poll(
        lambda: (
            {dict(k)["node"] for k in system.prom_values("gleaner_gpu_online_busy_seconds_total")}
            >= {NEW_NODE.name}
        ),
        timeout=30,
        what=f"Prometheus scraping {NEW_NODE.name}'s agent",
    )
    timeslices = f'gleaner_offline_job_timeslice_seconds_total{{namespace="batch",job="{JOB}"}}'
    poll(
        lambda: {dict(k)["node"] for k in system.prom_values(timeslices)} == {NEW_NODE.name},
        timeout=30,
        what=f"{JOB}'s timeslices accounted on {NEW_NODE.name}",
    )
    nodes = system.wait_dashboard(
        "/api/nodes",
        lambda body: NEW_NODE.name in {n["name"] for n in body},
        f"{NEW_NODE.name} on the dashboard",
    )
    [view] = [n for n in nodes if n["name"] == NEW_NODE.name]
    assert len(view["gpus"]) == 4
