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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gleaner.api import (
    GpuInfo,
    NodeTraceStatus,
    TraceSource,
    UninstrumentedGuard,
    UninstrumentedProcess,
)
from gleaner.runtime_agent.policy import (
    Totals,
    Uninstrumented,
    to_nodetrace_status,
    window_between,
)


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

    def add(self, wall: datetime, totals: Totals) -> None:
        """Record a snapshot taken at ``wall`` (call once per report interval).

        A wall clock that stepped back (NTP) is held at the previous snapshot's time: the
        window's seconds come from the monotonic totals, the wall times only label it.
        """
        if self.snapshots and wall < self.snapshots[-1][0]:
            wall = self.snapshots[-1][0]
        self.snapshots.append((wall, totals))
        horizon = wall - timedelta(seconds=self.window_s)
        # Keep the newest snapshot at or before the horizon: it starts the window.
        while len(self.snapshots) >= 2 and self.snapshots[1][0] <= horizon:
            self.snapshots.popleft()

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
        return to_nodetrace_status(
            window,
            inventory=inventory,
            wall_start=start_wall,
            wall_end=end_wall,
            offline_jobs=offline_jobs,
            source=self.source,
            agent_version=self.agent_version,
            node=self.node,
        )

    def reported(self, wall: datetime) -> None:
        self.last_success = wall

    def failed(self) -> None:
        self.failures += 1
