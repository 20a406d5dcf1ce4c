"""GPU-set search on one node: aligned sets as cliques of the overlap graph (pure).

Contract. GPUs of a node are numbered by *position* 0..G-1 (G <= 16) and a GPU set is a
bitmask of positions. Two GPUs are *aligned* when their online busy overlap / union is
at least the admission threshold; a k-GPU job may use a set only if every pair in it
is aligned, i.e. the set is a k-clique of the alignment graph. :func:`aligned_sets`
enumerates k-cliques by depth-first growth over bitmasks: a partial set keeps the
bitmask of GPUs aligned with all its members, and a branch is cut as soon as fewer
candidates remain than GPUs still needed. The enumeration is bounded by ``limit``
(and reports when it was cut), so a 16-GPU node cannot blow up a cycle; an 8-GPU node
has at most 2^8 - 1 = 255 sets of all sizes together.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel.admission import pairs_admissible

MAX_POSITIONS = 16
POPCOUNT: npt.NDArray[np.int64] = np.array(
    [bin(i).count("1") for i in range(1 << MAX_POSITIONS)], dtype=np.int64
)
"""Bit count of every 16-bit mask (vectorized popcount: ``POPCOUNT[masks]``)."""


def adjacency(scores: npt.NDArray[np.float64], threshold: float) -> tuple[int, ...]:
    """Bitmask of aligned partners of every position (the pair rule on ``scores[a, b]``)."""
    g = scores.shape[0]
    if g > MAX_POSITIONS:
        raise ValueError(f"at most {MAX_POSITIONS} GPUs per node are supported, got {g}")
    ok = pairs_admissible(scores, 2, threshold)
    out = []
    for a in range(g):
        mask = 0
        for b in range(g):
            if b != a and ok[a, b]:
                mask |= 1 << b
        out.append(mask)
    return tuple(out)


def slots_of(mask: int) -> tuple[int, ...]:
    """Positions in a bitmask, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


def mask_of(slots: Sequence[int]) -> int:
    mask = 0
    for s in slots:
        mask |= 1 << s
    return mask


def aligned_sets(
    adj: Sequence[int], k: int, limit: int, within: int | None = None
) -> tuple[list[int], bool]:
    """(k-cliques as bitmasks in lexicographic order, whether ``limit`` cut the search).

    ``within`` restricts the search to a bitmask of positions (default: all).
    """
    universe = (1 << len(adj)) - 1 if within is None else within
    found: list[int] = []
    if k < 1 or universe.bit_count() < k:
        return found, False

    def grow(chosen: int, size: int, candidates: int) -> bool:
        """Extend ``chosen``; True once more than ``limit`` sets were found (stop)."""
        if size == k:
            found.append(chosen)
            return len(found) > limit
        need = k - size
        while candidates and candidates.bit_count() >= need:
            low = candidates & -candidates
            candidates ^= low
            if grow(chosen | low, size + 1, candidates & adj[low.bit_length() - 1]):
                return True
        return False

    cut = grow(0, 0, universe)
    return found[:limit], cut
