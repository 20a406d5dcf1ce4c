"""Aligned GPU-set search: cliques of the alignment graph, bounded, in lexicographic order."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.scheduler.gpusets import POPCOUNT, adjacency, aligned_sets, mask_of, slots_of


def _graph(n: int, edges: list[tuple[int, int]]) -> tuple[int, ...]:
    adj = [0] * n
    for a, b in edges:
        adj[a] |= 1 << b
        adj[b] |= 1 << a
    return tuple(adj)


def test_three_aligned_and_one_loner() -> None:
    adj = _graph(4, [(0, 1), (0, 2), (1, 2)])
    assert [slots_of(m) for m in aligned_sets(adj, 1, 100)[0]] == [(0,), (1,), (2,), (3,)]
    assert [slots_of(m) for m in aligned_sets(adj, 2, 100)[0]] == [(0, 1), (0, 2), (1, 2)]
    assert [slots_of(m) for m in aligned_sets(adj, 3, 100)[0]] == [(0, 1, 2)]
    assert aligned_sets(adj, 4, 100) == ([], False)


def test_within_restricts_the_search() -> None:
    adj = _graph(4, [(0, 1), (0, 2), (1, 2)])
    sets, cut = aligned_sets(adj, 2, 100, within=mask_of([1, 2, 3]))
    assert [slots_of(m) for m in sets] == [(1, 2)] and not cut


def test_limit_cuts_and_says_so() -> None:
    complete = _graph(8, list(itertools.combinations(range(8), 2)))
    sets, cut = aligned_sets(complete, 4, 10)
    assert len(sets) == 10 and cut
    sets, cut = aligned_sets(complete, 4, 70)
    assert len(sets) == 70 and not cut


def test_adjacency_from_scores() -> None:
    scores = np.array([[1.0, 0.96, 0.5], [0.96, 1.0, 0.94], [0.5, 0.94, 1.0]])
    assert adjacency(scores, 0.95) == (0b010, 0b001, 0b000)


def test_popcount_table() -> None:
    masks = np.array([0, 1, 0b1011, 0xFFFF])
    assert POPCOUNT[masks].tolist() == [0, 1, 3, 16]


@settings(max_examples=150)
@given(
    n=st.integers(1, 8),
    edge_bits=st.integers(0, 2**28 - 1),
    k=st.integers(1, 5),
    limit=st.integers(1, 80),
)
def test_matches_brute_force(n: int, edge_bits: int, k: int, limit: int) -> None:
    pairs = list(itertools.combinations(range(n), 2))
    edges = [p for i, p in enumerate(pairs) if edge_bits >> i & 1]
    adj = _graph(n, edges)
    edge_set = set(edges)
    brute = [
        c
        for c in itertools.combinations(range(n), k)
        if all(p in edge_set for p in itertools.combinations(c, 2))
    ]
    sets, cut = aligned_sets(adj, k, limit)
    assert [slots_of(m) for m in sets] == brute[:limit]
    assert cut == (len(brute) > limit)
