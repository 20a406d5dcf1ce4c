"""Planned exits on the real control plane (docs/operator.md, "Planned exits").

The real ``gleaner operator`` runs as a ServiceAccount bound to the chart's rules, its move
check every second with no minimum stay. Node x has four GPUs busy together (one aligned
set) and a NodeHistory whose hours are quiet for the next few hours and at a peak after
that: over the 7 h admission horizon x does not admit a 4-GPU job, over the planned
exit's 3 h it does. The operator places the job there with ``status.placement.plannedExit``
and it runs (KWOK). Then x's hours turn to a peak at every hour of the day: x no longer
admits the job over the next hour and no other node does. The job leaves x for the queue:
the status records it as a move (an ``evictions`` entry whose reason starts "planned exit",
``moveCount`` 1, ``evictionCount`` 0, no node excluded, ``Ready`` false with reason
``PlannedExit``), a Normal Event ``PlannedExit`` says why (and no ``MovedBeforePeak``
one), its Pod is deleted, and it waits, unplaced, since no node admits it. With
``--no-planned-exit`` the same job is not placed at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest

from gleaner.api.contract import job_selector
from gleaner.perfmodel.diurnal import HOURS
from gleaner.testing.kube import (
    OperatorProcess,
    nodetrace_manifest,
    offlinejob_manifest,
    wait_for,
)
from gleaner.testing.tenant import OperatorAccount, Tenant

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(300)]

GPUS = 4
QUIET, PEAK = 0.1, 0.95


@pytest.fixture
def account(tenant: Tenant) -> OperatorAccount:
    return tenant.operator_account()


@pytest.fixture
def operators(tenant: Tenant) -> Iterator[list[OperatorProcess]]:
    with tenant.operator_processes(tenant.node("x")) as started:
        yield started


def _operator(tenant: Tenant, account: OperatorAccount, *flags: str) -> OperatorProcess:
    args = tenant.operator_args("--move-check-interval=1s", "--move-min-stay=0s", *flags)
    return OperatorProcess(account, args, log_name="operator-planned-exit.log").start()


def _quiet_then_peak(now_hour: int, hour: int) -> float:
    """Quiet from the hour before now to four hours ahead (a test that crosses an hour
    still sees 3 quiet hours ahead), at a peak from five hours ahead on."""
    ahead = (hour - now_hour) % HOURS
    return QUIET if ahead <= 4 or ahead == HOURS - 1 else PEAK


def _status(tenant: Tenant, name: str) -> dict[str, Any]:
    return dict((tenant.api.get_job(name) or {}).get("status") or {})


def _setup(
    tenant: Tenant, account: OperatorAccount, operators: list[OperatorProcess], *flags: str
) -> tuple[str, dict[str, Any], Callable[[], str]]:
    x = tenant.node("x")
    trace = nodetrace_manifest(x, gpus=GPUS, offline_enabled=1.0 - QUIET)
    tenant.apply_nodetrace(trace)
    tenant.write_hours(x, trace, GPUS, partial(_quiet_then_peak, datetime.now(UTC).hour))
    operators.append(_operator(tenant, account, *flags))

    def logs() -> str:
        jobs = {j["metadata"]["name"]: j.get("status") for j in tenant.api.list_jobs()}
        return f"jobs: {jobs}\n" + "\n".join(op.log()[-4000:] for op in operators)

    job = offlinejob_manifest("large", namespace=tenant.namespace, gpus=GPUS, sla=0.5)
    tenant.api.create_job(job)
    return x, trace, logs


def _event(tenant: Tenant, name: str, reason: str) -> str | None:
    for event in tenant.api.events():
        if event.reason == reason and event.involved_object.name == name:
            return str(event.message)
    return None


def test_a_planned_exit_job_goes_back_to_the_queue_before_a_peak(
    tenant: Tenant, account: OperatorAccount, operators: list[OperatorProcess]
) -> None:
    x, trace, logs = _setup(tenant, account, operators)

    def running_on_x() -> dict[str, Any] | None:
        status = _status(tenant, "large")
        placement = status.get("placement") or {}
        return status if status.get("phase") == "Running" and placement.get("node") == x else None

    status = wait_for(running_on_x, timeout=90, message=logs)
    assert status["placement"]["plannedExit"] is True
    assert status["placement"]["gpuIndices"] == list(range(GPUS))

    tenant.write_hours(x, trace, GPUS, lambda _: PEAK, day=2)  # a peak at every hour from now on

    def left() -> dict[str, Any] | None:
        status = _status(tenant, "large")
        return status if status.get("moveCount") == 1 and status.get("phase") != "Running" else None

    status = wait_for(left, timeout=120, message=logs)
    assert status.get("evictionCount", 0) == 0  # not an SLA eviction
    (record,) = status["evictions"]
    assert record["node"] == x and record["reason"].startswith("planned exit"), record
    assert record["type"] == "PlannedExit", record  # kept by the CRD's schema, not pruned
    assert x not in status.get("excludedNodes", [])
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PlannedExit"), ready
    message = wait_for(partial(_event, tenant, "large", "PlannedExit"), timeout=30, message=logs)
    assert f"left {x}: planned exit" in message, message
    assert _event(tenant, "large", "MovedBeforePeak") is None

    def no_live_pod() -> bool:
        pods = tenant.api.pods(selector=job_selector("large"))
        return not [p for p in pods if not p.metadata.deletion_timestamp]

    wait_for(no_live_pod, timeout=30, message=logs)
    # No node admits it now, over either horizon: it waits, unplaced, with the reasons.
    waiting = wait_for(
        lambda: (s := _status(tenant, "large")).get("phase") == "Unschedulable" and s,
        timeout=60,
        message=logs,
    )
    assert waiting["moveCount"] == 1 and waiting.get("evictionCount", 0) == 0


def test_with_the_planned_exit_off_the_job_is_not_placed(
    tenant: Tenant, account: OperatorAccount, operators: list[OperatorProcess]
) -> None:
    _, _, logs = _setup(tenant, account, operators, "--no-planned-exit")
    status = wait_for(
        lambda: (s := _status(tenant, "large")).get("phase") == "Unschedulable" and s,
        timeout=90,
        message=logs,
    )
    assert not status.get("placement")
