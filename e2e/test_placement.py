"""Scenario 1: the examples land where the scheduler says, bound by the binding contract.

Three agents replay distinct online traces and publish NodeTraces; the operator places the
examples from those NodeTraces. ``gleaner place`` run on the very online traces the agents
replay must agree: the same node and GPUs for every placed job (factors within a small
tolerance: the agents measure the trace through their compute gate over a 10 s window),
the same reasons for every job that fits nowhere. Then every bound Pod must honour
DESIGN.md's binding contract, the NodeTraces must have filled in, the agents must have
learned their offline jobs, and Prometheus, the operator's /metrics and the dashboard API
must tell the same story.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gleaner.testing.fixtures import container_env
from gleaner.testing.system import GleanerSystem, poll

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SHIM = "/var/lib/gleaner/lib/libgleaner_shim.so"
FACTOR_TOLERANCE = 0.06


def _qwen_any_pool(examples: Path, out: Path) -> Path:
    """The TP=2 example without its node-pool selector (simulated nodes carry no labels)."""
    doc = yaml.safe_load((examples / "qwen2.5-32b-tp2.yaml").read_text())
    doc["metadata"]["name"] = "qwen-32b-any-pool"
    del doc["spec"]["gpuSelector"]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(doc))
    return out


def _check_pod_contract(
    system: GleanerSystem, job: dict[str, Any], template: dict[str, Any]
) -> dict[str, Any]:
    name = job["metadata"]["name"]
    placement = job["status"]["placement"]
    pods = system.pods("batch", name)
    assert [p["metadata"]["name"] for p in pods] == [f"{name}-0"], "one Pod, <job>-<attempt>"
    pod = pods[0]
    meta, spec = pod["metadata"], pod["spec"]
    assert spec["nodeName"] == placement["node"]
    owners = meta.get("ownerReferences") or []
    assert len(owners) == 1
    assert owners[0]["kind"] == "OfflineJob"
    assert owners[0]["name"] == name
    assert owners[0]["uid"] == job["metadata"]["uid"]
    assert owners[0].get("controller") is True
    assert meta["labels"]["gleaner.dev/job"] == name
    assert meta["labels"]["gleaner.dev/role"] == "offline"
    assert meta["labels"]["gleaner.dev/attempt"] == "0"
    gpus = placement["gpuIndices"]
    assert meta["annotations"]["gleaner.dev/gpus"] == ",".join(map(str, gpus))

    # The GPU UUIDs are the ones the node's agent reports (its /healthz and its NodeTrace).
    agent_uuids = system.agent_health(placement["node"])["gpus"]
    expected_uuids = [agent_uuids[i] for i in gpus]
    assert placement["gpuUUIDs"] == expected_uuids
    trace = system.nodetrace(placement["node"])
    assert trace is not None
    assert [g["uuid"] for g in trace["status"]["gpus"]] == agent_uuids

    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    host_paths = {v["hostPath"]["path"]: n for n, v in volumes.items() if "hostPath" in v}
    assert "/var/lib/gleaner/lib" in host_paths
    assert "/run/gleaner" in host_paths
    for tv in template["spec"].get("volumes") or []:
        assert tv["name"] in volumes, f"template volume {tv['name']} kept"
    template_env = {c["name"]: container_env(c) for c in template["spec"]["containers"]}
    for container in spec["containers"]:
        env = container_env(container)
        assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(expected_uuids)
        assert SHIM in env["LD_PRELOAD"].split(":")
        assert env["GLEANER_ROLE"] == "offline"
        assert env["GLEANER_SOCKET"] == "/run/gleaner/agent.sock"
        assert env["GLEANER_JOB"] == f"batch/{name}"
        for key, value in template_env[container["name"]].items():
            assert env.get(key) == value, f"template env {key} kept"
        mounts = {m["name"]: m for m in container.get("volumeMounts") or []}
        assert host_paths["/var/lib/gleaner/lib"] in mounts
        assert mounts[host_paths["/var/lib/gleaner/lib"]].get("readOnly") is True
        assert host_paths["/run/gleaner"] in mounts
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            assert "nvidia.com/gpu" not in (resources.get(kind) or {})
    return pod


def test_examples_land_where_the_scheduler_says(
    start_system: Callable[..., GleanerSystem], examples: Path, tmp_path: Path
) -> None:
    system = start_system()
    qwen = _qwen_any_pool(examples, tmp_path / "jobs" / "qwen-any-pool.yaml")
    # The examples with a profile; the one profiled on submit (profileFrom.auto) has none
    # to place with until the operator has measured it (e2e/controlplane covers it).
    hand = [
        path
        for path in sorted(examples.glob("*.yaml"))
        if not any(
            ((doc.get("spec") or {}).get("profileFrom") or {}).get("auto")
            for doc in yaml.safe_load_all(path.read_text())
            if isinstance(doc, dict)
        )
    ]
    files = [qwen, *hand]
    templates = {}
    slas = {}
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc.get("kind") == "OfflineJob":
                templates[doc["metadata"]["name"]] = doc["spec"]["template"]
                slas[doc["metadata"]["name"]] = doc["spec"]["throughputSLA"]

    # What the scheduler says, offline, from the online traces the agents replay.
    done = system.gleaner(
        "place", "--trace", str(system.combined_trace), "--format", "json", *map(str, files)
    )
    assert done.returncode == 0, done.stderr
    expected = json.loads(done.stdout)
    placed = {p["job"].split("/", 1)[1]: p for p in expected["placements"]}
    refused = {u["job"].split("/", 1)[1]: u["reasons"] for u in expected["unschedulable"]}
    assert set(placed) == {"qwen-32b-any-pool", "mistral-7b-ticket-triage"}, expected
    assert set(refused) == {"llama-8b-nightly-summaries", "qwen-32b-eval-sweep"}, expected

    # Apply in the scheduler's queue order (most GPUs first), as `place` considers them:
    # the operator places jobs as they arrive, so arrival order is queue order here.
    system.apply_file(qwen)
    system.wait_phase("qwen-32b-any-pool", "Running")
    for path in hand:
        system.apply_file(path)

    for name, want in placed.items():
        job = system.wait_phase(name, "Running")
        status = job["status"]
        p = status["placement"]
        assert (p["node"], p["gpuIndices"]) == (want["node"], want["gpus"]), (name, p, want)
        for ours, theirs in (
            ("compute", "compute"),
            ("memory", "memory"),
            ("multiGPU", "multi_gpu"),
            ("throughputFraction", "throughput_fraction"),
        ):
            assert p[ours] == pytest.approx(want[theirs], abs=FACTOR_TOLERANCE), (name, ours)
        # The fraction is the product of the factors times the bias the operator had learned
        # for the node by then (its SLA monitor feeds the table while earlier jobs run), which
        # the Scheduled condition prints to two decimals.
        conditions = {c["type"]: c for c in status["conditions"]}
        printed = re.search(r" x bias (\d+\.\d\d) = ", conditions["Scheduled"]["message"])
        assert printed is not None, conditions["Scheduled"]
        product = p["compute"] * p["memory"] * p["multiGPU"]
        assert p["throughputFraction"] == pytest.approx(
            product * float(printed.group(1)), abs=0.005 * product + 1e-9
        )
        assert p["throughputFraction"] >= slas[name]
        assert conditions["Valid"]["status"] == "True"
        assert conditions["Scheduled"]["status"] == "True"
        assert status["pods"] == [f"{name}-0"]
        _check_pod_contract(system, job, templates[name])
        reasons = [e["reason"] for e in system.events("batch", name)]
        assert "Scheduled" in reasons

    # A trace file records no GPU product, so `place` adds that caveat to a product
    # mismatch; the operator reads the product from the NodeTraces and gives the same
    # reason without it.
    unknown_product = " (GPU product not reported)"
    for name, reasons in refused.items():
        job = system.wait_phase(name, "Unschedulable")
        message = job["status"]["message"]
        for reason in reasons:
            assert reason.replace(unknown_product, "") in message, (name, reason, message)
        scheduled = {c["type"]: c for c in job["status"]["conditions"]}["Scheduled"]
        assert scheduled["status"] == "False"
        assert scheduled["reason"] == "Unschedulable"
        assert system.pods("batch", name) == []
        assert system.wait_events(name, "FailedScheduling")

    # NodeTraces filled in from the agents: inventory, a window, idle fractions near the
    # traces', and the offline job on each GPU the operator bound.
    for node in system.nodes:
        trace = system.nodetrace(node.name)
        assert trace is not None
        status = trace["status"]
        assert len(status["gpus"]) == node.gpus
        assert 0 < status["window"]["seconds"] <= 15
        idle = 1 - sum(node.busy) / node.gpus
        assert status["idleFraction"] == pytest.approx(idle, abs=0.1), node.name

    def jobs_on_gpus(node: str) -> dict[int, str | None]:
        trace = system.nodetrace(node) or {}
        return {g["index"]: g.get("offlineJob") for g in trace["status"]["perGPU"]}

    for name in placed:
        p = system.job(name)["status"]["placement"]

        def reported(
            node: str = p["node"], gpus: list[int] = p["gpuIndices"], job: str = f"batch/{name}"
        ) -> bool:
            held = jobs_on_gpus(node)
            return all(held.get(g) == job for g in gpus)

        poll(
            reported,
            timeout=30,
            what=f"NodeTrace {p['node']} showing batch/{name} on GPUs {p['gpuIndices']}",
        )
        health = system.agent_health(p["node"])
        assert {int(g) for g, j in health["offline_jobs"].items() if j == f"batch/{name}"} == set(
            p["gpuIndices"]
        )

    # Metrics. Prometheus scrapes every agent: per-GPU counters of every node, and the
    # per-job timeslice counter of each placed job on its node, growing.
    enabled = system.prom_values("gleaner_gpu_offline_enabled_seconds_total")
    seen = {(dict(k)["node"], dict(k)["gpu"]) for k in enabled}
    assert seen >= {(n.name, str(g)) for n in system.nodes for g in range(n.gpus)}
    for name in placed:
        node = system.job(name)["status"]["placement"]["node"]
        query = (
            "rate(gleaner_offline_job_timeslice_seconds_total"
            f'{{namespace="batch",job="{name}"}}[5s])'
        )
        rates = poll(
            lambda: system.prom_values(query),  # noqa: B023 (called before the next loop)
            timeout=30,
            what=f"Prometheus rate of {name}'s timeslice counter",
        )
        assert {dict(k)["node"] for k in rates} == {node}
        assert all(v > 0 for v in rates.values())

    assert (system.operator_metric("gleaner_operator_placements_total") or 0) >= len(placed)
    poll(
        lambda: (
            system.operator_metric("gleaner_operator_jobs", phase="Running") == len(placed)
            and system.operator_metric("gleaner_operator_jobs", phase="Unschedulable")
            == len(refused)
        ),
        timeout=20,
        what="operator's jobs-by-phase gauge",
    )
    assert (system.operator_metric("gleaner_operator_unschedulable_total") or 0) >= len(refused)
    prom_placements = system.prom_values('gleaner_operator_placements_total{role="operator"}')
    assert prom_placements and max(prom_placements.values()) >= len(placed)

    # The dashboard API (served by the operator) tells the same.
    assert {"/api/jobs", "/api/jobs/{namespace}/{name}", "/api/nodes"} <= system.api_paths()

    def jobs_agree(body: list[dict[str, Any]]) -> bool:
        views = {j["name"]: j for j in body if j["namespace"] == "batch"}
        for name in placed:
            p = system.job(name)["status"]["placement"]
            view = views.get(name) or {}
            if (view.get("phase"), view.get("node"), view.get("gpus")) != (
                "Running",
                p["node"],
                p["gpuIndices"],
            ):
                return False
            predicted = view.get("predicted") or {}
            if predicted.get("throughputFraction") != pytest.approx(p["throughputFraction"]):
                return False
        return all((views.get(n) or {}).get("phase") == "Unschedulable" for n in refused)

    system.wait_dashboard("/api/jobs", jobs_agree, "every job with its phase and placement")
    for name in placed:
        p = system.job(name)["status"]["placement"]
        status_code, view = system.dashboard(f"/api/jobs/batch/{name}")
        assert status_code == 200
        runner_ups = view["runnerUps"]
        assert runner_ups, f"{name}: the job page explains the other nodes"
        assert all(r["why"] for r in runner_ups), runner_ups
    status_code, nodes = system.dashboard("/api/nodes")
    assert status_code == 200
    by_name = {n["name"]: n for n in nodes}
    assert set(by_name) == {n.name for n in system.nodes}
    for node in system.nodes:
        uuids = [g["uuid"] for g in by_name[node.name]["gpus"]]
        assert uuids == system.agent_health(node.name)["gpus"]
    assert system.dashboard("/api/jobs/batch/no-such-job")[0] == 404
