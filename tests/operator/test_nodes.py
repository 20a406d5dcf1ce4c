"""Node labels and availability for placement: the cache (pure) and the scheduler's use of it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gleaner.api import OfflineJob
from gleaner.operator.nodes import CORDONED_REASON, NOT_READY_REASON, NodeCache, node_info
from gleaner.operator.placement import QueuedJob, plan_placements
from gleaner.operator.traces import summaries_from_nodetraces
from gleaner.testing.kube import nodetrace_manifest, offlinejob_manifest

NOW = datetime.now(UTC)


def node(
    name: str, labels: dict[str, str], *, cordoned: bool = False, ready: str | None = "True"
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": cordoned} if cordoned else {},
        "status": {},
    }
    if ready is not None:
        body["status"]["conditions"] = [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": ready},
        ]
    return body


def selective(name: str, selector: dict[str, str]) -> QueuedJob:
    manifest = offlinejob_manifest(name)
    manifest["spec"]["gpuSelector"] = {"nodeSelector": selector}
    job = OfflineJob.model_validate(manifest)
    assert job.spec.profile is not None
    return QueuedJob(job, job.spec.profile)


def test_node_info_reads_labels_cordon_and_readiness() -> None:
    assert node_info(node("a", {"pool": "x"})).labels == {"pool": "x"}
    assert node_info(node("a", {})).unavailable is None
    assert node_info(node("a", {}, cordoned=True)).unavailable == CORDONED_REASON
    assert node_info(node("a", {}, ready="Unknown")).unavailable == NOT_READY_REASON
    assert node_info(node("a", {}, ready="False")).unavailable == NOT_READY_REASON
    # No Ready condition at all (a Node registered a moment ago): no verdict from here.
    assert node_info(node("a", {}, ready=None)).unavailable is None


def test_cache_reports_only_changes_that_scheduling_reads() -> None:
    cache = NodeCache()
    assert cache.observe(None, node("a", {"pool": "x"})) is True
    # A kubelet heartbeat: same labels, same readiness -> nothing to reschedule for.
    assert cache.observe("MODIFIED", node("a", {"pool": "x"})) is False
    assert cache.observe("MODIFIED", node("a", {"pool": "y"})) is True
    assert cache.observe("MODIFIED", node("a", {"pool": "y"}, cordoned=True)) is True
    assert cache.labels() == {"a": {"pool": "y"}}
    assert cache.unavailable() == {"a": CORDONED_REASON}
    assert cache.observe("DELETED", node("a", {"pool": "y"})) is True
    assert cache.observe("DELETED", node("a", {"pool": "y"})) is False
    assert cache.labels() == {} and len(cache) == 0
    assert cache.observe("ADDED", {"metadata": {}}) is False


def test_priming_list_never_overrides_what_the_watch_reported() -> None:
    cache = NodeCache()
    cache.observe("MODIFIED", node("a", {"pool": "new"}))
    cache.observe("DELETED", node("gone", {}))
    before = cache.primed
    # A list that raced with the watch carries the older state of "a" and the deleted node.
    cache.prime([node("a", {"pool": "old"}), node("gone", {}), node("b", {"pool": "x"})])
    assert (before, cache.primed) == (False, True)
    assert cache.labels() == {"a": {"pool": "new"}, "b": {"pool": "x"}}


def test_node_selector_is_matched_against_kubernetes_node_labels() -> None:
    nodes = summaries_from_nodetraces([nodetrace_manifest(n) for n in ("a", "b", "c")])
    cache = NodeCache()
    cache.prime([node("a", {"pool": "a100"}), node("b", {"pool": "h100"}, cordoned=True)])
    cache.observe("ADDED", node("c", {"pool": "h100"}))
    plan = plan_placements(
        [selective("j", {"pool": "h100"})],
        nodes,
        {},
        NOW,
        node_labels=cache.labels(),
        unavailable=cache.unavailable(),
    )
    assert [(q.key, p.node) for q, p in plan.placements] == [("default/j", "c")]


def test_a_selector_matching_no_node_says_so_kube_scheduler_style() -> None:
    nodes = summaries_from_nodetraces([nodetrace_manifest(n) for n in ("a", "b", "c")])
    cache = NodeCache()
    cache.prime([node("a", {"pool": "a100"}), node("b", {"pool": "h100"}, cordoned=True)])
    plan = plan_placements(
        [selective("j", {"pool": "h100"})],
        nodes,
        {},
        NOW,
        node_labels=cache.labels(),
        unavailable=cache.unavailable(),
    )
    assert plan.placements == []
    ((_, message),) = plan.unschedulable
    assert message == (
        "0/3 nodes are available: 2 didn't match gpuSelector node labels, "
        "1 node unavailable: cordoned."
    )
