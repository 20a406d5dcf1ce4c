"""The closed loop on the real control plane: a node that under-delivers is learned, the
lesson survives an operator crash, and a later placement goes elsewhere.

The real ``gleaner operator`` runs as a ServiceAccount bound to exactly the chart's rules,
its state in the tenant's namespace (``--state-namespace``). The test plays two nodes'
agents: both NodeTraces say the nodes are idle enough for the jobs (0.9 and 0.8 of the
time open to offline work). A first job is placed on one of them. While it runs, that
node's agent reports windows where offline work ran only 0.55 of the time: the job still
meets its SLA of 0.5 (no eviction), but the node delivers well under what the model
predicted. The SLA monitor feeds each window to the bias table, which the operator writes
to the ConfigMap ``gleaner-bias``. Then the job is deleted, the node's trace goes back to
what it said before (it looks as good as ever), and the operator is SIGKILLed: nothing is
flushed on the way out. A new operator process must load the learned ratio and place a
second job (SLA 0.7, which both nodes meet by their traces alone) on the other node, and
its ``NotChosen`` Event must give the learned bias as the reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from gleaner.operator.bias import BIAS_CONFIGMAP, BIAS_KEY
from gleaner.testing.kube import (
    OperatorProcess,
    nodetrace_manifest,
    offlinejob_manifest,
    wait_for,
)
from gleaner.testing.tenant import OperatorAccount, Tenant

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(300)]

DELIVERED = 0.55
"""The fraction of time the under-delivering node really gives offline work."""


@pytest.fixture
def account(tenant: Tenant) -> OperatorAccount:
    return tenant.operator_account()


def _operator(tenant: Tenant, account: OperatorAccount, log_name: str) -> OperatorProcess:
    args = tenant.operator_args("--bias-persist-interval=1s")
    return OperatorProcess(account, args, log_name=log_name).start()


@pytest.fixture
def operators(tenant: Tenant, account: OperatorAccount) -> Iterator[list[OperatorProcess]]:
    with tenant.operator_processes() as started:
        yield started


def _stored_ratios(tenant: Tenant) -> dict[str, float]:
    """Node-level ratios in the operator's ConfigMap ({} before its first write)."""
    (found,) = [cm for cm in tenant.api.configmaps() if cm.metadata.name == BIAS_CONFIGMAP] or [
        None
    ]
    if found is None:
        return {}
    data = json.loads((found.data or {}).get(BIAS_KEY) or "{}")
    return {e["node"]: e["ratio"] for e in data.get("entries", []) if e.get("jobClass") == ""}


def _phase(tenant: Tenant, name: str) -> dict[str, Any] | None:
    job = tenant.api.get_job(name)
    status = (job or {}).get("status") or {}
    return status if status.get("phase") in ("Scheduled", "Running") else None


def test_an_under_delivering_node_is_learned_kept_and_avoided(
    tenant: Tenant, account: OperatorAccount, operators: list[OperatorProcess]
) -> None:
    enabled = {tenant.node("x"): 0.9, tenant.node("y"): 0.8}

    def publish(node: str, value: float) -> None:
        tenant.apply_nodetrace(nodetrace_manifest(node, gpus=1, offline_enabled=value))

    for node, value in enabled.items():
        publish(node, value)
    first_op = _operator(tenant, account, "operator-1.log")
    operators.append(first_op)

    def logs() -> str:
        jobs = {j["metadata"]["name"]: j.get("status") for j in tenant.api.list_jobs()}
        return f"jobs: {jobs}\nstored: {_stored_ratios(tenant)}\n" + "\n".join(
            op.log()[-3000:] for op in operators
        )

    tenant.api.create_job(offlinejob_manifest("first", namespace=tenant.namespace, sla=0.5))
    placed = wait_for(partial(_phase, tenant, "first"), timeout=90, message=logs)
    slow = placed["placement"]["node"]
    (other,) = [n for n in enabled if n != slow]
    raw = placed["placement"]["compute"] * placed["placement"]["memory"]
    assert raw == pytest.approx(enabled[slow])

    # The node's agent reports what the job really got, a window a second, until the
    # operator has stored a ratio that rules the node out for an SLA of 0.7.
    def learned() -> float | None:
        publish(slow, DELIVERED)
        ratio = _stored_ratios(tenant).get(slow)
        return ratio if ratio is not None and enabled[slow] * ratio < 0.65 else None

    ratio = wait_for(learned, timeout=120, interval=1.0, message=logs)
    assert DELIVERED / enabled[slow] <= ratio < 1
    assert (tenant.api.get_job("first") or {})["status"]["phase"] == "Running"  # not evicted
    assert other not in _stored_ratios(tenant)

    tenant.api.delete_job("first")
    wait_for(lambda: tenant.api.get_job("first") is None, timeout=60, message=logs)
    publish(slow, enabled[slow])  # the trace looks as good as before the job
    first_op.kill()  # a crash: the table must already be in the API server
    assert _stored_ratios(tenant).get(slow, 1.0) < 1

    operators.append(_operator(tenant, account, "operator-2.log"))
    tenant.api.create_job(offlinejob_manifest("second", namespace=tenant.namespace, sla=0.7))
    second = wait_for(partial(_phase, tenant, "second"), timeout=90, message=logs)
    assert second["placement"]["node"] == other

    def not_chosen() -> str | None:
        for event in tenant.api.events():
            if event.reason == "NotChosen" and event.involved_object.name == "second":
                return str(event.message)
        return None

    message = wait_for(not_chosen, timeout=30, message=logs)
    assert f"{slow}: predicted" in message and "< SLA 0.70" in message, message
    assert "bias 0." in message, message
