"""memory_command: a reservation's Grow/Release → reclaim, restore, deferred restore or nothing."""

from __future__ import annotations

import pytest

from gleaner.runtime_agent.policy import (
    Grow,
    MemoryView,
    ReclaimHandles,
    Release,
    RestoreDeferred,
    RestorePage,
    memory_command,
)

HB = 2 << 20


def test_a_growth_reclaims_only_what_free_memory_cannot_cover() -> None:
    view = MemoryView(free_bytes=3 * HB + HB // 2, reclaimable_handles=100)
    assert memory_command(Grow(1, 2.0, 8), view, HB) == ReclaimHandles(1, 2.0, 5)


def test_a_growth_free_memory_covers_reclaims_nothing() -> None:
    assert memory_command(Grow(0, 0.0, 4), MemoryView(4 * HB, 100), HB) is None


def test_unknown_or_negative_free_memory_counts_as_none() -> None:
    assert memory_command(Grow(0, 0.0, 4), MemoryView(None, 100), HB) == ReclaimHandles(0, 0.0, 4)
    assert memory_command(Grow(0, 0.0, 4), MemoryView(-HB, 100), HB) == ReclaimHandles(0, 0.0, 4)


def test_a_growth_takes_at_most_what_offline_holds() -> None:
    assert memory_command(Grow(0, 0.0, 9), MemoryView(0, 3), HB) == ReclaimHandles(0, 0.0, 3)
    assert memory_command(Grow(0, 0.0, 9), MemoryView(0, 0), HB) is None


def test_a_release_restores_the_oldest_page_when_free_memory_covers_it() -> None:
    page = MemoryView(free_bytes=HB, oldest_quarantined_bytes=HB)
    assert memory_command(Release(0, 1.0), page, HB) == RestorePage(0, 1.0)
    unknown = MemoryView(free_bytes=None, oldest_quarantined_bytes=HB)
    assert memory_command(Release(0, 1.0), unknown, HB) == RestorePage(0, 1.0)


def test_a_release_defers_when_free_memory_does_not_cover_the_page() -> None:
    view = MemoryView(free_bytes=HB - 1, oldest_quarantined_bytes=HB)
    assert memory_command(Release(2, 1.0), view, HB) == RestoreDeferred(2, 1.0)


def test_a_release_with_nothing_quarantined_or_a_restore_in_flight_does_nothing() -> None:
    assert memory_command(Release(0, 1.0), MemoryView(free_bytes=HB), HB) is None
    busy = MemoryView(free_bytes=HB, oldest_quarantined_bytes=HB, restoring=True)
    assert memory_command(Release(0, 1.0), busy, HB) is None


def test_handle_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError):
        memory_command(Release(0, 0.0), MemoryView(), 0)
