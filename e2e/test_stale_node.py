"""Scenario 5: an agent goes away; its NodeTrace goes stale and the scheduler says so.

node-a has the quietest GPUs, so a job with a demanding SLA (0.85) fits only there (as
``gleaner place`` on the traces confirms). Its agent is SIGKILLed: no more NodeTrace reports,
no more metrics (Prometheus sees the target down). Once the NodeTrace is older than the
operator's ``--trace-stale-after``, the demanding job must be Unschedulable with a reason
that names the stale trace, while an undemanding job still lands on a live node. When the
agent comes back, the demanding job is placed on node-a.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gleaner.testing.system import GleanerSystem, poll, report_time

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GONE = "node-a"
STALE_AFTER = 6.0  # the operator's --trace-stale-after in OPERATOR_FAST_ARGS


def _job(examples: Path, name: str, sla: float) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((examples / "llama-3.1-8b-batch.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["throughputSLA"] = sla
    del doc["spec"]["gpuSelector"]  # simulated GPUs are not H100s
    return doc


def test_stale_nodetrace_stops_placements_there(
    start_system: Callable[..., GleanerSystem], examples: Path, tmp_path: Path
) -> None:
    system = start_system()
    demanding = _job(examples, "needs-a-quiet-gpu", 0.85)
    easy = _job(examples, "takes-any-gpu", 0.5)
    path = tmp_path / "demanding.yaml"
    path.write_text(yaml.safe_dump(demanding))
    done = system.gleaner(
        "place", "--trace", str(system.combined_trace), "--format", "json", str(path)
    )
    assert done.returncode == 0, done.stderr
    [fresh] = json.loads(done.stdout)["placements"]
    assert fresh["node"] == GONE, "with every node fresh, only node-a fits the demanding job"

    target = system.agents[GONE].target
    system.kill_agent(GONE)
    killed_at = datetime.now(UTC)

    # Prometheus sees the agent's target down.
    poll(
        lambda: list(system.prom_values(f'up{{instance="{target}"}}').values()) == [0.0],
        timeout=30,
        what=f"Prometheus marking {target} (agent {GONE}) down",
    )

    # The NodeTrace stops moving and goes stale.
    last = report_time(system.nodetrace(GONE) or {})
    assert last <= killed_at + timedelta(seconds=1)
    poll(
        lambda: (
            datetime.now(UTC) - report_time(system.nodetrace(GONE) or {})
            > timedelta(seconds=STALE_AFTER + 1)
        ),
        timeout=30,
        what=f"NodeTrace {GONE} older than {STALE_AFTER} s",
    )
    assert report_time(system.nodetrace(GONE) or {}) == last

    system.apply(demanding)
    system.apply(easy)
    job = system.wait_phase("needs-a-quiet-gpu", "Unschedulable")
    message = job["status"]["message"]
    assert "stale" in message, message
    assert system.pods("batch", "needs-a-quiet-gpu") == []
    placed = system.wait_phase("takes-any-gpu", "Running")["status"]["placement"]
    assert placed["node"] != GONE
    poll(
        lambda: (
            all(p["spec"]["nodeName"] != GONE for p in system.pods("batch"))
            and "stale" in system.job("needs-a-quiet-gpu")["status"]["message"]
        ),
        timeout=10,
        what="nothing bound to the stale node",
    )
    # The job page says so too, and does not offer the stale node as one that fits.
    system.wait_dashboard(
        "/api/jobs/batch/needs-a-quiet-gpu",
        lambda body: (
            body["phase"] == "Unschedulable"
            and "stale" in body["message"]
            and [r["why"] for r in body["runnerUps"] if r["node"] == GONE]
            == ["node unavailable: stale trace"]
        ),
        "the job Unschedulable because of the stale trace, node-a a stale runner-up",
    )

    # The agent comes back: fresh reports, and the demanding job goes where it fits. The
    # restarted agent's first windows are short, so on a loaded machine its offline-enabled
    # time may take a while to reach the SLA.
    system.restart_agent(GONE)
    back = system.wait_phase("needs-a-quiet-gpu", "Running", timeout=180)["status"]["placement"]
    assert back["node"] == GONE
    [pod] = system.pods("batch", "needs-a-quiet-gpu")
    assert pod["spec"]["nodeName"] == GONE
