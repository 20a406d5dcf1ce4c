"""Is this replica the active one? A check of kopf's peering object before each pass.

Contract. kopf pauses a replica's *handlers* while a live peer with a higher priority (or
another live peer with the same priority) is in the peering object, but the scheduling loop
is our own task: a kick queued just before the pause, or the loop's own retry, could still
run a pass on a replica that has just become the standby, at the same time as the active
one. So the loop reads the peering object(s) right before every pass and runs it only when
:func:`peering_verdict` says this replica is active, by kopf's own rule:

- a peer is live while ``lastseen + lifetime`` is in the future (``now`` is an argument);
- this replica is active iff no live peer has a higher priority and no *other* live peer
  has the same priority (our own record is the one live entry with our priority; two such
  entries are a conflict, and kopf pauses both);
- a replica whose own record is missing (not yet written, or expired) is not active; kopf
  pauses only for a live peer that outranks or ties it, so ``paused`` says whether its
  watches may have been paused (the scheduling loop then lists again before its next pass).

Pure: the status map and the time are arguments; :func:`peering_paths` names the objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True, slots=True)
class PeeringVerdict:
    active: bool
    reason: str
    paused: bool = False
    """kopf may have paused this replica's handlers and watches (a live peer outranks or
    ties it, or the peering object could not be read): what the watches delivered may be
    missing events since."""


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def peering_verdict(status: Mapping[str, Any], priority: int, now: datetime) -> PeeringVerdict:
    """Whether the replica with ``priority`` is the active one (see the module docstring)."""
    live: list[tuple[str, int]] = []
    for peer, info in status.items():
        if not isinstance(info, Mapping):
            continue
        seen = _parse_time(info.get("lastseen"))
        try:
            lifetime = int(info.get("lifetime", 60))
            prio = int(info.get("priority", 0))
        except (TypeError, ValueError):
            continue
        if seen is None or seen + timedelta(seconds=lifetime) <= now:
            continue
        live.append((str(peer), prio))
    higher = sorted(p for p, prio in live if prio > priority)
    if higher:
        return PeeringVerdict(
            False, f"standby: peer {higher[0]} has a higher priority", paused=True
        )
    same = sorted(p for p, prio in live if prio == priority)
    if not same:
        return PeeringVerdict(False, "this replica's peering record is missing or expired")
    if len(same) > 1:
        return PeeringVerdict(
            False, f"peers {', '.join(same)} share priority {priority}", paused=True
        )
    return PeeringVerdict(True, f"active as {same[0]}")


def peering_paths(name: str, namespaces: tuple[str, ...]) -> list[str]:
    """API paths of the peering objects this replica takes part in."""
    if not namespaces:
        return [f"/apis/kopf.dev/v1/clusterkopfpeerings/{name}"]
    return [f"/apis/kopf.dev/v1/namespaces/{ns}/kopfpeerings/{name}" for ns in namespaces]
