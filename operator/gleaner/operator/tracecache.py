"""NodeTraces as the operator's watch last delivered them, parsed once per version.

Contract: ``TraceCache`` keeps, per node name, the latest NodeTrace body that the NodeTrace
watch delivered (kopf's initial listing included, so a restarted operator, or a standby
that turns active and re-lists, fills it again). ``update(event_type, body)`` records one
event; ``DELETED`` forgets the node. ``trace(name)`` returns the parsed ``NodeTrace``. It is
parsed at most once per ``resourceVersion``, on first use, so the SLA ticks of all the jobs
on one node share one parse. It returns None when the watch has not delivered that node;
the caller then GETs it, as it did before the cache existed. A body that does not parse
raises ``ValueError`` from ``trace``, as parsing a GET answer would. ``status.hours`` is left
out of the parse (the SLA monitor does not read it, and it is most of the cost).

Why: the SLA monitor ticks every window for every Running job, and a GET of the node's
NodeTrace per tick was most of the operator's API requests (docs/benchmarks.md, "Scheduling
on the real control plane"). The watch is as fresh as a GET, give or take its delivery lag.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gleaner.api import NodeTrace
from gleaner.api.nodetrace import without_hours


@dataclass
class _Entry:
    body: dict[str, Any]
    parsed: NodeTrace | None = None


@dataclass
class TraceCache:
    """node name -> its latest NodeTrace (see the module docstring)."""

    _entries: dict[str, _Entry] = field(default_factory=dict)

    def update(self, event_type: str | None, body: dict[str, Any]) -> None:
        name = (body.get("metadata") or {}).get("name")
        if not name:
            return
        if event_type == "DELETED":
            self._entries.pop(str(name), None)
            return
        self._entries[str(name)] = _Entry(body)

    def trace(self, name: str) -> NodeTrace | None:
        """The parsed NodeTrace of ``name``; None when the watch has not delivered it."""
        entry = self._entries.get(name)
        if entry is None:
            return None
        if entry.parsed is None:
            entry.parsed = NodeTrace.model_validate(without_hours(entry.body))
        return entry.parsed

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class HistoryCache:
    """node name -> the ``status`` of its NodeHistory (its hours of the day and the GPUs
    they were recorded on), as the NodeHistory watch last delivered it (kopf's initial
    listing included); ``DELETED`` forgets the node. The scheduling pass joins them to the
    NodeTraces it lists (``gleaner.operator.traces.with_histories``): the hours change once
    an hour, so they come by watch, not with every pass's listing."""

    _status: dict[str, dict[str, Any]] = field(default_factory=dict)
    listed: bool = False
    """The pass has listed the NodeHistories once (``fill``): the first pass after a start
    must not run on the hours the watch has not delivered yet."""

    def update(self, event_type: str | None, body: dict[str, Any]) -> None:
        name = (body.get("metadata") or {}).get("name")
        if not name:
            return
        if event_type == "DELETED":
            self._status.pop(str(name), None)
            return
        self._status[str(name)] = dict(body.get("status") or {})

    def fill(self, listed: list[dict[str, Any]]) -> None:
        """A listing of the NodeHistories, for the nodes the watch has not delivered yet (what
        it delivered is as new or newer)."""
        for body in listed:
            name = (body.get("metadata") or {}).get("name")
            if name and str(name) not in self._status:
                self._status[str(name)] = dict(body.get("status") or {})
        self.listed = True

    def get(self, name: str) -> dict[str, Any] | None:
        return self._status.get(name)

    def __len__(self) -> int:
        return len(self._status)
