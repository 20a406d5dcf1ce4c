"""The NodeTrace cache the SLA monitor reads instead of a GET per tick."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from gleaner.api import Placement
from gleaner.clients.kube import KubeClient
from gleaner.operator.config import OperatorConfig
from gleaner.operator.context import OperatorContext
from gleaner.operator.handlers.requeue import nodetrace_event
from gleaner.operator.handlers.sla import _observe
from gleaner.operator.http import Health
from gleaner.operator.metrics import OperatorMetrics
from gleaner.operator.tracecache import HistoryCache, TraceCache
from gleaner.testing.fixtures import make_placement
from gleaner.testing.kube import nodetrace_manifest

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _versioned(manifest: dict[str, Any], version: str) -> dict[str, Any]:
    manifest["metadata"]["resourceVersion"] = version
    return manifest


def test_trace_is_parsed_once_per_version_and_replaced_by_newer_events() -> None:
    cache = TraceCache()
    assert cache.trace("n") is None
    cache.update("ADDED", _versioned(nodetrace_manifest("n", gpus=2, end=NOW), "1"))
    first = cache.trace("n")
    assert first is not None and first.metadata.name == "n"
    assert cache.trace("n") is first  # parsed once, shared by every reader
    later = NOW + timedelta(minutes=1)
    cache.update("MODIFIED", _versioned(nodetrace_manifest("n", gpus=2, end=later), "2"))
    second = cache.trace("n")
    assert second is not None and second is not first
    assert second.status.window is not None and second.status.window.end == later
    assert "n" in cache and len(cache) == 1


def test_deleted_trace_is_forgotten_and_unparsable_one_raises() -> None:
    cache = TraceCache()
    cache.update(None, nodetrace_manifest("n", gpus=1, end=NOW))  # kopf's initial listing
    assert cache.trace("n") is not None
    cache.update("DELETED", nodetrace_manifest("n", gpus=1, end=NOW))
    assert cache.trace("n") is None and len(cache) == 0
    cache.update("ADDED", {"metadata": {"name": "bad"}, "status": {"perGPU": "nonsense"}})
    with pytest.raises(ValueError):
        cache.trace("bad")
    cache.update("ADDED", {"metadata": {}})  # nameless: ignored
    assert len(cache) == 1


class _CountingClient:
    """Answers GETs of NodeTraces from a dict and counts them."""

    def __init__(self, traces: dict[str, dict[str, Any]]) -> None:
        self.traces = traces
        self.gets: list[str] = []

    async def get(self, path: str, **_: Any) -> dict[str, Any] | None:
        self.gets.append(path)
        return self.traces.get(path.rsplit("/", 1)[-1])


def _ctx(client: _CountingClient) -> OperatorContext:
    return OperatorContext(
        config=OperatorConfig(peering=None),
        client=cast(KubeClient, client),
        metrics=OperatorMetrics(),
        health=Health(),
    )


def _placement(node: str) -> Placement:
    return make_placement(
        node, [0], uuids=["GPU-0"], compute=0.5, fraction=0.5, decided_at=NOW - timedelta(minutes=5)
    )


def test_sla_observation_reads_the_watched_trace_without_a_get() -> None:
    trace = nodetrace_manifest("node-a", gpus=2, offline_enabled=[0.4, 0.9], end=NOW)
    client = _CountingClient({"node-a": trace})
    ctx = _ctx(client)
    nodetrace_event(ctx, "ADDED", trace)
    assert "nodetrace node-a" in ctx.kick_reasons

    cached = asyncio.run(_observe(ctx, "ns", "job", _placement("node-a"), NOW))
    assert client.gets == []

    # Without a watched copy the observation GETs the trace, with the same answer.
    fresh = _ctx(client)
    fetched = asyncio.run(_observe(fresh, "ns", "job", _placement("node-a"), NOW))
    assert len(client.gets) == 1
    assert cached is not None and fetched is not None
    assert cached.throughput_fraction == pytest.approx(0.4)
    assert cached == fetched


def test_sla_observation_of_an_unwatched_missing_trace_is_none() -> None:
    client = _CountingClient({})
    assert asyncio.run(_observe(_ctx(client), "ns", "job", _placement("gone"), NOW)) is None
    assert len(client.gets) == 1


def test_a_listing_of_nodehistories_fills_what_the_watch_has_not_delivered() -> None:
    histories = HistoryCache()
    listed_before = histories.listed
    assert not listed_before
    newer = {"metadata": {"name": "a"}, "status": {"hours": [{"hour": 5}]}}
    histories.update("MODIFIED", newer)  # the watch was first for node a
    listed = [
        {"metadata": {"name": "a"}, "status": {"hours": [{"hour": 4}]}},
        {"metadata": {"name": "b"}, "status": {"hours": [{"hour": 7}]}},
    ]
    histories.fill(listed)
    assert histories.listed and len(histories) == 2
    assert histories.get("a") == {"hours": [{"hour": 5}]}
    assert histories.get("b") == {"hours": [{"hour": 7}]}
