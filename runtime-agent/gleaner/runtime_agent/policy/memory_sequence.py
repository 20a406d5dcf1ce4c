"""What a memory reservation's answer means for the offline job: one decision, two shells.

Contract. :class:`~gleaner.runtime_agent.policy.memory.MemoryReservation` answers
:class:`Grow` or :class:`Release` (docs/agent.md, "Policies"). :func:`memory_command` turns one
such answer, with what the shell knows about the GPU at that moment (:class:`MemoryView`), into
at most one command the shell carries out:

- a :class:`Grow` of ``g`` handles → :class:`ReclaimHandles` of the handles free memory cannot
  cover, ``min(g − ⌊free / handle_bytes⌋, reclaimable)`` (compute off first, then a
  reclamation plan), or nothing when that is ≤ 0. Unknown free memory counts as 0: every
  growth reclaims.
- a :class:`Release` → :class:`RestorePage` of the oldest quarantined page when there is one,
  no restore is in flight, and free memory covers the page (unknown free memory counts as
  enough: the owner's allocation fails harmlessly if it is not); :class:`RestoreDeferred`
  when free memory does not cover it; nothing otherwise (the handle stays free).

The agent's :class:`~gleaner.runtime_agent.core.NodeAgent` and the node-level simulator's
Gleaner memory policy both call it, so the simulator charges the offline job exactly what the
agent would. Pure: no I/O, no clocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from gleaner.runtime_agent.policy.memory import Grow, MemoryAction


@dataclass(frozen=True, slots=True)
class MemoryView:
    """What the shell knows about one GPU when a reservation answers."""

    free_bytes: int | None = None
    """Bytes neither online nor offline holds (None: unknown)."""
    reclaimable_handles: int = 0
    """Handles the offline job holds that a reclamation may take."""
    oldest_quarantined_bytes: int | None = None
    """Size of the oldest quarantined page (None: nothing quarantined)."""
    restoring: bool = False
    """A restore is in flight on this GPU (one at a time)."""


@dataclass(frozen=True, slots=True)
class ReclaimHandles:
    """Take ``handles`` handles from the offline job (compute off first)."""

    gpu: int
    t: float
    handles: int


@dataclass(frozen=True, slots=True)
class RestorePage:
    """Give the oldest quarantined page back to the process holding it."""

    gpu: int
    t: float


@dataclass(frozen=True, slots=True)
class RestoreDeferred:
    """A Release that restores nothing: free memory does not cover the oldest page."""

    gpu: int
    t: float


MemoryCommand = ReclaimHandles | RestorePage | RestoreDeferred


def memory_command(
    action: MemoryAction, view: MemoryView, handle_bytes: int
) -> MemoryCommand | None:
    """The command for one reservation answer (see the module docstring)."""
    if handle_bytes <= 0:
        raise ValueError("handle_bytes must be positive")
    if isinstance(action, Grow):
        free = 0 if view.free_bytes is None else max(0, view.free_bytes)
        short = action.handles - free // handle_bytes  # handles free memory cannot cover
        k = min(short, view.reclaimable_handles)
        return ReclaimHandles(action.gpu, action.t, k) if k > 0 else None
    # A Release: online gave a headroom handle back.
    if view.oldest_quarantined_bytes is None or view.restoring:
        return None
    if view.free_bytes is not None and view.free_bytes < view.oldest_quarantined_bytes:
        return RestoreDeferred(action.gpu, action.t)
    return RestorePage(action.gpu, action.t)
