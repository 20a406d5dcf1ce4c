"""The operator reads the agents' uninstrumented GPUs from NodeTraces for the scheduler."""

from __future__ import annotations

from typing import Any

from gleaner.operator.traces import uninstrumented_gpus


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
