"""Selective reclamation of offline memory handles (Algorithm 1, docs/agent.md) and its plan.

Contract. Offline work holds memory handles; each handle may hold KV-cache blocks of
several offline requests (:class:`KvSpan`: the request, its block ids in the handle, and the
tokens that request must recompute if this span is lost — e.g. the tokens from the span's
first block to the end of the request). Losing several spans of one request costs the largest
of them (recomputation restarts at the earliest lost block), so the cost of reclaiming a set
S of handles is

    cost(S) = Σ_request max_{h ∈ S} tokens(request, h).

- :func:`select_handles_greedy` (Algorithm 1) picks k handles one at a time, each with the
  lowest *marginal* cost (extra tokens to recompute for newly affected requests, given the
  handles already picked); ties go to the earlier handle in the given order. The myopic choice
  can lose when one request spans several handles, so the answer is compared with the FIFO
  baseline and the cheaper set is returned: the result never costs more than FIFO.
- :func:`select_handles_fifo` is the baseline: the first k handles in the given order
  (allocation order, oldest first).
- :func:`plan_reclamation` turns a selection into a :class:`ReclaimPlan` whose steps follow
  the order of docs/agent.md: disable offline compute, remap the pages to the quarantine page,
  release the handles to online, report the invalidated block ids per request.

Pure functions of their arguments; no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class KvSpan:
    """The KV blocks of one offline request that live in one handle."""

    request: str
    blocks: tuple[int, ...]
    tokens: int
    """Tokens the request must recompute if this span is lost."""


HandleMap = Mapping[int, Sequence[KvSpan]]
"""handle id → the spans it holds (an empty sequence: a free handle, costless)."""

Selector = Callable[[HandleMap, int], list[int]]


def _distinct(handles: HandleMap, chosen: Iterable[int]) -> list[Sequence[KvSpan]]:
    """The span sequences of ``chosen``, each object once (the pages of a group share one)."""
    seen: dict[int, Sequence[KvSpan]] = {}  # the values keep the objects (and their ids) alive
    for h in chosen:
        spans = handles.get(h, ())
        seen.setdefault(id(spans), spans)
    return list(seen.values())


def reclaim_cost(handles: HandleMap, chosen: Sequence[int]) -> int:
    """Tokens to recompute if ``chosen`` handles are reclaimed."""
    worst: dict[str, int] = {}
    for spans in _distinct(handles, chosen):
        for span in spans:
            if span.tokens > worst.get(span.request, 0):
                worst[span.request] = span.tokens
    return sum(worst.values())


def select_handles_fifo(handles: HandleMap, k: int) -> list[int]:
    """The baseline: the first ``k`` handles in the map's order."""
    _check_k(handles, k)
    return list(handles)[:k]


def select_handles_greedy(handles: HandleMap, k: int) -> list[int]:
    """Algorithm 1: ``k`` handles by lowest marginal recompute cost (never worse than FIFO).

    Marginal costs are kept exact as handles are picked (a pick lowers the marginal cost of
    every other handle sharing a request with it) in a heap with lazy deletion. Handles whose
    span sequence is one object (the pages of a group, OFFLINE_PAGE_GROUPS: every layer's
    pages over one block range) form a class: they have the same marginal cost at every step,
    and once one is picked the rest cost nothing, so the heap holds classes, each keyed by
    its next handle's position. The picks are exactly those of a heap over single handles,
    in O((classes + spans) log classes + k).
    """
    _check_k(handles, k)
    order = list(handles)
    position = {h: i for i, h in enumerate(order)}
    members: list[list[int]] = []  # class → its handles, in map order
    keep: list[Sequence[KvSpan]] = []  # class → its spans (also keeps the ids unique)
    class_of: dict[int, int] = {}
    for h in order:
        spans = handles[h]
        c = class_of.get(id(spans))
        if c is None:
            c = class_of[id(spans)] = len(members)
            members.append([])
            keep.append(spans)
        members[c].append(h)
    # tokens[c][request]: the most a request loses if a handle of class c goes.
    tokens: list[dict[str, int]] = []
    holders: dict[str, list[int]] = {}
    for c, spans in enumerate(keep):
        per: dict[str, int] = {}
        for span in spans:
            if span.tokens > per.get(span.request, 0):
                per[span.request] = span.tokens
        tokens.append(per)
        for r in per:
            holders.setdefault(r, []).append(c)
    marginal = [sum(per.values()) for per in tokens]
    version = [0] * len(members)
    taken = [0] * len(members)  # handles picked from each class
    heap = [(marginal[c], position[hs[0]], c, 0) for c, hs in enumerate(members)]
    heapq.heapify(heap)
    worst: dict[str, int] = {}
    chosen: list[int] = []
    while len(chosen) < k:
        _, _, c, ver = heapq.heappop(heap)
        if ver != version[c]:
            continue  # a stale entry
        chosen.append(members[c][taken[c]])
        taken[c] += 1
        if taken[c] == 1:
            for r, tok in tokens[c].items():
                old = worst.get(r, 0)
                if tok <= old:
                    continue
                worst[r] = tok
                for other in holders[r]:
                    if other == c:
                        continue
                    t_other = tokens[other][r]
                    drop = max(0, t_other - old) - max(0, t_other - tok)
                    if drop:
                        marginal[other] -= drop
                        version[other] += 1
                        if taken[other] < len(members[other]):
                            nxt = position[members[other][taken[other]]]
                            heapq.heappush(heap, (marginal[other], nxt, other, version[other]))
            marginal[c] = 0  # its requests are lost already: the rest of the class is free
        version[c] += 1
        if taken[c] < len(members[c]):
            heapq.heappush(heap, (0, position[members[c][taken[c]]], c, version[c]))
    fifo = order[:k]
    if reclaim_cost(handles, fifo) < sum(worst.values()):
        return fifo
    return chosen


def _check_k(handles: HandleMap, k: int) -> None:
    if k < 0:
        raise ValueError("k must be >= 0")
    if k > len(handles):
        raise ValueError(f"cannot reclaim {k} handles: offline work holds {len(handles)}")


class StepKind(StrEnum):
    DISABLE_COMPUTE = "disable-compute"
    QUARANTINE_REMAP = "quarantine-remap"
    RELEASE_HANDLES = "release-handles"
    REPORT_INVALIDATED = "report-invalidated"


@dataclass(frozen=True, slots=True)
class ReclaimStep:
    kind: StepKind
    handles: tuple[int, ...] = ()
    invalidated: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """What to do, in order, to hand ``handles`` from offline work to online."""

    gpu: int
    handles: tuple[int, ...]
    handle_bytes: int
    invalidated: Mapping[str, tuple[int, ...]]
    """Offline request → block ids it lost (sorted), to report to the framework."""
    tokens_to_recompute: int
    steps: tuple[ReclaimStep, ...]

    @property
    def reclaimed_bytes(self) -> int:
        return len(self.handles) * self.handle_bytes

    @property
    def blocks_invalidated(self) -> int:
        return sum(len(b) for b in self.invalidated.values())


def plan_reclamation(
    gpu: int,
    handles: HandleMap,
    k: int,
    *,
    handle_bytes: int,
    selector: Selector = select_handles_greedy,
) -> ReclaimPlan:
    """Select ``k`` handles with ``selector`` and lay out the reclamation steps in order."""
    chosen = selector(handles, k)
    lost: dict[str, set[int]] = {}
    for spans in _distinct(handles, chosen):
        for span in spans:
            lost.setdefault(span.request, set()).update(span.blocks)
    invalidated = {r: tuple(sorted(b)) for r, b in sorted(lost.items())}
    chosen_t = tuple(chosen)
    steps = (
        ReclaimStep(StepKind.DISABLE_COMPUTE),
        ReclaimStep(StepKind.QUARANTINE_REMAP, handles=chosen_t),
        ReclaimStep(StepKind.RELEASE_HANDLES, handles=chosen_t),
        ReclaimStep(StepKind.REPORT_INVALIDATED, invalidated=tuple(invalidated.items())),
    )
    return ReclaimPlan(
        gpu=gpu,
        handles=chosen_t,
        handle_bytes=handle_bytes,
        invalidated=invalidated,
        tokens_to_recompute=reclaim_cost(handles, chosen),
        steps=steps,
    )
