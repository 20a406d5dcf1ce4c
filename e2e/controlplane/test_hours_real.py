"""A node's history by hour of the day on the real control plane (docs/api.md, "Hours of the
day"; docs/agent.md, "Reports").

- The real agent daemon (nvidia backend, a synthetic 2-GPU inventory, no shim connected:
  its GPUs idle online) reports its NodeTrace to the real kube-apiserver on test clocks, so
  hours pass without sleeping: it stores the hours it completed in its node's NodeHistory
  (``status.hours``), never in the NodeTrace; a new daemon for the same node (a restart:
  nothing in memory) reads them back, leaves them as they are until it completes an hour of
  its own, then adds that hour to them.
- Hours an older agent kept in the NodeTrace are moved: a daemon finding no NodeHistory
  reads them from the NodeTrace, writes them to a NodeHistory and clears them there.
- The operator's pass reads a NodeTrace and a NodeHistory from the real API server, joins
  them as its pass does (``with_histories``) and predicts the node from the hours ahead: the
  same node is predicted busy at 06:00 and idle at 18:00
  (``gleaner.operator.traces.summaries_from_nodetraces``), and from its latest window
  without a time. With weekend hours in the NodeHistory (kept by the CRD with their
  days), a Saturday is judged by them.

Both NodeTraces report from a past day, so other tests' operators see them stale and
place nothing there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gleaner.api import NodeHistoryStatus
from gleaner.operator.tracecache import HistoryCache
from gleaner.operator.traces import summaries_from_nodetraces, with_histories
from gleaner.perfmodel import JobProfile, predict
from gleaner.perfmodel.diurnal import HOURS, DiurnalProfile, is_weekend
from gleaner.perfmodel.hours import profile_to_hours, profile_to_weekend_hours
from gleaner.perfmodel.summary import GpuSpec, NodeSummary
from gleaner.runtime_agent.daemon import AgentDaemon, AgentOptions
from gleaner.runtime_agent.kube import load_client, write_nodehistory, write_nodetrace
from gleaner.runtime_agent.policy import InstrumentationConfig
from gleaner.testing.controlplane import ControlPlane, get_json

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(300)]

START = datetime(2026, 3, 2, 5, 50, tzinfo=UTC)


class Clocks:
    """The daemon's monotonic and wall clocks, moved by the test."""

    def __init__(self) -> None:
        self.t = 0.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> datetime:
        return START + timedelta(seconds=self.t)


@pytest.fixture
def node(control_plane: ControlPlane, gleaner_crds: list[str]) -> Iterator[str]:
    name = "hours-agent-node"
    yield name
    control_plane.kubectl("delete", "nt", name, "--wait=false", check=False)
    control_plane.kubectl("delete", "nh", name, "--wait=false", check=False)


def _daemon(plane: ControlPlane, node: str, clocks: Clocks, tmp_path: Path) -> AgentDaemon:
    options = AgentOptions(
        backend="nvidia",
        node=node,
        gpus=2,
        gpu_memory_gib=80.0,
        kubeconfig=str(plane.admin_kubeconfig),
        socket_dir=tmp_path,
        shim_source=tmp_path / "absent.so",
        nvml=False,
        instrumentation=InstrumentationConfig(enforce=False),
        metrics_host="127.0.0.1",
        metrics_port=0,
    )
    daemon = AgentDaemon(options, clock=clocks.mono, wall=clocks.wall)
    asyncio.run(daemon.connect())
    return daemon


def _report_every(daemon: AgentDaemon, clocks: Clocks, minutes: int, step_min: int = 5) -> None:
    for _ in range(0, minutes, step_min):
        clocks.t += 60.0 * step_min
        assert asyncio.run(daemon.report_once())


def _hours(plane: ControlPlane, node: str, kind: str = "nh") -> dict[int, dict[str, Any]]:
    obj = get_json(plane, kind, node) or {}
    return {h["hour"]: h for h in obj.get("status", {}).get("hours") or []}


def test_a_restarted_agent_keeps_its_hours(
    control_plane: ControlPlane, node: str, tmp_path: Path
) -> None:
    clocks = Clocks()
    first = _daemon(control_plane, node, clocks, tmp_path / "a")
    assert asyncio.run(first.report_once())  # 05:50: the first snapshot
    _report_every(first, clocks, 10 + 60 + 5)  # to 07:05: hours 5 (10 min) and 6
    stored = _hours(control_plane, node)
    assert sorted(stored) == [5, 6]
    assert stored[6]["window"]["seconds"] == pytest.approx(3600, abs=301)
    assert stored[5]["window"]["seconds"] == pytest.approx(600, abs=301)
    assert len(stored[6]["perGPU"]) == 2
    assert _hours(control_plane, node, "nt") == {}  # the 15 s reports carry none

    # The agent restarts: a new daemon, nothing in memory, the clocks go on.
    (tmp_path / "b").mkdir()
    second = _daemon(control_plane, node, clocks, tmp_path / "b")
    clocks.t += 60.0
    assert asyncio.run(second.report_once())  # reads the stored hours
    _report_every(second, clocks, 30)  # 07:36: no hour completed yet
    assert second.reports.profile is not None and second.reports.profile.hours_known == 2
    assert _hours(control_plane, node) == stored  # its reports left them as they were
    trace = get_json(control_plane, "nt", node) or {}
    assert trace["status"]["window"]["end"].startswith("2026-03-02T07:3")  # it did report
    _report_every(second, clocks, 30)  # 08:06: hour 7 (from its restart) completed
    after = _hours(control_plane, node)
    assert sorted(after) == [5, 6, 7]
    assert after[5] == stored[5] and after[6] == stored[6]


def test_hours_an_older_agent_kept_in_the_nodetrace_are_moved(
    control_plane: ControlPlane, node: str, tmp_path: Path
) -> None:
    client = load_client(str(control_plane.admin_kubeconfig))
    profile = DiurnalProfile(node)
    for hour in (3, 4):
        profile = profile.fold(hour, _hour(0.5, hour, node))
    # What an older agent wrote: its hours in the NodeTrace status, no NodeHistory.
    status = _hour(0.5, 4, node).to_nodetrace_status(source="agent")
    status = status.model_copy(update={"hours": profile_to_hours(profile)})
    write_nodetrace(client, node, status, clear_legacy_hours=False)
    assert sorted(_hours(control_plane, node, "nt")) == [3, 4]
    assert get_json(control_plane, "nh", node) is None

    clocks = Clocks()
    daemon = _daemon(control_plane, node, clocks, tmp_path)
    assert asyncio.run(daemon.report_once())  # reads them from the NodeTrace
    _report_every(daemon, clocks, 5)
    moved = _hours(control_plane, node)
    assert sorted(moved) == [3, 4]
    assert moved[4]["window"]["seconds"] == pytest.approx(3600)
    assert _hours(control_plane, node, "nt") == {}  # and cleared there


def _hour(busy: float, hour: int, node: str = "hours-forecast-node") -> NodeSummary:
    gpus = [GpuSpec(i, uuid=f"GPU-hours-{i}", product="H100", memory_gib=80.0) for i in (0, 1)]
    t = START.replace(hour=0, minute=0).timestamp() + hour * 3600 + np.arange(0, 3600, 60.0)
    b = np.full((t.size, 2), busy)
    return NodeSummary.from_samples(node, gpus, t, b, np.full((t.size, 2), 60.0), 1.0 - b)


@pytest.fixture
def forecast_node(control_plane: ControlPlane, gleaner_crds: list[str]) -> Iterator[str]:
    name = "hours-forecast-node"
    yield name
    control_plane.kubectl("delete", "nt", name, "--wait=false", check=False)
    control_plane.kubectl("delete", "nh", name, "--wait=false", check=False)


def test_the_operator_predicts_a_node_from_the_hours_ahead(
    control_plane: ControlPlane, forecast_node: str
) -> None:
    # Busy mornings (06-09), idle evenings; the latest hour (midnight) half busy.
    profile = DiurnalProfile(forecast_node)
    for hour in range(HOURS):
        profile = profile.fold(hour, _hour(0.9 if 6 <= hour < 9 else 0.1, hour))
    status = _hour(0.5, 0).to_nodetrace_status(source="agent")
    client = load_client(str(control_plane.admin_kubeconfig))
    write_nodetrace(client, forecast_node, status)
    history = NodeHistoryStatus(gpus=status.gpus, hours=profile_to_hours(profile))
    write_nodehistory(client, forecast_node, history)

    trace = get_json(control_plane, "nt", forecast_node)
    stored = get_json(control_plane, "nh", forecast_node)
    assert trace is not None and stored is not None
    assert len(stored["status"]["hours"]) == HOURS
    histories = HistoryCache()
    histories.update("ADDED", stored)  # as the operator's NodeHistory watch delivers it
    (listed,) = with_histories([trace], histories)
    job = JobProfile(100.0, 10.0, (10.0,), (100.0,))
    day = START.replace(hour=0, minute=0)

    def predicted(now: datetime | None) -> float:
        (summary,) = summaries_from_nodetraces([listed], now).values()
        return predict(job, 0.5, summary, [0]).throughput_fraction

    morning = predicted(day + timedelta(hours=6))
    evening = predicted(day + timedelta(hours=18))
    latest = predicted(None)
    # 3/4 the hours ahead, 1/4 the latest window.
    assert morning == pytest.approx(0.75 * 0.1 + 0.25 * 0.5, abs=0.01)
    assert evening == pytest.approx(0.75 * 0.9 + 0.25 * 0.5, abs=0.01)
    assert latest == pytest.approx(0.5, abs=0.01)


def test_weekend_hours_are_stored_and_forecast_a_weekend(
    control_plane: ControlPlane, forecast_node: str
) -> None:
    """A NodeHistory with weekend hours (busy weekdays, idle weekends, from a Monday to the
    Friday two weeks later) through the real API server: the CRD keeps ``weekendHours``
    with their days, and the pass judges the Saturday after by them."""
    profile = DiurnalProfile(forecast_node)
    monday = START.replace(hour=0, minute=0)  # 2026-03-02
    for hour_index in range(19 * HOURS):
        at = monday + timedelta(hours=hour_index)
        day = (at - monday).days
        summary = _hour(0.1 if is_weekend(at) else 0.9, hour_index % HOURS)
        profile = profile.fold_at(at, _shifted(summary, day))
    status = _hour(0.5, 0).to_nodetrace_status(source="agent")
    client = load_client(str(control_plane.admin_kubeconfig))
    write_nodetrace(client, forecast_node, status)
    history = NodeHistoryStatus(
        gpus=status.gpus,
        hours=profile_to_hours(profile),
        weekend_hours=profile_to_weekend_hours(profile),
    )
    write_nodehistory(client, forecast_node, history)
    trace = get_json(control_plane, "nt", forecast_node)
    stored = get_json(control_plane, "nh", forecast_node)
    assert trace is not None and stored is not None
    weekend = stored["status"]["weekendHours"]
    assert len(weekend) == HOURS and {h["days"] for h in weekend} == {4}
    histories = HistoryCache()
    histories.update("ADDED", stored)
    (listed,) = with_histories([trace], histories)
    job = JobProfile(100.0, 10.0, (10.0,), (100.0,))
    saturday = monday + timedelta(days=19, hours=10)

    def predicted(joined: dict[str, Any]) -> float:
        (summary,) = summaries_from_nodetraces([joined], saturday).values()
        return predict(job, 0.5, summary, [0]).throughput_fraction

    without = {**listed, "status": {k: v for k, v in listed["status"].items()
                                    if k != "weekendHours"}}  # fmt: skip
    # The weekends are idle (0.9 left), the all-days hours mostly the busy weekdays.
    assert predicted(listed) > predicted(without) + 0.3


def _shifted(summary: NodeSummary, days: int) -> NodeSummary:
    """``summary`` (of START's day) moved ``days`` days later."""
    delta = timedelta(days=days)
    assert summary.window_start is not None and summary.window_end is not None
    return replace(
        summary, window_start=summary.window_start + delta, window_end=summary.window_end + delta
    )
