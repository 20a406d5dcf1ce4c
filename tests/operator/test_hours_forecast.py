"""The operator's pass judges a node with ``status.hours`` by the hours ahead (each GPU's
busiest hour of the horizon with the learned load spread, the simulator's rule), parsing
each node's hours once per change (``gleaner.operator.traces``)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from gleaner.operator.placement import plan_placements
from gleaner.operator.tracecache import HistoryCache
from gleaner.operator.traces import HourProfiles, summaries_from_nodetraces, with_histories
from gleaner.perfmodel.admission import ADMISSION_HORIZON_H
from gleaner.perfmodel.diurnal import DiurnalProfile, hour_of, is_weekend
from gleaner.perfmodel.hours import (
    node_forecast,
    profile_from_nodetrace,
    profile_to_hours,
    profile_to_weekend_hours,
)
from gleaner.perfmodel.summary import GpuSpec, NodeSummary
from gleaner.testing.fixtures import make_queued_job, mean_idle
from gleaner.testing.kube import nodetrace_manifest

DAY = datetime(2026, 3, 2, tzinfo=UTC)


def _with_hours(node: str, busy_by_hour: dict[int, float]) -> dict[str, Any]:
    """``nodetrace_manifest(node)`` (offline enabled 0.9) with hours at the given busy."""
    obj = nodetrace_manifest(node, gpus=2, offline_enabled=0.9)
    inventory = obj["status"]["gpus"]
    gpus = [GpuSpec(g["index"], uuid=g["uuid"], memory_gib=g["memoryGiB"]) for g in inventory]
    profile = DiurnalProfile(node)
    for hour, busy in busy_by_hour.items():
        t = DAY.timestamp() + hour * 3600 + np.arange(0, 3600, 60.0)
        b = np.full((t.size, 2), busy)
        summary = NodeSummary.from_samples(node, gpus, t, b, np.full((t.size, 2), 60.0), 1 - b)
        profile = profile.fold(hour, summary)
    obj["status"]["hours"] = [h.to_k8s() for h in profile_to_hours(profile)]
    return obj


def test_the_pass_predicts_from_the_hours_ahead() -> None:
    obj = _with_hours("a", {h: 0.8 if h < 12 else 0.0 for h in range(24)})
    plain = nodetrace_manifest("b", gpus=2, offline_enabled=0.9)
    at_night = summaries_from_nodetraces([obj, plain], DAY + timedelta(hours=2))
    at_noon = summaries_from_nodetraces([obj, plain], DAY + timedelta(hours=12))
    # Two hours before the horizon's end is midnight, the horizon runs into the busy hours
    # after it: they are its busiest.
    late = DAY + timedelta(hours=24 - ADMISSION_HORIZON_H + 2)
    at_two = summaries_from_nodetraces([obj, plain], late)
    latest = summaries_from_nodetraces([obj, plain])
    assert mean_idle(latest["a"]) == pytest.approx(0.9)
    assert mean_idle(at_night["a"]) == pytest.approx(0.75 * 0.2 + 0.25 * 0.9)
    assert mean_idle(at_noon["a"]) == pytest.approx(0.75 * 1.0 + 0.25 * 0.9)
    assert mean_idle(at_two["a"]) == pytest.approx(0.75 * 0.2 + 0.25 * 0.9)
    # A node without hours is read as before, whatever the time.
    assert mean_idle(at_night["b"]) == mean_idle(at_noon["b"]) == pytest.approx(0.9)
    assert at_night["a"].last_report_time == latest["a"].last_report_time


def test_hours_are_parsed_once_per_change(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real = profile_from_nodetrace

    def counting(obj: Any) -> DiurnalProfile | None:
        parsed.append(obj["metadata"]["name"])
        return real(obj)

    monkeypatch.setattr("gleaner.operator.traces.profile_from_nodetrace", counting)
    kept = HourProfiles()
    a, b = _with_hours("a", {6: 0.5}), _with_hours("b", {6: 0.5})
    now = DAY + timedelta(hours=6)
    first = summaries_from_nodetraces([a, b], now, kept)
    # Another report of both (a new latest window), same hours: nothing parsed again.
    a2 = copy.deepcopy(a)
    a2["status"]["perGPU"][0]["onlineBusySeconds"] = 30.0
    summaries_from_nodetraces([a2, b], now, kept)
    assert sorted(parsed) == ["a", "b"]
    # Node a completes an hour: only its hours are parsed again, and they are used.
    a3 = _with_hours("a", {6: 0.5, 7: 0.0})
    again = summaries_from_nodetraces([a3, b], now + timedelta(hours=1), kept)
    assert sorted(parsed) == ["a", "a", "b"]
    assert mean_idle(again["a"]) > mean_idle(first["a"])
    # b's NodeTrace is gone: it is forgotten.
    summaries_from_nodetraces([a3], now, kept)
    assert len(kept) == 1


def test_an_hour_that_does_not_fit_the_inventory_is_left_out() -> None:
    obj = _with_hours("a", {6: 0.0, 7: 0.8})
    # Hour 6's memory states list one GPU of the node's two (a GPU since removed, say).
    for state in obj["status"]["hours"][0]["memory"]["states"]:
        state["freeGiB"] = state["freeGiB"][:1]
    got = summaries_from_nodetraces([obj], DAY + timedelta(hours=6))
    # Hour 6 left out: hour 7 stands in for the whole horizon.
    assert mean_idle(got["a"]) == pytest.approx(0.75 * 0.2 + 0.25 * 0.9)


def test_hours_that_do_not_parse_leave_the_latest_window_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    obj = _with_hours("a", {6: 0.5})
    obj["status"]["hours"][0]["window"]["seconds"] = -1  # a server's CRD would refuse it
    kept = HourProfiles()
    now = DAY + timedelta(hours=6)
    with caplog.at_level("WARNING", logger="gleaner.operator.traces"):
        for _ in range(3):
            got = summaries_from_nodetraces([obj], now, kept)
            assert mean_idle(got["a"]) == pytest.approx(0.9)  # the latest window
    warnings = [r for r in caplog.records if "hours ignored" in r.getMessage()]
    assert len(warnings) == 1


def test_a_node_busy_later_in_the_horizon_is_not_admitted() -> None:
    """Idle now and for the next hours, but busy six hours ahead: the 2 h mean admits a
    job there, the busiest hour of the 12 h horizon (the simulator's rule) does not."""
    now = datetime.now(UTC)
    hour = hour_of(now)
    busy = {hour: 0.1, (hour + 1) % 24: 0.1, (hour + 6) % 24: 0.95}
    obj = _with_hours("a", busy)
    obj["status"] = nodetrace_manifest("a", gpus=2, offline_enabled=0.9, end=now)["status"] | {
        "hours": obj["status"]["hours"]
    }
    (report,) = summaries_from_nodetraces([obj]).values()
    profile = profile_from_nodetrace(obj)
    assert profile is not None
    two_hours = {"a": node_forecast(report, profile, now, timedelta(hours=2).total_seconds())}
    job = make_queued_job("j", sla=0.5)
    assert len(plan_placements([job], two_hours, {}, now).placements) == 1
    admitted = summaries_from_nodetraces([obj], now)
    plan = plan_placements([job], admitted, {}, now)
    assert plan.placements == [] and len(plan.unschedulable) == 1
    # Each GPU at its busiest hour: 3/4 the hour's 0.95, 1/4 the latest window's 0.1.
    assert mean_idle(admitted["a"]) == pytest.approx(1.0 - (0.75 * 0.95 + 0.25 * 0.1))


def test_the_spread_is_learned_from_new_report_windows() -> None:
    """Reports busier than their hour's forecast widen the load the node is admitted by;
    a report seen again adds nothing."""
    now = datetime.now(UTC)
    obj = _with_hours("a", {h: 0.2 for h in range(24)})
    kept = HourProfiles()

    def report(end: datetime) -> dict[str, Any]:
        # Online busy 0.4 in each window: twice what the hours forecast.
        fresh = nodetrace_manifest("a", gpus=2, offline_enabled=0.6, end=end)
        return {**obj, "status": fresh["status"] | {"hours": obj["status"]["hours"]}}

    first = summaries_from_nodetraces([report(now)], now, kept)
    for _ in range(3):
        summaries_from_nodetraces([report(now)], now, kept)
    assert kept.spread.ratios("a") == pytest.approx([0.5, 0.5])  # one window, two GPUs
    assert kept.spread.scale("a", 0.9) == 1.0  # too few windows yet
    for i in range(1, 10):
        summaries_from_nodetraces([report(now + timedelta(minutes=i))], now, kept)
    assert kept.spread.scale("a", 0.9) == pytest.approx(2.0)
    learned = summaries_from_nodetraces([report(now + timedelta(minutes=10))], now, kept)
    # Busiest hour 0.75 * 0.2 + 0.25 * 0.4 = 0.25, scaled by 2.
    assert mean_idle(first["a"]) == pytest.approx(0.75)
    assert mean_idle(learned["a"]) == pytest.approx(0.5)
    # Without a risk target the spread is not applied.
    plain = summaries_from_nodetraces([report(now)], now, kept, risk_target=None)
    assert mean_idle(plain["a"]) == pytest.approx(0.75)


def test_the_spread_is_kept_for_a_node_whose_nodetrace_is_named_otherwise() -> None:
    now = datetime.now(UTC)
    obj = _with_hours("gpu-7", {h: 0.2 for h in range(24)})
    kept = HourProfiles()
    for i in range(3):
        fresh = nodetrace_manifest(
            "gpu-7", gpus=2, offline_enabled=0.6, end=now + timedelta(minutes=i)
        )
        status = fresh["status"] | {"hours": obj["status"]["hours"]}
        renamed = {**obj, "metadata": {"name": "trace-of-gpu-7"}, "status": status}
        renamed["spec"] = {**(obj.get("spec") or {}), "nodeName": "gpu-7"}
        assert set(summaries_from_nodetraces([renamed], now, kept)) == {"gpu-7"}
        summaries_from_nodetraces([renamed], now, kept)  # the same window again: nothing new
    assert kept.spread.ratios("gpu-7") == pytest.approx([0.5] * 6)


def _same(a: NodeSummary, b: NodeSummary) -> bool:
    """The same floats, not only close ones."""
    return (
        a.window_seconds == b.window_seconds
        and np.array_equal(a.online_busy_seconds, b.online_busy_seconds)
        and np.array_equal(a.offline_enabled_seconds, b.offline_enabled_seconds)  # type: ignore[arg-type]
        and np.array_equal(a.pair_overlap_seconds, b.pair_overlap_seconds, equal_nan=True)
        and np.array_equal(a.pair_union_seconds, b.pair_union_seconds, equal_nan=True)
        and np.array_equal(a.memory.levels, b.memory.levels)
        and np.array_equal(a.memory.seconds, b.memory.seconds)
        and a.memory.step_gib == b.memory.step_gib
    )


def test_kept_hours_predict_what_hours_parsed_afresh_predict() -> None:
    """Passes every 7 minutes over a day and a half with the hours kept from pass to pass
    (what the pass forecasts from is kept per node and hour) give the same summaries, float
    for float, as the same passes with everything parsed and forecast afresh; an hour that
    completes midway (new hours) is taken up at once."""
    busy = {h: 0.1 + 0.8 * abs(12 - h) / 12 for h in range(24) if h % 5}
    a, b = _with_hours("a", busy), _with_hours("b", {6: 0.5, 7: 0.2, 20: 0.9})
    kept = HourProfiles()
    start = DAY + timedelta(hours=3, minutes=1)
    for i in range(0, 36 * 60, 7):
        now = start + timedelta(minutes=i)
        if i == 12 * 60 + 2:  # hour 5 of node a completes
            a = _with_hours("a", busy | {5: 0.95})
        got = summaries_from_nodetraces([a, b], now, kept, risk_target=None)
        want = summaries_from_nodetraces([a, b], now, HourProfiles(), risk_target=None)
        assert set(got) == set(want) == {"a", "b"}
        assert all(_same(got[n], want[n]) for n in got), now
    # On the hour too (the horizon then covers whole hours only).
    on_hour = DAY + timedelta(days=1, hours=9)
    got = summaries_from_nodetraces([a, b], on_hour, kept, risk_target=None)
    want = summaries_from_nodetraces([a, b], on_hour, HourProfiles(), risk_target=None)
    assert all(_same(got[n], want[n]) for n in got)


def test_the_pass_takes_each_nodes_hours_from_its_nodehistory() -> None:
    """A node's hours come from its NodeHistory (as the watch delivered it); a node without
    one keeps the hours an older agent kept in its NodeTrace; a deleted one is forgotten."""
    busy = {h: 0.8 if h < 12 else 0.0 for h in range(24)}
    legacy = _with_hours("b", busy)
    hours = _with_hours("a", busy)["status"]["hours"]
    plain = nodetrace_manifest("a", gpus=2, offline_enabled=0.9)
    histories = HistoryCache()
    history = {"metadata": {"name": "a"}, "status": {"gpus": [], "hours": hours}}
    histories.update("ADDED", history)
    joined = with_histories([plain, legacy], histories)
    assert joined[0]["status"]["hours"] == hours and "hours" not in plain["status"]
    assert joined[1] is legacy
    at_night = summaries_from_nodetraces(joined, DAY + timedelta(hours=2))
    assert mean_idle(at_night["a"]) == pytest.approx(mean_idle(at_night["b"]))
    assert mean_idle(at_night["a"]) == pytest.approx(0.75 * 0.2 + 0.25 * 0.9)
    histories.update("DELETED", history)
    assert with_histories([plain], histories) == [plain] and len(histories) == 0


def test_a_nodetrace_is_parsed_once_per_resource_version() -> None:
    now = datetime.now(UTC)
    profiles = HourProfiles()
    first = nodetrace_manifest("n1", gpus=2, offline_enabled=0.9, end=now)
    first["metadata"]["resourceVersion"] = "5"
    before = summaries_from_nodetraces([first], now, profiles)["n1"]
    # The same version is the same object: its summary is reused, whatever the body says.
    same = nodetrace_manifest("n1", gpus=2, offline_enabled=0.1, end=now)
    same["metadata"]["resourceVersion"] = "5"
    assert summaries_from_nodetraces([same], now, profiles)["n1"] is before
    # A new version is parsed again.
    newer = copy.deepcopy(same)
    newer["metadata"]["resourceVersion"] = "6"
    after = summaries_from_nodetraces([newer], now, profiles)["n1"]
    assert after is not before
    assert after.offline_enabled_seconds is not None
    assert before.offline_enabled_seconds is not None
    assert after.offline_enabled_seconds[0] < before.offline_enabled_seconds[0]
    # Without a version nothing is kept, and a NodeTrace that is gone is forgotten.
    del newer["metadata"]["resourceVersion"]
    assert summaries_from_nodetraces([newer], now, profiles)["n1"] is not after
    summaries_from_nodetraces([], now, profiles)
    assert summaries_from_nodetraces([same], now, profiles)["n1"] is not before


def test_the_pass_forecasts_a_weekend_hour_from_the_weekend_hours() -> None:
    """A NodeHistory with weekend hours (busy weekdays, idle weekends, from a Monday to the
    Friday two weeks later): joined
    to its NodeTrace, a Saturday is judged by the weekends, a Monday as before; the parsed
    profile changes when the weekend hours do."""
    plain = nodetrace_manifest("a", gpus=2, offline_enabled=0.9)
    inventory = plain["status"]["gpus"]
    gpus = [GpuSpec(g["index"], uuid=g["uuid"], memory_gib=g["memoryGiB"]) for g in inventory]
    monday = DAY  # 2026-03-02
    profile = DiurnalProfile("a")
    for hour_index in range(19 * 24):
        start = monday + timedelta(hours=hour_index)
        busy = 0.1 if is_weekend(start) else 0.8
        t = start.timestamp() + np.arange(0, 3600, 60.0)
        b = np.full((t.size, 2), busy)
        summary = NodeSummary.from_samples("a", gpus, t, b, np.full((t.size, 2), 60.0), 1 - b)
        profile = profile.fold_at(start, summary)
    hours = [h.to_k8s() for h in profile_to_hours(profile)]
    weekend = [h.to_k8s() for h in profile_to_weekend_hours(profile) or ()]
    histories = HistoryCache()
    old = {"metadata": {"name": "a"}, "status": {"gpus": inventory, "hours": hours}}
    new = {"metadata": {"name": "a"}, "status": {**old["status"], "weekendHours": weekend}}
    saturday, next_monday = monday + timedelta(days=19, hours=10), monday + timedelta(days=21)
    kept = HourProfiles()
    histories.update("ADDED", old)
    (before,) = with_histories([plain], histories)
    assert "weekendHours" not in before["status"]
    old_saturday = summaries_from_nodetraces([before], saturday, kept)["a"]
    old_monday = summaries_from_nodetraces([before], next_monday, kept)["a"]
    histories.update("MODIFIED", new)
    (after,) = with_histories([plain], histories)
    assert after["status"]["weekendHours"] == weekend
    new_saturday = summaries_from_nodetraces([after], saturday, kept)["a"]
    new_monday = summaries_from_nodetraces([after], next_monday, kept)["a"]
    # Idle weekends: more to harvest on Saturday than the all-days hours (mostly weekdays).
    assert mean_idle(new_saturday) > mean_idle(old_saturday) + 0.3
    assert mean_idle(new_monday) == pytest.approx(mean_idle(old_monday))
