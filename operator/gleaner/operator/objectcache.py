"""Objects of one kind as the operator's watch last delivered them: the pass reads these.

Contract. ``ObjectCache`` holds, per ``(namespace, name)``, the newest body of one kind of
object (OfflineJobs, the operator's offline Pods, NodeTraces) that the operator has seen:

- ``observe(event_type, body)``: one watch event (kopf's initial listing included);
  ``DELETED`` forgets the object and leaves a tombstone with the deletion's
  ``resourceVersion``, so an older copy that arrives later (a list that raced with the
  deletion) does not bring it back;
- ``written(body)``: the object the API server returned for the operator's own write, so a
  pass that starts before the watch echoes that write already sees it;
- ``prime(items, version)``: a full list, with the list's ``resourceVersion``. An object the
  list lacks is dropped unless the cache holds a copy newer than the list (created after
  it); an object it has is kept at the newer of the two copies. Watches give no signal that
  their initial listing is complete, and a watch that restarts after a 410 re-lists without
  reporting what was deleted meanwhile, so the scheduling loop primes each cache before its
  first pass, after this replica was a standby (kopf paused its watches), and every
  ``resync_seconds`` (``due_for_prime``).

Between two copies of one object the newer ``resourceVersion`` wins; versions are compared
as integers (etcd's revisions, what every API server returns), and a version that is not an
integer counts as newer than the copy it replaces. ``items()`` is a snapshot (a list of the
bodies, never copied: callers must not modify them).

It holds no state the API server does not have: a restarted operator rebuilds it from the
same watch and list. It is a copy for deciding, never the truth for a write: every write the
pass makes carries the copy's ``resourceVersion`` as a precondition (``gleaner.operator.jobs``)
or is idempotent (Pods by deterministic name).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str]


def _key(body: dict[str, Any]) -> Key | None:
    meta = body.get("metadata") or {}
    name = meta.get("name")
    if not name:
        return None
    return str(meta.get("namespace") or ""), str(name)


def _version(body: dict[str, Any]) -> int | None:
    raw = (body.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(raw))
    except ValueError:
        return None


def newer(incoming: int | None, held: int | None) -> bool:
    """Whether a copy at ``incoming`` replaces one at ``held`` (unknown versions: yes)."""
    return incoming is None or held is None or incoming >= held


@dataclass
class ObjectCache:
    """(namespace, name) -> the newest body seen (see the module docstring)."""

    _bodies: dict[Key, dict[str, Any]] = field(default_factory=dict)
    _gone: dict[Key, int | None] = field(default_factory=dict)
    """Tombstones: the deletion's resourceVersion of objects the watch reported deleted."""
    primed_at: float | None = None
    """When (the loop's monotonic clock) the last ``prime`` ran; None: never, or invalidated."""

    def observe(self, event_type: str | None, body: dict[str, Any]) -> None:
        key = _key(body)
        if key is None:
            return
        version = _version(body)
        if event_type == "DELETED":
            self._bodies.pop(key, None)
            self._gone[key] = version
            return
        self._put(key, body, version)

    def written(self, body: dict[str, Any]) -> None:
        self.observe(None, body)

    def _put(self, key: Key, body: dict[str, Any], version: int | None) -> None:
        if key in self._gone:
            gone = self._gone[key]
            if version is not None and gone is not None and version <= gone:
                return  # deleted after this copy was read
        held = self._bodies.get(key)
        if held is not None and not newer(version, _version(held)):
            return
        self._gone.pop(key, None)
        self._bodies[key] = body

    def prime(self, items: Iterable[dict[str, Any]], version: str | None, now: float) -> None:
        """Merge a full list taken at ``version`` (see the module docstring)."""
        try:
            at: int | None = int(version) if version else None
        except ValueError:
            at = None
        listed: set[Key] = set()
        for body in items:
            key = _key(body)
            if key is None:
                continue
            listed.add(key)
            self._put(key, body, _version(body))
        for key in [k for k in self._bodies if k not in listed]:
            held = _version(self._bodies[key])
            if at is None or held is None or held <= at:
                del self._bodies[key]  # gone before the list (its deletion not reported)
        # Tombstones older than the list guard against nothing any more.
        self._gone = {k: v for k, v in self._gone.items() if at is None or v is None or v > at}
        self.primed_at = now

    def invalidate(self) -> None:
        """Prime again before the next use (this replica's watches were paused)."""
        self.primed_at = None

    def due_for_prime(self, now: float, resync_seconds: float) -> bool:
        return self.primed_at is None or now - self.primed_at >= resync_seconds

    def items(self) -> list[dict[str, Any]]:
        return list(self._bodies.values())

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._bodies.get((namespace, name))

    def __len__(self) -> int:
        return len(self._bodies)
