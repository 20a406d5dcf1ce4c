"""Scenario 4: the operator is killed (SIGKILL) mid-way and restarted.

The operator makes a placement's Pod first and records the placement in the job's status
after it (once the Pod runs, or a few seconds later). With a bind delay injected
(``GLEANER_OPERATOR_BIND_DELAY``, the operator's test-only knob, which holds the status
write back), one job is left with its Pod made but its placement unrecorded when the
operator is SIGKILLed; another job is already running. The restarted operator (a new
process, no delay; the old one's peering record is still there) must record the Pod's
placement with exactly one Pod, without deciding again, and must leave the running job
alone: no duplicate Pods, no lost status.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gleaner.testing.system import GleanerSystem, poll

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUNNING = "mistral-7b-ticket-triage"
IN_FLIGHT = "llama-8b-any-gpu"
BIND_DELAY = "10"


def _llama_any_gpu(examples: Path) -> dict[str, Any]:
    import yaml

    doc: dict[str, Any] = yaml.safe_load((examples / "llama-3.1-8b-batch.yaml").read_text())
    doc["metadata"]["name"] = IN_FLIGHT
    del doc["spec"]["gpuSelector"]  # simulated GPUs are not H100s
    return doc


def _kept(status: dict[str, Any]) -> dict[str, Any]:
    """The parts of a status a restart must not change."""
    return {
        k: status.get(k)
        for k in ("phase", "placement", "pods", "evictionCount", "evictions", "excludedNodes")
    }


def test_sigkill_mid_binding_no_duplicates_no_lost_status(
    start_system: Callable[..., GleanerSystem], examples: Path
) -> None:
    system = start_system(operator_env={"GLEANER_OPERATOR_BIND_DELAY": BIND_DELAY})
    system.apply_file(examples / "mistral-7b-profile-configmap.yaml")
    before = system.wait_phase(RUNNING, "Running", timeout=60)["status"]

    system.apply(_llama_any_gpu(examples))
    [made] = poll(
        lambda: system.pods("batch", IN_FLIGHT) or None,
        timeout=60,
        what="the in-flight job's Pod made",
    )
    phase = (system.job(IN_FLIGHT).get("status") or {}).get("phase")
    assert phase not in ("Scheduled", "Running"), "the bind delay holds the status write back"
    system.kill_operator()
    assert system.operator is not None and not system.operator.alive()
    # The Pod is there, the placement not recorded: what the restart must finish.
    assert (system.job(IN_FLIGHT).get("status") or {}).get("placement") is None
    node = made["spec"]["nodeName"]
    gpus = made["metadata"]["annotations"]["gleaner.dev/gpus"]

    system.start_operator(env={"GLEANER_OPERATOR_BIND_DELAY": "0"})
    system.wait_operator_ready()
    after = system.wait_phase(IN_FLIGHT, "Running", timeout=60)["status"]
    # Recorded where the Pod was made, not decided again.
    assert after["placement"]["node"] == node
    assert ",".join(map(str, after["placement"]["gpuIndices"])) == gpus
    assert after["pods"] == [f"{IN_FLIGHT}-0"]
    [pod] = system.pods("batch", IN_FLIGHT)
    assert pod["metadata"]["name"] == f"{IN_FLIGHT}-0"
    assert pod["metadata"]["uid"] == made["metadata"]["uid"], "the same Pod, not a new one"

    # The restarted operator has made passes over both jobs (its gauge counts them) ...
    poll(
        lambda: system.operator_metric("gleaner_operator_jobs", phase="Running") == 2,
        timeout=30,
        what="the restarted operator counting two Running jobs",
    )
    # ... and the running job is exactly as it was: same placement, same single Pod.
    assert _kept(system.job(RUNNING)["status"]) == _kept(before)
    pods = system.pods("batch")
    names = sorted(p["metadata"]["name"] for p in pods)
    assert names == sorted([f"{RUNNING}-0", f"{IN_FLIGHT}-0"])
    held = [
        (p["spec"]["nodeName"], g)
        for p in pods
        for g in p["metadata"]["annotations"]["gleaner.dev/gpus"].split(",")
    ]
    assert len(held) == len(set(held)), f"a GPU is held twice: {held}"

    # Both agents learned their jobs; the dashboard shows both Running.
    for name in (RUNNING, IN_FLIGHT):
        placement = system.job(name)["status"]["placement"]

        def learned(p: dict[str, Any] = placement, job: str = f"batch/{name}") -> bool:
            jobs = system.agent_health(p["node"])["offline_jobs"]
            return all(jobs.get(str(g)) == job for g in p["gpuIndices"])

        poll(
            learned,
            timeout=30,
            what=f"agent of {placement['node']} running batch/{name}",
        )
    system.wait_dashboard(
        "/api/jobs?phase=Running",
        lambda body: sorted(j["name"] for j in body) == sorted([RUNNING, IN_FLIGHT]),
        "both jobs Running",
    )
    assert system.operator is not None and system.operator.starts == 2
