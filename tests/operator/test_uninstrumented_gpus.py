"""The operator reads the agents' uninstrumented GPUs from NodeTraces for the scheduler, and
posts Events when a GPU turns uninstrumented (gleaner.operator.uninstrumented)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

from gleaner.api import OfflineJobStatus, Phase, Placement
from gleaner.operator.context import OperatorContext
from gleaner.operator.handlers.scheduling import _report_uninstrumented
from gleaner.operator.traces import HourProfiles, uninstrumented_gpus
from gleaner.operator.uninstrumented import (
    REASON,
    RECOVERED,
    BoundJob,
    Notice,
    recovered,
    uninstrumented_notices,
)
from gleaner.scheduler.plugins.instrumented import uninstrumented_reason


def _trace(name: str, guard: str | None, procs: list[dict[str, Any]]) -> dict[str, Any]:
    status: dict[str, Any] = {
        "perGPU": [
            {"index": 0, "offlineEnabledSeconds": 1, "onlineBusySeconds": 1},
            {"index": 1, "offlineEnabledSeconds": 1, "onlineBusySeconds": 1,
             "uninstrumentedProcesses": procs},
        ]
    }  # fmt: skip
    if guard is not None:
        status["uninstrumentedGuard"] = guard
    return {"metadata": {"name": name}, "status": status}


def test_uninstrumented_gpus_by_node_unless_the_node_opted_out() -> None:
    web: list[dict[str, Any]] = [{"pid": 300, "pod": "ns/web", "reason": "unknown"}, {"pid": 7}]
    traces: list[dict[str, Any]] = [
        _trace("a", "Enforced", web),
        _trace("b", "OptedOut", web),
        _trace("c", "Enforced", [{"pid": 42, "reason": "silent"}]),
        _trace("d", None, []),
        {"metadata": {"name": "broken"}, "status": {"perGPU": "nope"}},
    ]
    assert uninstrumented_gpus(traces) == {"a": {1: "pod ns/web"}, "c": {1: "pid 42"}}
    assert uninstrumented_gpus(traces, HourProfiles()) == uninstrumented_gpus(traces)


def test_the_answer_is_kept_per_resource_version() -> None:
    parsed = HourProfiles()
    first = _trace("a", "Enforced", [{"pid": 42, "reason": "silent"}])
    first["metadata"]["resourceVersion"] = "1"
    assert uninstrumented_gpus([first], parsed) == {"a": {1: "pid 42"}}
    # The same version is not parsed again: a body changed behind its version shows the old
    # answer (the API server never does that; here it shows that the cache answered).
    first["status"]["perGPU"][1]["uninstrumentedProcesses"] = []
    assert uninstrumented_gpus([first], parsed) == {"a": {1: "pid 42"}}
    # A new version is parsed: the process went away.
    newer = _trace("a", "Enforced", [])
    newer["metadata"]["resourceVersion"] = "2"
    assert uninstrumented_gpus([newer], parsed) == {}
    # Without a version nothing is kept.
    unversioned = _trace("b", "Enforced", [{"pid": 7}])
    assert uninstrumented_gpus([unversioned], parsed) == {"b": {1: "pid 7"}}
    unversioned["status"]["perGPU"][1]["uninstrumentedProcesses"] = []
    assert uninstrumented_gpus([unversioned], parsed) == {}
    # A NodeTrace that is gone is forgotten.
    parsed.retain(set())
    first["metadata"]["resourceVersion"] = "1"
    assert uninstrumented_gpus([first], parsed) == {}


# -- the Events (gleaner.operator.uninstrumented, and the pass that posts them) -----------


def _bound(name: str, node: str, gpus: list[int]) -> BoundJob:
    placement = Placement.model_validate(
        {"node": node, "gpuIndices": gpus, "compute": 0.5, "memory": 1, "multiGPU": 1,
         "throughputFraction": 0.5, "decidedAt": datetime(2026, 1, 1, tzinfo=UTC)}
    )  # fmt: skip
    return BoundJob("batch", name, f"uid-{name}", placement)


def test_a_newly_uninstrumented_gpu_is_reported_on_its_node_and_the_jobs_it_pauses() -> None:
    jobs = [_bound("on-1", "a", [0, 1]), _bound("on-0", "a", [0]), _bound("elsewhere", "b", [1])]
    current = {"a": {1: "pod prod/web"}}
    notices = uninstrumented_notices({}, current, jobs)
    assert [(n.kind, n.name, n.reason) for n in notices] == [
        ("NodeTrace", "a", REASON),
        ("Node", "a", REASON),
        ("OfflineJob", "on-1", REASON),
    ]
    job = notices[2]
    assert (job.namespace, job.uid) == ("batch", "uid-on-1")
    assert "GPU 1 runs an uninstrumented process (pod prod/web)" in job.message
    assert "node a" in job.message and "paused" in job.message
    assert notices[0].message.startswith("GPU 1 runs an uninstrumented process (pod prod/web)")
    # Reported once: the same reading again says nothing ...
    assert uninstrumented_notices(current, current, jobs) == []
    # ... another process on the same GPU, or a GPU that came back, is news.
    other = {"a": {1: "pid 42"}}
    assert [n.kind for n in uninstrumented_notices(current, other, jobs)] == [
        "NodeTrace", "Node", "OfflineJob",
    ]  # fmt: skip
    assert recovered(current, {}) == [
        Notice("NodeTrace", "a", reason=RECOVERED,
               message="GPU 1: no uninstrumented process any more; offline work may run there "
               "again"),
    ]  # fmt: skip
    assert recovered(current, current) == []
    assert len(uninstrumented_notices({}, current, jobs)) == 3


def test_the_filter_and_the_events_use_the_same_words() -> None:
    assert uninstrumented_reason(3, "pid 9") == "GPU 3 runs an uninstrumented process (pid 9)"


def test_the_pass_posts_the_events_once_per_change() -> None:
    created: list[tuple[str, dict[str, Any]]] = []

    class Client:
        async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            created.append((path, body))
            return body

    ctx = cast(OperatorContext, SimpleNamespace(client=Client(), uninstrumented={}))
    job = _bound("paused", "a", [1])
    status = OfflineJobStatus(phase=Phase.RUNNING, placement=job.placement)
    statuses = {("batch", "paused"): status}
    bodies: dict[tuple[str, str], dict[str, Any]] = {
        ("batch", "paused"): {"metadata": {"uid": "u-1"}}
    }
    current = {"a": {1: "pod prod/web"}}
    asyncio.run(_report_uninstrumented(ctx, current, statuses, bodies))
    kinds = [(path, body["involvedObject"]["kind"], body["type"]) for path, body in created]
    assert kinds == [
        ("/api/v1/namespaces/default/events", "NodeTrace", "Warning"),
        ("/api/v1/namespaces/default/events", "Node", "Warning"),
        ("/api/v1/namespaces/batch/events", "OfflineJob", "Warning"),
    ]
    assert created[2][1]["involvedObject"]["uid"] == "u-1"
    assert created[2][1]["reason"] == REASON
    asyncio.run(_report_uninstrumented(ctx, current, statuses, bodies))
    assert len(created) == 3  # nothing new
    asyncio.run(_report_uninstrumented(ctx, {}, statuses, bodies))
    assert [(b["involvedObject"]["kind"], b["type"], b["reason"]) for _, b in created[3:]] == [
        ("NodeTrace", "Normal", RECOVERED)
    ]
