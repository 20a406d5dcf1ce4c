"""What each NodeTrace report covers: a sliding window of accounting snapshots (pure).

Contract. :class:`ReportWindow` keeps the agent's cumulative :class:`Totals` snapshots, one
per report interval, with the wall-clock time each was taken. :meth:`ReportWindow.status`
summarizes ``[max(first snapshot, now - window_s), now]`` as a NodeTrace status (written by
perfmodel's ``NodeSummary.to_nodetrace_status``). The window is cut from cumulative totals
and the memory sketches of every snapshot in it are merged, so a report that failed (API
outage) loses nothing: the next one covers the gap, up to ``window_s`` back.
:meth:`ReportWindow.reported` records a successful report (``last_report_time``);
:meth:`ReportWindow.add` trims snapshots older than the window and never fails (a wall
clock that stepped back is held at the last snapshot's time).
:func:`with_uninstrumented` adds what the uninstrumented-process guard sees now (per GPU)
and whether the node enforces it, so every report says so.

Hours of the day. With an ``inventory``, :meth:`ReportWindow.add` also folds each completed
UTC hour into the node's time-of-day profile (perfmodel's ``DiurnalProfile``): the window
from the first snapshot of an hour to the first snapshot of the next (``window_between``,
so it is off by at most one report interval) goes to the first one's hour. A span longer
than an hour and a report interval (the agent was stopped, or the clock jumped) folds
nothing. The profile lives in the API server (the node's NodeHistory, ``status.hours``),
so the agent starts with none: :meth:`ReportWindow.seed` gives it the stored one (``None``:
nothing stored; ``legacy``: read from where an older agent kept it, the NodeTrace), and
hours completed before that are kept (at most a day of them) and folded in on seeding.
:meth:`ReportWindow.history` is the NodeHistory status to write, only when a slot changed
(or the hours were read from the NodeTrace) since the last successful write
(:meth:`ReportWindow.history_stored`), and never before seeding, so a restarted agent
cannot overwrite the history it has not read. :meth:`ReportWindow.status` never carries
hours; ``hours_in_history`` says when a report may clear an older agent's hours from the
NodeTrace (they are read and stored in the NodeHistory).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gleaner.api import (
    GpuInfo,
    NodeHistoryStatus,
    NodeTraceStatus,
    TraceSource,
    UninstrumentedGuard,
    UninstrumentedProcess,
)
from gleaner.perfmodel import NodeSummary
from gleaner.perfmodel.diurnal import HOURS, DiurnalProfile, hour_of
from gleaner.perfmodel.hours import profile_to_hours, profile_to_weekend_hours
from gleaner.runtime_agent.policy import (
    Totals,
    Uninstrumented,
    to_nodetrace_status,
    window_between,
    window_summary,
)

HOUR_SLACK = timedelta(minutes=5)
"""How much longer than an hour a span between two hour marks may be and still be folded."""


def with_uninstrumented(
    status: NodeTraceStatus,
    found: Mapping[int, Sequence[Uninstrumented]],
    enforced: bool,
) -> NodeTraceStatus:
    """``status`` with each GPU's uninstrumented processes now and the guard's mode."""
    per_gpu = [
        g.model_copy(
            update={
                "uninstrumented_processes": [
                    UninstrumentedProcess(pid=u.pid, pod=u.pod, reason=u.why)
                    for u in found[g.index][:64]
                ]
                if found.get(g.index)
                else None
            }
        )
        for g in status.per_gpu
    ]
    guard = UninstrumentedGuard.ENFORCED if enforced else UninstrumentedGuard.OPTED_OUT
    return status.model_copy(update={"per_gpu": per_gpu, "uninstrumented_guard": guard})


@dataclass
class ReportWindow:
    window_s: float = 3600.0
    node: str = ""
    source: TraceSource = TraceSource.AGENT
    agent_version: str = ""
    snapshots: deque[tuple[datetime, Totals]] = field(default_factory=deque)
    last_success: datetime | None = None
    failures: int = 0
    inventory: Sequence[GpuInfo] = ()
    """The node's GPUs; without them no hours are folded."""
    profile: DiurnalProfile | None = None
    """The node's time-of-day profile; None until :meth:`seed`."""
    early_hours: list[tuple[datetime, NodeSummary]] = field(default_factory=list)
    """Hours completed before :meth:`seed`, oldest first (at most a day)."""
    hour_mark: tuple[datetime, Totals] | None = None
    hour_between: list[Totals] = field(default_factory=list)
    hours_changed: bool = False
    legacy_hours: bool = False
    """The hours were read from the NodeTrace and are not in the NodeHistory yet."""

    def add(self, wall: datetime, totals: Totals) -> None:
        """Record a snapshot taken at ``wall`` (call once per report interval).

        A wall clock that stepped back (NTP) is held at the previous snapshot's time: the
        window's seconds come from the monotonic totals, the wall times only label it.
        """
        if self.snapshots and wall < self.snapshots[-1][0]:
            wall = self.snapshots[-1][0]
        self.snapshots.append((wall, totals))
        self._hour(wall, totals)
        horizon = wall - timedelta(seconds=self.window_s)
        # Keep the newest snapshot at or before the horizon: it starts the window.
        while len(self.snapshots) >= 2 and self.snapshots[1][0] <= horizon:
            self.snapshots.popleft()

    def _hour(self, wall: datetime, totals: Totals) -> None:
        """Fold the hour that ``wall`` completes, if it completes one (module docstring)."""
        mark = self.hour_mark
        if mark is None or not self.inventory:
            self.hour_mark, self.hour_between = (wall, totals), []
            return
        mark_wall, mark_totals = mark
        if _hour_start(wall) == _hour_start(mark_wall):
            self.hour_between.append(totals)
            return
        if wall - mark_wall <= timedelta(hours=1) + HOUR_SLACK:
            try:
                window = window_between(mark_totals, totals, self.hour_between)
                summary = window_summary(
                    window,
                    node=self.node,
                    inventory=self.inventory,
                    wall_start=mark_wall,
                    wall_end=wall,
                )
            except ValueError:
                pass  # snapshots that do not chain (a restarted accounting): fold nothing
            else:
                self._fold(mark_wall, summary)
        self.hour_mark, self.hour_between = (wall, totals), []

    def _fold(self, when: datetime, summary: NodeSummary) -> None:
        if self.profile is None:
            self.early_hours = [*self.early_hours, (when, summary)][-HOURS:]
            return
        self.profile = fold_hour(self.profile, when, summary)
        self.hours_changed = True

    def seed(self, stored: DiurnalProfile | None, legacy: bool = False) -> None:
        """Start from the profile stored in the API server (None: none is stored; ``legacy``:
        read from the NodeTrace), then fold the hours completed before it was read."""
        profile = stored if stored is not None else DiurnalProfile(self.node)
        self.legacy_hours = legacy and stored is not None
        self.hours_changed = bool(self.early_hours) or self.legacy_hours
        for when, summary in self.early_hours:
            profile = fold_hour(profile, when, summary)
        self.profile, self.early_hours = profile, []

    def status(
        self,
        inventory: Sequence[GpuInfo],
        offline_jobs: Mapping[int, str],
    ) -> NodeTraceStatus | None:
        """The status for the window ending at the latest snapshot (None: nothing yet)."""
        if len(self.snapshots) < 2:
            return None
        end_wall, end = self.snapshots[-1]
        start_wall, start = self.snapshots[0]
        if end.at <= start.at:
            return None
        between = [totals for _, totals in list(self.snapshots)[1:-1]]
        window = window_between(start, end, between)
        status = to_nodetrace_status(
            window,
            inventory=inventory,
            wall_start=start_wall,
            wall_end=end_wall,
            offline_jobs=offline_jobs,
            source=self.source,
            agent_version=self.agent_version,
            node=self.node,
        )
        return status

    def history(self) -> NodeHistoryStatus | None:
        """The NodeHistory status to write: the hours and the inventory, when they changed
        since the last :meth:`history_stored` (None: nothing to write)."""
        if not self.hours_changed or self.profile is None:
            return None
        return NodeHistoryStatus(
            gpus=list(self.inventory),
            hours=profile_to_hours(self.profile),
            weekend_hours=profile_to_weekend_hours(self.profile),
        )

    def history_stored(self) -> None:
        """The last :meth:`history` is stored in the NodeHistory."""
        self.hours_changed = False
        self.legacy_hours = False

    @property
    def hours_in_history(self) -> bool:
        """The hours are read and none are only in the NodeTrace: a report may clear those
        an older agent kept there."""
        return self.profile is not None and not self.legacy_hours

    def reported(self, wall: datetime) -> None:
        """A report succeeded."""
        self.last_success = wall

    def failed(self) -> None:
        self.failures += 1


def fold_hour(profile: DiurnalProfile, when: datetime, summary: NodeSummary) -> DiurnalProfile:
    """``profile`` with ``summary`` folded into the hour that contains ``when`` (and, on a
    weekend day, its weekend slot); slots of another GPU inventory (a GPU added or removed
    since) are replaced rather than merged."""
    try:
        return profile.fold_at(when, summary)
    except ValueError:
        return profile.without_hour(hour_of(when)).fold_at(when, summary)


def _hour_start(t: datetime) -> int:
    return int(t.timestamp() // 3600)
