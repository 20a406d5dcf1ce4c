"""The watch cache a scheduling pass reads: newest copy wins, deletions stick, lists merge."""

from __future__ import annotations

from typing import Any

from gleaner.operator.objectcache import ObjectCache


def obj(name: str, version: int | str, phase: str = "", ns: str = "batch") -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name, "resourceVersion": str(version)},
        "status": {"phase": phase},
    }


def phases(cache: ObjectCache) -> dict[str, str]:
    return {b["metadata"]["name"]: b["status"]["phase"] for b in cache.items()}


def test_an_older_copy_never_replaces_a_newer_one() -> None:
    cache = ObjectCache()
    cache.written(obj("a", 12, "Scheduled"))  # the operator's own write, returned
    cache.observe("MODIFIED", obj("a", 10, "Pending"))  # the watch, behind it
    assert phases(cache) == {"a": "Scheduled"}
    cache.observe("MODIFIED", obj("a", 13, "Running"))
    assert phases(cache) == {"a": "Running"}
    assert cache.get("batch", "a") is not None
    assert cache.get("other", "a") is None


def test_a_deletion_is_not_undone_by_a_list_that_raced_with_it() -> None:
    cache = ObjectCache()
    cache.observe(None, obj("a", 5, "Running"))
    cache.observe("DELETED", obj("a", 9, "Running"))
    cache.prime([obj("a", 5, "Running")], "8", now=0.0)  # listed before the deletion
    assert phases(cache) == {}
    cache.observe("ADDED", obj("a", 20, ""))  # created again under the same name
    assert phases(cache) == {"a": ""}


def test_a_list_drops_what_was_deleted_unseen_and_keeps_what_came_after_it() -> None:
    cache = ObjectCache()
    cache.observe(None, obj("ghost", 3, "Running"))  # deleted while the watch was away
    cache.observe("ADDED", obj("late", 30, ""))  # created after the list was taken
    cache.observe(None, obj("kept", 4, "Pending"))
    cache.prime([obj("kept", 7, "Scheduled"), obj("new", 6, "")], "25", now=100.0)
    assert phases(cache) == {"kept": "Scheduled", "new": "", "late": ""}


def test_prime_is_due_first_after_invalidate_and_after_the_resync_interval() -> None:
    cache = ObjectCache()
    assert cache.due_for_prime(0.0, 300.0)
    cache.prime([], "1", now=10.0)
    assert not cache.due_for_prime(309.0, 300.0)
    assert cache.due_for_prime(310.0, 300.0)
    cache.prime([], "2", now=310.0)
    cache.invalidate()
    assert cache.due_for_prime(311.0, 300.0)


def test_versions_that_are_not_integers_count_as_newer() -> None:
    cache = ObjectCache()
    cache.observe(None, obj("a", 50, "Pending"))
    cache.observe("MODIFIED", obj("a", "opaque", "Scheduled"))
    assert phases(cache) == {"a": "Scheduled"}
    cache.prime([obj("b", 1)], "not-a-number", now=0.0)
    assert phases(cache) == {"b": ""}
    assert len(cache) == 1
