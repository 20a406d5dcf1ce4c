"""Pure decisions of the KV memory path: which blocks live in which shim page, what to
report to the agent, and what to retire, release and recompute when pages change state.

Contracts (no I/O, no vLLM, no torch; see docs/vllm-hook.md):

- :func:`block_runs` — a KV layer tensor's layout (:class:`KvLayout`: ``data_ptr``,
  ``shape``, ``strides`` in elements, ``element_size``, the block dimension, and how many
  kernel blocks make one block-manager block) → the byte runs one block occupies, relative
  to the block's start. Dimensions that are contiguous inside a block merge into one run;
  beyond :data:`MAX_RUNS` runs the block is covered by one conservative span (a superset:
  a block may be counted in a page it does not touch, never the reverse).
- :func:`page_table` — layouts + the shim's pages (sorted VAs, page bytes) → page VA →
  block ids with bytes in it, and block id → page VAs. Bytes outside every shim page (memory
  the shim cannot reclaim) are ignored.
- :func:`handle_entries` — the table, request → (block ids in order, num_computed_tokens),
  block size, quarantined pages → OFFLINE_HANDLES spans: one per (page, request holding
  blocks in it) with that request's block ids in the page (request order) and
  ``tokens = max(0, num_computed_tokens − first lost index × block_size)``; a page holding
  no request's block is one entry with request id ``""`` and no blocks; quarantined pages
  are omitted; pages in address order, requests in the given order.
- :func:`handle_frames` — spans → OFFLINE_HANDLES messages each within one 64 KiB frame,
  the first with RESET, the rest without; a span too large for one frame is split, its
  tokens on the first part only (the agent sums spans per page), greedily packed in order.
- :func:`page_groups` — the table → groups of pages with identical block sets (every
  layer's K and V page over one block range), block id → its groups.
- :func:`encode_handles` — the reporter's fast path: the encoded frames, byte for byte
  those of ``handle_frames(gpu, handle_entries(...))``, built from per-group spans (each
  block is visited once per group, not once per page: ~64× fewer) whose entry bytes without
  the page VA are packed once per group and joined per page; no per-entry Python objects.
  :func:`handle_entries` / :func:`handle_frames` stay as the readable reference.
- :func:`encode_page_groups` — the same table as OFFLINE_PAGE_GROUPS frames (RESET first,
  each within 64 KiB), straight from the groups: per group (its pages minus the quarantined
  ones; groups left with no page are omitted) one record of its pages and its spans (one
  per request holding blocks in it, requests in the given order, block ids in request
  order, tokens as above from the request's first block in the group); then one record of
  the empty pages (no spans), then one QUARANTINED record of the quarantined pages (address
  order). A span of more than :data:`PG_SPAN_IDS` block ids is cut into pieces (same request
  and tokens each); a record too big for a frame is split into records with subsets of its
  pages (chunks of at most half a frame) or of its span pieces. Records are packed greedily
  in that order. Decoded and expanded per page it equals :func:`handle_entries` plus the
  quarantined pages (tests/vllm-hook/test_vllm_pages.py).
- :func:`plan_step` — page states before and now, the retired set and the holders →
  :class:`StepPlan`: blocks to retire now (in a quarantined page, not yet retired), blocks
  to release now (retired, every page backed again), blocks whose content is gone since the
  last check, and the requests to recompute (holding such a block) with the index of their
  first lost block.
"""

from __future__ import annotations

import bisect
import itertools
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gleaner.protocol import wire as p

MAX_RUNS = 4096
"""Beyond this many byte runs per block a block is covered by one conservative span."""

Run = tuple[int, int]
"""(byte offset from the block's start, byte length)."""


@dataclass(frozen=True, slots=True)
class KvLayout:
    """One KV layer tensor as the attention backend sees it."""

    data_ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    """In elements, as ``torch.Tensor.stride()``."""
    element_size: int
    block_dim: int
    """The dimension indexed by the (kernel) block id."""
    kernel_blocks_per_block: int = 1
    """Kernel blocks per block-manager block (vLLM may split a block for the kernel)."""

    @property
    def num_kernel_blocks(self) -> int:
        return self.shape[self.block_dim]

    @property
    def block_stride_bytes(self) -> int:
        return self.strides[self.block_dim] * self.element_size


def block_runs(layout: KvLayout) -> list[Run]:
    """The byte runs of one kernel block, relative to its first byte (see module doc)."""
    if len(layout.shape) != len(layout.strides) or not 0 <= layout.block_dim < len(layout.shape):
        raise ValueError(f"bad layout {layout}")
    if any(s < 0 for s in layout.strides) or layout.element_size <= 0:
        raise ValueError(f"negative stride or element size in {layout}")
    es = layout.element_size
    dims = sorted(
        (layout.strides[i] * es, n)
        for i, n in enumerate(layout.shape)
        if i != layout.block_dim and n > 1
    )
    run = es
    k = 0
    while k < len(dims) and dims[k][0] == run:
        run *= dims[k][1]
        k += 1
    outer = dims[k:]
    if math.prod(n for _, n in outer) > MAX_RUNS:
        hi = sum(stride * (n - 1) for stride, n in outer) + run
        return [(0, hi)]
    offsets = sorted(
        sum(stride * i for (stride, _), i in zip(outer, idx, strict=True))
        for idx in itertools.product(*(range(n) for _, n in outer))
    )
    # Touching or overlapping runs merge.
    merged: list[Run] = []
    for off in offsets:
        if merged and off <= merged[-1][0] + merged[-1][1]:
            start, length = merged[-1]
            merged[-1] = (start, max(length, off + run - start))
        else:
            merged.append((off, run))
    return merged


@dataclass(frozen=True, slots=True)
class PageTable:
    """Which blocks have bytes in which shim page, and the reverse."""

    page_bytes: int
    pages: tuple[int, ...]
    """Every shim page VA, in address order."""
    page_blocks: Mapping[int, frozenset[int]]
    """Page VA → block ids with bytes in it (pages holding none are absent)."""
    block_pages: Mapping[int, frozenset[int]]
    """Block id → page VAs it has bytes in (blocks outside every page are absent)."""


def page_table(layouts: Iterable[KvLayout], pages: Sequence[int], page_bytes: int) -> PageTable:
    """See the module docstring."""
    if page_bytes <= 0:
        raise ValueError("page_bytes must be positive")
    vas = sorted(pages)
    p2b: dict[int, set[int]] = {}
    for lay in layouts:
        nkb = lay.num_kernel_blocks
        if nkb <= 0:
            continue
        stride = lay.block_stride_bytes
        runs = block_runs(lay)
        span = runs[-1][0] + runs[-1][1]
        lo = lay.data_ptr
        hi = lay.data_ptr + stride * (nkb - 1) + span
        first = max(0, bisect.bisect_right(vas, lo) - 1)
        for va in vas[first:]:
            if va >= hi:
                break
            if va + page_bytes <= lo:
                continue
            rel_lo = va - lay.data_ptr
            rel_hi = rel_lo + page_bytes
            for off, length in runs:
                # kernel block kb touches the page iff kb*stride+off < rel_hi and
                # kb*stride+off+length > rel_lo.
                if stride == 0:
                    kb_lo, kb_hi = (0, 0) if off < rel_hi and off + length > rel_lo else (1, 0)
                else:
                    kb_lo = max(0, (rel_lo - off - length) // stride + 1)
                    kb_hi = min(nkb - 1, -((off - rel_hi) // stride) - 1)
                if kb_lo > kb_hi:
                    continue
                f = lay.kernel_blocks_per_block
                p2b.setdefault(va, set()).update(range(kb_lo // f, kb_hi // f + 1))
    b2p: dict[int, set[int]] = {}
    for va, blocks in p2b.items():
        for b in blocks:
            b2p.setdefault(b, set()).add(va)
    return PageTable(
        page_bytes=page_bytes,
        pages=tuple(vas),
        page_blocks={va: frozenset(bs) for va, bs in p2b.items()},
        block_pages={b: frozenset(ps) for b, ps in b2p.items()},
    )


@dataclass(frozen=True, slots=True)
class RequestBlocks:
    """What the scheduler says about one running request."""

    block_ids: tuple[int, ...]
    num_computed_tokens: int


def handle_entries(
    table: PageTable,
    requests: Mapping[str, RequestBlocks],
    block_size: int,
    quarantined: Iterable[int] = (),
) -> list[p.HandleSpan]:
    """See the module docstring."""
    gone = set(quarantined)
    # page → request → [first index, block ids in request order]
    per_page: dict[int, dict[str, tuple[int, list[int]]]] = {}
    for rid, req in requests.items():
        unique = len(set(req.block_ids)) == len(req.block_ids)
        for idx, b in enumerate(req.block_ids):
            for va in table.block_pages.get(b, ()):
                spans = per_page.setdefault(va, {})
                got = spans.get(rid)
                if got is None:
                    spans[rid] = (idx, [b])
                elif unique or b not in got[1]:
                    got[1].append(b)
    out: list[p.HandleSpan] = []
    for va in table.pages:
        if va in gone:
            continue
        held = per_page.get(va)
        if not held:
            out.append(p.HandleSpan(handle=va, size=table.page_bytes, request_id=""))
            continue
        for rid in requests:
            got = held.get(rid)
            if got is None:
                continue
            tokens = max(0, requests[rid].num_computed_tokens - got[0] * block_size)
            out.append(
                p.HandleSpan(
                    handle=va,
                    size=table.page_bytes,
                    request_id=rid[: p.REQUEST_ID_LEN - 1],
                    block_ids=tuple(got[1]),
                    tokens=tokens,
                )
            )
    return out


_ENTRY = 88
"""Bytes of one OFFLINE_HANDLES entry before its block ids."""
_HEAD = 16


def handle_frames(gpu: int, entries: Sequence[p.HandleSpan]) -> list[p.OfflineHandles]:
    """See the module docstring (always at least one frame: an empty table resets too)."""
    per_frame_ids = (p.MAX_PAYLOAD - _HEAD - _ENTRY) // 4
    pieces: list[p.HandleSpan] = []
    for e in entries:
        if len(e.block_ids) <= per_frame_ids:
            pieces.append(e)
            continue
        for k in range(0, len(e.block_ids), per_frame_ids):
            pieces.append(
                p.HandleSpan(
                    handle=e.handle,
                    size=e.size,
                    request_id=e.request_id,
                    block_ids=e.block_ids[k : k + per_frame_ids],
                    tokens=e.tokens if k == 0 else 0,
                )
            )
    frames: list[list[p.HandleSpan]] = [[]]
    used = _HEAD
    for e in pieces:
        size = _ENTRY + 4 * len(e.block_ids)
        if used + size > p.MAX_PAYLOAD:
            frames.append([])
            used = _HEAD
        frames[-1].append(e)
        used += size
    return [
        p.OfflineHandles(gpu=gpu, entries=tuple(es), reset=(i == 0)) for i, es in enumerate(frames)
    ]


@dataclass(frozen=True, slots=True)
class PageGroups:
    """Pages with identical block sets, grouped (typically every layer's K and V page over
    one block range: 64 pages per group in a 32-layer FlashAttention layout)."""

    blocks: tuple[tuple[int, ...], ...]
    """Group → its block ids, ascending."""
    page_group: Mapping[int, int]
    """Page VA → its group (pages holding no block are absent)."""
    block_groups: Mapping[int, tuple[int, ...]]
    """Block id → the groups whose pages it has bytes in."""
    pages: tuple[tuple[int, ...], ...] = ()
    """Group → its page VAs, in address order."""
    empty: tuple[int, ...] = ()
    """Pages holding no block, in address order."""


def page_groups(table: PageTable) -> PageGroups:
    """See the module docstring."""
    index: dict[frozenset[int], int] = {}
    page_group: dict[int, int] = {}
    for va in table.pages:
        bs = table.page_blocks.get(va)
        if bs:
            page_group[va] = index.setdefault(bs, len(index))
    blocks: list[tuple[int, ...]] = [()] * len(index)
    for members, g in index.items():
        blocks[g] = tuple(sorted(members))
    block_groups: dict[int, list[int]] = {}
    for g, ids in enumerate(blocks):
        for b in ids:
            block_groups.setdefault(b, []).append(g)
    members_of: list[list[int]] = [[] for _ in blocks]
    empty: list[int] = []
    for va in table.pages:
        grp = page_group.get(va)
        if grp is None:
            empty.append(va)
        else:
            members_of[grp].append(va)
    return PageGroups(
        blocks=tuple(blocks),
        page_group=page_group,
        block_groups={b: tuple(gs) for b, gs in block_groups.items()},
        pages=tuple(tuple(m) for m in members_of),
        empty=tuple(empty),
    )


_FRAME_HEAD = struct.Struct("<IBBHII")
"""The protocol header (docs/protocol.md): magic, version, type, flags, length, seq."""
_OFF_HEAD = struct.Struct("<IIII")
"""OFFLINE_HANDLES' fixed head: gpu, count, flags, reserved."""
_ENTRY_VA = struct.Struct("<QQ")
"""An entry's page: handle (VA), size."""
_ENTRY_REST = struct.Struct(f"<{p.REQUEST_ID_LEN}sII")
"""An entry's span: request id, tokens, block-id count (block ids follow)."""
_EMPTY_REST: tuple[bytes, ...] = (_ENTRY_REST.pack(b"", 0, 0),)


def _request_id_bytes(rid: str) -> bytes:
    """At most 63 bytes of UTF-8; what cannot be encoded (a lone surrogate) becomes ``?``
    rather than an exception on the reporter's thread."""
    raw = rid[: p.REQUEST_ID_LEN - 1].encode(errors="replace")
    return raw[: p.REQUEST_ID_LEN - 1]


_GroupSpans = list[dict[str, tuple[int, list[int]]] | None]
"""Group → request → (index of its first block in the group, its block ids there in order)."""


def _group_spans(groups: PageGroups, requests: Mapping[str, RequestBlocks]) -> _GroupSpans:
    """Spans per group, not per page: each block is visited once per group it lives in."""
    spans: _GroupSpans = [None] * len(groups.blocks)
    block_groups = groups.block_groups
    for rid, req in requests.items():
        unique = len(set(req.block_ids)) == len(req.block_ids)  # else: dedupe per span
        for idx, b in enumerate(req.block_ids):
            for g in block_groups.get(b, ()):
                held = spans[g]
                if held is None:
                    held = spans[g] = {}
                got = held.get(rid)
                if got is None:
                    held[rid] = (idx, [b])
                elif unique or b not in got[1]:
                    got[1].append(b)
    return spans


def encode_handles(
    table: PageTable,
    groups: PageGroups,
    requests: Mapping[str, RequestBlocks],
    block_size: int,
    quarantined: Iterable[int] = (),
    gpu: int = 0,
) -> list[bytes]:
    """See the module docstring: the encoded frames of
    ``handle_frames(gpu, handle_entries(table, requests, block_size, quarantined))``."""
    per_frame_ids = (p.MAX_PAYLOAD - _HEAD - _ENTRY) // 4
    spans = _group_spans(groups, requests)
    # Each group's entries without their page (request id, tokens, count, block ids): the
    # same bytes for every page of the group.
    rests: list[tuple[bytes, ...]] = []
    sizes: list[int] = []
    for held in spans:
        if not held:
            rests.append(_EMPTY_REST)
            sizes.append(_ENTRY)
            continue
        out: list[bytes] = []
        for rid, (first, ids) in held.items():
            tokens = max(0, requests[rid].num_computed_tokens - first * block_size)
            rb = _request_id_bytes(rid)
            for k in range(0, len(ids), per_frame_ids):
                part = ids[k : k + per_frame_ids]
                n = len(part)
                out.append(
                    _ENTRY_REST.pack(rb, tokens if k == 0 else 0, n) + struct.pack(f"<{n}I", *part)
                )
        rests.append(tuple(out))
        sizes.append(_ENTRY_VA.size * len(out) + sum(len(r) for r in out))
    gone = set(quarantined)
    frames: list[bytes] = []
    chunks: list[bytes] = []
    count = 0
    used = _HEAD

    def flush() -> None:
        nonlocal chunks, count, used
        body = _OFF_HEAD.pack(gpu, count, int(not frames), 0) + b"".join(chunks)
        head = _FRAME_HEAD.pack(p.MAGIC, p.VERSION, int(p.MsgType.OFFLINE_HANDLES), 0, len(body), 0)
        frames.append(head + body)
        chunks, count, used = [], 0, _HEAD

    page_bytes = table.page_bytes
    page_group = groups.page_group
    for va in table.pages:
        if va in gone:
            continue
        grp = page_group.get(va)
        if grp is None:
            entry_rests, total = _EMPTY_REST, _ENTRY
        else:
            entry_rests, total = rests[grp], sizes[grp]
        head = _ENTRY_VA.pack(va, page_bytes)
        if used + total <= p.MAX_PAYLOAD:  # the whole page fits: one join
            chunks.append(head)
            chunks.append(head.join(entry_rests))
            count += len(entry_rests)
            used += total
            continue
        for rest in entry_rests:
            size = _ENTRY_VA.size + len(rest)
            if used + size > p.MAX_PAYLOAD:
                flush()
            chunks.append(head)
            chunks.append(rest)
            count += 1
            used += size
    flush()
    return frames


_PG_GROUP = struct.Struct("<QIIII")
"""An OFFLINE_PAGE_GROUPS record's head: page bytes, npages, nspans, gflags, reserved."""
_PG_SPAN = struct.Struct(f"<{p.REQUEST_ID_LEN}sII")
"""A group span's head: request id, tokens, block-id count (block ids follow)."""
_PG_BUDGET = p.MAX_PAYLOAD - _HEAD
"""Record bytes one frame holds."""
_PG_HALF_PAGES = (_PG_BUDGET // 2 - _PG_GROUP.size) // 8
"""Pages per record when a group's pages take more than half a frame."""
PG_SPAN_IDS = (_PG_BUDGET // 2 - _PG_SPAN.size) // 4
"""Block ids per span piece: a longer span is split (same request and tokens per piece)."""


def _pg_records(
    page_bytes: int, vas: Sequence[int], pieces: Sequence[bytes], gflags: int = 0
) -> list[bytes]:
    """One group's records, each within one frame: all its pages and all its span pieces
    in one record when they fit, else subsets (pages in chunks of at most half a frame;
    every page chunk repeated with span pieces packed into the room that is left)."""
    npages = len(vas)
    total = sum(len(x) for x in pieces)
    if _PG_GROUP.size + 8 * npages + total <= _PG_BUDGET:
        chunks: Sequence[Sequence[int]] = (vas,)
    elif _PG_GROUP.size + 8 * npages <= _PG_BUDGET // 2:
        chunks = (vas,)
    else:
        chunks = [vas[k : k + _PG_HALF_PAGES] for k in range(0, npages, _PG_HALF_PAGES)]
    out: list[bytes] = []
    for chunk in chunks:
        n = len(chunk)
        va_bytes = struct.pack(f"<{n}Q", *chunk)
        room = _PG_BUDGET - _PG_GROUP.size - 8 * n
        batch: list[bytes] = []
        used = 0
        for piece in pieces:
            if batch and used + len(piece) > room:
                out.append(_PG_GROUP.pack(page_bytes, n, len(batch), gflags, 0) + va_bytes
                           + b"".join(batch))  # fmt: skip
                batch, used = [], 0
            batch.append(piece)
            used += len(piece)
        out.append(
            _PG_GROUP.pack(page_bytes, n, len(batch), gflags, 0) + va_bytes + b"".join(batch)
        )
    return out


def encode_page_groups(
    table: PageTable,
    groups: PageGroups,
    requests: Mapping[str, RequestBlocks],
    block_size: int,
    quarantined: Iterable[int] = (),
    gpu: int = 0,
) -> list[bytes]:
    """See the module docstring: the encoded OFFLINE_PAGE_GROUPS frames."""
    spans = _group_spans(groups, requests)
    gone = set(quarantined)
    page_bytes = table.page_bytes
    records: list[bytes] = []
    for g, held in enumerate(spans):
        vas = groups.pages[g]
        if gone:
            vas = tuple(va for va in vas if va not in gone)
        if not vas:
            continue
        pieces: list[bytes] = []
        for rid, (first, ids) in (held or {}).items():
            tokens = max(0, requests[rid].num_computed_tokens - first * block_size)
            rb = _request_id_bytes(rid)
            for k in range(0, len(ids), PG_SPAN_IDS):
                part = ids[k : k + PG_SPAN_IDS]
                n = len(part)
                pieces.append(_PG_SPAN.pack(rb, tokens, n) + struct.pack(f"<{n}I", *part))
        records += _pg_records(page_bytes, vas, pieces)
    empty = tuple(va for va in groups.empty if va not in gone) if gone else groups.empty
    if empty:
        records += _pg_records(page_bytes, empty, ())
    lost = [va for va in table.pages if va in gone]
    if lost:
        records += _pg_records(page_bytes, lost, (), p.PAGE_GROUP_QUARANTINED)
    frames: list[bytes] = []
    batch: list[bytes] = []
    used = _HEAD
    kind = int(p.MsgType.OFFLINE_PAGE_GROUPS)

    def flush() -> None:
        body = _OFF_HEAD.pack(gpu, len(batch), int(not frames), 0) + b"".join(batch)
        frames.append(_FRAME_HEAD.pack(p.MAGIC, p.VERSION, kind, 0, len(body), 0) + body)

    for rec in records:
        if batch and used + len(rec) > p.MAX_PAYLOAD:
            flush()
            batch, used = [], _HEAD
        batch.append(rec)
        used += len(rec)
    flush()
    return frames


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What the hook does at one step boundary (see :func:`plan_step`)."""

    retire: frozenset[int] = frozenset()
    release: frozenset[int] = frozenset()
    lost: frozenset[int] = frozenset()
    """Blocks whose content is gone since the last check."""
    recompute: Mapping[str, int] = field(default_factory=dict)
    """Request id → index of its first lost block."""

    def __bool__(self) -> bool:
        return bool(self.retire or self.release or self.lost or self.recompute)


def plan_step(
    table: PageTable,
    quarantined_before: Iterable[int],
    quarantined_now: Iterable[int],
    retired: Iterable[int],
    holders: Mapping[str, Sequence[int]],
    lost_pages: Iterable[int] = (),
    null_block: int | None = 0,
) -> StepPlan:
    """See the module docstring.

    ``lost_pages`` adds pages whose content is known gone although their state does not
    show it (seen quarantined in between); ``null_block`` (vLLM's placeholder block 0) is
    never retired or reported lost.
    """
    before = set(quarantined_before)
    now = set(quarantined_now)
    done = set(retired)
    gone_pages = (now - before) | set(lost_pages)
    lost = {b for va in gone_pages for b in table.page_blocks.get(va, ())}
    in_quarantine = {b for va in now for b in table.page_blocks.get(va, ())}
    if null_block is not None:
        lost.discard(null_block)
        in_quarantine.discard(null_block)
    retire = in_quarantine - done
    release = {b for b in done if not (table.block_pages.get(b, frozenset()) & now)}
    recompute: dict[str, int] = {}
    if lost:
        for rid, blocks in holders.items():
            for idx, b in enumerate(blocks):
                if b in lost:
                    recompute[rid] = idx
                    break
    return StepPlan(
        retire=frozenset(retire),
        release=frozenset(release),
        lost=frozenset(lost),
        recompute=recompute,
    )
