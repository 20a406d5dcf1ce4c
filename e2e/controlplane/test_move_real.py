"""Moves before a forecast peak on the real control plane (docs/operator.md, "Moves before
a forecast peak").

The real ``gleaner operator`` runs as a ServiceAccount bound to the chart's rules, its move
check every second with no minimum stay. A job is placed on the only node there is (x,
idle, no hours of the day yet) and runs (KWOK). Then a second, idle node (y) reports, and
x's NodeHistory gains hours that forecast a peak at every hour of the day: x no longer
admits the job over the coming hours, y does. The operator moves it: the status records the
move (``evictions`` entry, ``Ready`` false with reason ``MovedBeforePeak``,
``evictionCount`` unchanged), a Normal Event ``MovedBeforePeak`` says why, and the job runs
on y with one Pod, created for the new attempt. With the check turned off
(``--move-check-interval=0``) the same job stays on x.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from gleaner.api.contract import job_selector
from gleaner.testing.kube import (
    OperatorProcess,
    nodetrace_manifest,
    offlinejob_manifest,
    wait_for,
)
from gleaner.testing.tenant import OperatorAccount, Tenant

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def account(tenant: Tenant) -> OperatorAccount:
    return tenant.operator_account()


@pytest.fixture
def operators(tenant: Tenant) -> Iterator[list[OperatorProcess]]:
    with tenant.operator_processes(tenant.node("x"), tenant.node("y")) as started:
        yield started


def _operator(tenant: Tenant, account: OperatorAccount, interval: str) -> OperatorProcess:
    args = tenant.operator_args(f"--move-check-interval={interval}", "--move-min-stay=0s")
    return OperatorProcess(account, args, log_name=f"operator-move-{interval}.log").start()


def _peak_hours(tenant: Tenant, node: str, trace: dict[str, Any]) -> None:
    """x's NodeHistory: its online load at 0.95 at every hour of the day."""
    tenant.write_hours(node, trace, 1, lambda hour: 0.95)


def _running_on(tenant: Tenant, name: str, node: str) -> dict[str, Any] | None:
    status = (tenant.api.get_job(name) or {}).get("status") or {}
    placed = (status.get("placement") or {}).get("node")
    return status if status.get("phase") == "Running" and placed == node else None


def _moved_event(tenant: Tenant, name: str) -> str | None:
    for event in tenant.api.events():
        if event.reason == "MovedBeforePeak" and event.involved_object.name == name:
            return str(event.message)
    return None


def _run(
    tenant: Tenant, account: OperatorAccount, operators: list[OperatorProcess], interval: str
) -> tuple[str, str, Any]:
    x, y = tenant.node("x"), tenant.node("y")
    trace_x = nodetrace_manifest(x, gpus=1, offline_enabled=0.9)
    tenant.apply_nodetrace(trace_x)
    operators.append(_operator(tenant, account, interval))

    def logs() -> str:
        jobs = {j["metadata"]["name"]: j.get("status") for j in tenant.api.list_jobs()}
        return f"jobs: {jobs}\n" + "\n".join(op.log()[-4000:] for op in operators)

    tenant.api.create_job(offlinejob_manifest("mover", namespace=tenant.namespace, sla=0.5))
    wait_for(partial(_running_on, tenant, "mover", x), timeout=90, message=logs)
    tenant.apply_nodetrace(nodetrace_manifest(y, gpus=1, offline_enabled=0.9))
    _peak_hours(tenant, x, trace_x)
    return x, y, logs


def test_a_running_job_moves_off_a_node_forecast_to_peak(
    tenant: Tenant, account: OperatorAccount, operators: list[OperatorProcess]
) -> None:
    x, y, logs = _run(tenant, account, operators, "1s")
    status = wait_for(partial(_running_on, tenant, "mover", y), timeout=120, message=logs)
    assert status.get("evictionCount", 0) == 0  # a move is not an SLA eviction
    assert status["moveCount"] == 1
    (record,) = status["evictions"]
    assert record["node"] == x and "forecast peak" in record["reason"]
    assert record["type"] == "Move", record
    assert x not in status.get("excludedNodes", [])  # kept off by its forecast, not for good
    message = wait_for(partial(_moved_event, tenant, "mover"), timeout=30, message=logs)
    assert f"moved from {x}" in message and "forecast peak" in message, message
    assert f"{y} does" in message and "does not count toward maxEvictions" in message, message
    pods = tenant.api.pods(selector=job_selector("mover"))
    live = [p for p in pods if not p.metadata.deletion_timestamp]
    assert len(live) == 1 and live[0].spec.node_name == y, [p.metadata.name for p in pods]
    # One Pod per attempt, each with its own name: x's, then y's.
    assert status["pods"] == ["mover-0", "mover-1"] and live[0].metadata.name == "mover-1"


def test_with_the_check_off_it_stays(
    tenant: Tenant, account: OperatorAccount, operators: list[OperatorProcess]
) -> None:
    x, _, logs = _run(tenant, account, operators, "0s")
    # Long enough for several SLA ticks and scheduling passes (a move check would run
    # every second); the job stays on x, and no move is recorded.
    for _ in range(10):
        assert _running_on(tenant, "mover", x) is not None, logs()
        time.sleep(1.0)
    assert _moved_event(tenant, "mover") is None
