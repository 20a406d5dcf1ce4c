"""The agent's hours of the day: each completed UTC hour folded into the node's profile, written
to its NodeHistory only when it changed, never before the stored history was read, and never
with the 15 s NodeTrace reports (``ReportWindow``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from gleaner.api import NodeHistoryStatus, NodeTraceStatus
from gleaner.perfmodel.diurnal import DiurnalProfile, hour_of
from gleaner.perfmodel.hours import profile_from_status
from gleaner.runtime_agent.policy import Accounting
from gleaner.runtime_agent.reporting import ReportWindow
from gleaner.runtime_agent.simulated import synthetic_inventory

NODE = "gpu-node-1"
T0 = datetime(2026, 3, 2, 5, 50, tzinfo=UTC)  # 05:50 UTC
INVENTORY = synthetic_inventory(NODE, 2, 80)


class Node:
    """An accounting driven minute by minute from ``start``: GPU 0 busy online in
    ``busy_hour`` only."""

    def __init__(self, start: datetime = T0, busy_hour: int | None = 6) -> None:
        self.acc = Accounting([0, 1])
        self.reports = ReportWindow(window_s=3600, node=NODE, inventory=INVENTORY)
        self.start = start
        self.busy_hour = busy_hour
        self.t = 0.0
        self.reports.add(start, self.acc.snapshot(0.0))

    def run(self, minutes: int, step_min: int = 1) -> None:
        for _ in range(0, minutes, step_min):
            self.t += 60.0 * step_min
            wall = self.start + timedelta(seconds=self.t)
            busy = wall.hour == self.busy_hour
            self.acc.set_online_busy(self.t, 0, busy)
            self.acc.set_offline_enabled(self.t, 0, not busy)
            self.acc.set_offline_enabled(self.t, 1, True)
            self.reports.add(wall, self.acc.snapshot(self.t))

    def status(self) -> NodeTraceStatus:
        status = self.reports.status(INVENTORY, {})
        assert status is not None
        assert status.hours is None  # a report never carries the hours
        return status

    def in_history(self) -> bool:
        return self.reports.hours_in_history

    def history(self) -> NodeHistoryStatus | None:
        self.status()
        return self.reports.history()

    def profile(self) -> DiurnalProfile:
        assert self.reports.profile is not None
        return self.reports.profile


def _busy(status: NodeHistoryStatus, hour: int) -> float:
    entry = next(h for h in status.hours or () if h.hour == hour)
    return entry.per_gpu[0].online_busy_seconds / entry.window.seconds


def test_completed_hours_wait_for_the_stored_history_then_are_written_once() -> None:
    node = Node()
    node.run(10 + 60 + 60 + 5)  # to 08:05: hours 5 (10 min), 6 and 7 completed
    assert node.history() is None  # the stored history is not read yet
    assert not node.reports.hours_in_history  # nor may a report clear anything
    assert [hour_of(t) for t, _ in node.reports.early_hours] == [5, 6, 7]
    node.reports.seed(None)  # nothing stored
    status = node.history()
    assert status is not None and [g.index for g in status.gpus] == [0, 1]
    assert [h.hour for h in status.hours or ()] == [5, 6, 7]
    assert _busy(status, 6) == pytest.approx(1.0, abs=0.02)
    assert _busy(status, 7) == pytest.approx(0.0, abs=0.02)
    hours = {h.hour: h.window.seconds for h in status.hours or ()}
    assert hours[6] == pytest.approx(3600, abs=61) and hours[5] == pytest.approx(600, abs=61)
    node.reports.history_stored()
    node.run(10)
    assert node.history() is None  # unchanged: not written again
    node.run(60)  # 09:05: hour 8 completed
    after = node.history()
    assert after is not None and [h.hour for h in after.hours or ()] == [5, 6, 7, 8]


def test_a_failed_write_writes_the_hours_again() -> None:
    node = Node()
    node.reports.seed(None)
    node.run(15)
    assert node.history() is not None
    node.reports.reported(T0)  # the NodeTrace report succeeded; the NodeHistory write did not
    node.run(1)
    assert node.history() is not None
    node.reports.history_stored()
    node.run(1)
    assert node.history() is None


def test_hours_read_from_the_nodetrace_are_moved_to_the_nodehistory() -> None:
    """An older agent kept the hours in the NodeTrace: they are written to the NodeHistory
    at once, and reports clear them from the NodeTrace only after that."""
    first = Node()
    first.reports.seed(None)
    first.run(10 + 60 + 5)
    stored = first.history()
    assert stored is not None
    second = Node(start=T0 + timedelta(days=1), busy_hour=None)
    second.reports.seed(profile_from_status(NODE, stored), legacy=True)
    second.run(1)
    assert not second.in_history()
    moved = second.history()
    assert moved is not None and [h.hour for h in moved.hours or ()] == [5, 6]
    second.reports.history_stored()
    assert second.in_history()
    # Read from the NodeHistory itself: nothing to move.
    third = Node(start=T0 + timedelta(days=1), busy_hour=None)
    third.reports.seed(profile_from_status(NODE, stored))
    third.run(1)
    assert third.in_history() and third.history() is None


def test_a_restarted_agent_goes_on_from_the_stored_hours() -> None:
    first = Node()
    first.reports.seed(None)
    first.run(10 + 60 + 5)  # hours 5 and 6
    stored = first.history()
    assert stored is not None
    # A new agent (nothing in memory) the next day seeds from what the API server keeps.
    second = Node(start=T0 + timedelta(days=1), busy_hour=None)
    second.reports.seed(profile_from_status(NODE, stored))
    second.run(2)
    assert second.history() is None  # nothing new: the stored hours are left alone
    assert second.profile().hours_known == 2
    # The next day's hour 6, idle this time, is folded on top of the stored one: the
    # older day weighs 0.7 of the new one.
    second.run(8 + 60 + 5)
    after = second.history()
    assert after is not None
    assert _busy(after, 6) == pytest.approx(0.7 / 1.7, abs=0.02)


def test_a_gap_longer_than_an_hour_folds_nothing_and_inventories_may_change() -> None:
    node = Node()
    node.reports.seed(None)
    node.run(5)  # 05:55
    node.run(180, step_min=180)  # the agent stopped: 05:55 -> 08:55 in one step
    node.run(10)  # 09:05
    assert [h for h, s in enumerate(node.profile().slots) if s is not None] == [8]
    # A stored profile of another GPU inventory: its hours are replaced, not merged.
    other = Node()
    one_gpu = synthetic_inventory(NODE, 1, 80)
    old = ReportWindow(window_s=3600, node=NODE, inventory=one_gpu)
    acc = Accounting([0])
    old.add(T0, acc.snapshot(0.0))
    old.add(T0 + timedelta(minutes=15), acc.snapshot(900.0))
    old.seed(None)
    stored = old.profile
    assert isinstance(stored, DiurnalProfile) and stored.slots[5] is not None
    other.reports.seed(stored)
    other.run(15)
    slot = other.profile().slots[5]
    assert slot is not None and slot.n_gpus == 2


def test_weekend_hours_go_to_their_slots_and_survive_a_restart() -> None:
    saturday = T0 + timedelta(days=5)  # Saturday 05:50 UTC
    first = Node(start=saturday)
    first.reports.seed(None)
    first.run(10 + 60 + 5)  # hours 5 and 6 of a Saturday
    stored = first.history()
    assert stored is not None and stored.weekend_hours is not None
    assert [(h.hour, h.days) for h in stored.weekend_hours] == [(5, 1), (6, 1)]
    assert [h.hour for h in stored.hours or ()] == [5, 6]  # the all-days hours, as before
    # Through the API server's JSON, then a new agent on Sunday goes on from it.
    kept = NodeHistoryStatus.model_validate(json.loads(json.dumps(stored.to_k8s())))
    second = Node(start=saturday + timedelta(days=1), busy_hour=None)
    second.reports.seed(profile_from_status(NODE, kept))
    second.run(10 + 60 + 5)
    after = second.history()
    assert after is not None and after.weekend_hours is not None
    assert [(h.hour, h.days) for h in after.weekend_hours] == [(5, 2), (6, 2)]
    # A weekday's hours leave the weekend slots alone.
    third = Node(start=saturday + timedelta(days=2), busy_hour=None)
    third.reports.seed(profile_from_status(NODE, after))
    third.run(10 + 60 + 5)
    monday = third.history()
    assert monday is not None and monday.weekend_hours == after.weekend_hours
