"""The pure KV memory-path decisions (gleaner.vllm_hook.pages) against brute force."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.protocol import wire as p
from gleaner.vllm_hook.pages import (
    PG_SPAN_IDS,
    KvLayout,
    PageTable,
    RequestBlocks,
    block_runs,
    encode_handles,
    encode_page_groups,
    handle_entries,
    handle_frames,
    page_groups,
    page_table,
    plan_step,
)

PAGE = 256


def _brute(layouts: list[KvLayout], pages: list[int], page_bytes: int) -> dict[int, set[int]]:
    """Every element's bytes → its page: page VA → blocks, by enumeration."""
    out: dict[int, set[int]] = {}
    for lay in layouts:
        for idx in itertools.product(*(range(n) for n in lay.shape)):
            off = sum(i * s for i, s in zip(idx, lay.strides, strict=True)) * lay.element_size
            block = idx[lay.block_dim] // lay.kernel_blocks_per_block
            for byte in range(off, off + lay.element_size):
                addr = lay.data_ptr + byte
                for va in pages:
                    if va <= addr < va + page_bytes:
                        out.setdefault(va, set()).add(block)
    return out


@st.composite
def layouts(draw: st.DrawFn) -> tuple[KvLayout, list[int]]:
    ndim = draw(st.integers(2, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    order = draw(st.permutations(range(ndim)))  # physical order, outermost first
    strides = [0] * ndim
    acc = 1
    for d in reversed(order):
        strides[d] = acc
        acc *= shape[d]
    es = draw(st.sampled_from([1, 2, 4]))
    block_dim = draw(st.integers(0, ndim - 1))
    f = draw(st.sampled_from([1, 2]))
    base = PAGE * draw(st.integers(0, 3)) + draw(st.integers(0, PAGE - 1))
    lay = KvLayout(base, shape, tuple(strides), es, block_dim, f)
    span = acc * es
    npages = (base + span) // PAGE + 2
    # The shim's pages: a subset of the covering pages (the rest is memory it does not own).
    keep = draw(st.lists(st.booleans(), min_size=npages, max_size=npages))
    return lay, [PAGE * i for i, k in enumerate(keep) if k]


@settings(max_examples=150)
@given(layouts())
def test_page_table_matches_brute_force(case: tuple[KvLayout, list[int]]) -> None:
    lay, pages = case
    table = page_table([lay], pages, PAGE)
    want = _brute([lay], pages, PAGE)
    assert {va: set(bs) for va, bs in table.page_blocks.items()} == want
    for va, blocks in want.items():
        for b in blocks:
            assert va in table.block_pages[b]


def test_flash_attention_layout_puts_k_and_v_halves_in_different_pages() -> None:
    # (2, num_blocks, block_size, heads, head_size) bf16: one block's K and V are far apart.
    nb, bs, h, d = 8, 16, 2, 64
    block_bytes = bs * h * d * 2  # 4 KiB per half-block
    lay = KvLayout(0x10000, (2, nb, bs, h, d), (nb * bs * h * d, bs * h * d, h * d, d, 1), 2, 1)
    assert block_runs(lay) == [(0, block_bytes), (nb * block_bytes, block_bytes)]
    page = 4 * block_bytes
    pages = [0x10000 + i * page for i in range(4)]
    t = page_table([lay], pages, page)
    assert t.page_blocks[pages[0]] == {0, 1, 2, 3} and t.page_blocks[pages[2]] == {0, 1, 2, 3}
    assert t.block_pages[5] == {pages[1], pages[3]}


def test_too_many_runs_fall_back_to_a_superset() -> None:
    # Block dim in the middle: 5000 separate 2-byte runs per block, over MAX_RUNS.
    lay = KvLayout(0, (5000, 3, 2), (6, 2, 1), 1, 1)
    assert block_runs(lay) == [(0, 6 * 4999 + 2)]
    pages = [0, 4096, 8192, 12288, 16384, 20480, 24576, 28672]
    t = page_table([lay], pages, 4096)
    want = _brute([lay], pages, 4096)
    assert all(want[va] <= t.page_blocks[va] for va in want)
    assert t.block_pages[2] == set(pages)


def _table() -> PageTable:
    # 4 pages of 2 blocks each (blocks 0..7), block size 16 tokens.
    return PageTable(
        page_bytes=4096,
        pages=(0x1000, 0x2000, 0x3000, 0x4000),
        page_blocks={0x1000: frozenset({0, 1}), 0x2000: frozenset({2, 3}),
                     0x3000: frozenset({4, 5})},
        block_pages={0: frozenset({0x1000}), 1: frozenset({0x1000}), 2: frozenset({0x2000}),
                     3: frozenset({0x2000}), 4: frozenset({0x3000}), 5: frozenset({0x3000})},
    )  # fmt: skip


def test_handle_entries_spans_tokens_empty_and_quarantined_pages() -> None:
    reqs = {
        "a": RequestBlocks((1, 2, 3, 4), num_computed_tokens=60),
        "b": RequestBlocks((3,), num_computed_tokens=5),
    }
    got = handle_entries(_table(), reqs, 16, quarantined=[0x3000])
    assert got == [
        p.HandleSpan(0x1000, 4096, "a", tokens=60, block_ids=(1,)),
        p.HandleSpan(0x2000, 4096, "a", tokens=60 - 16, block_ids=(2, 3)),
        p.HandleSpan(0x2000, 4096, "b", tokens=5, block_ids=(3,)),
        p.HandleSpan(0x4000, 4096, ""),
    ]
    # tokens clamp at zero: block index 3 starts at token 48 > 40 computed
    (span,) = [
        e
        for e in handle_entries(_table(), {"a": RequestBlocks((1, 2, 3, 4), 40)}, 16)
        if e.handle == 0x3000
    ]
    assert span.tokens == 0


@settings(max_examples=50)
@given(st.lists(st.integers(0, 20000), min_size=0, max_size=40))
def test_handle_frames_fit_and_round_trip(sizes: list[int]) -> None:
    entries = [
        p.HandleSpan(0x1000 * (i + 1), 4096, f"r{i}", tokens=7, block_ids=tuple(range(n)))
        for i, n in enumerate(sizes)
    ]
    frames = handle_frames(3, entries)
    assert frames[0].reset and not any(f.reset for f in frames[1:])
    back: dict[tuple[int, str], list[int]] = {}
    tokens: dict[tuple[int, str], int] = {}
    for f in frames:
        wire = f.encode(1)
        assert len(wire) - p.HEADER_SIZE <= p.MAX_PAYLOAD
        msg, used = p.decode(wire)
        assert isinstance(msg, p.OfflineHandles) and used == len(wire) and msg.gpu == 3
        for e in msg.entries:
            back.setdefault((e.handle, e.request_id), []).extend(e.block_ids)
            tokens[(e.handle, e.request_id)] = tokens.get((e.handle, e.request_id), 0) + e.tokens
    assert back == {(e.handle, e.request_id): list(e.block_ids) for e in entries}
    assert all(t == 7 for t in tokens.values())


def test_plan_step_retire_release_recompute() -> None:
    t = _table()
    holders = {"a": [1, 2, 3, 4], "b": [5], "c": [0]}
    plan = plan_step(t, quarantined_before=[], quarantined_now=[0x2000, 0x1000],
                     retired=[], holders=holders)  # fmt: skip
    assert plan.retire == {1, 2, 3}  # block 0 is vLLM's null block: never retired
    assert plan.lost == {1, 2, 3} and plan.release == frozenset()
    assert dict(plan.recompute) == {"a": 0}
    # Later: 0x1000 restored, 0x2000 still out; nothing newly lost.
    later = plan_step(t, [0x2000, 0x1000], [0x2000], retired={1, 2, 3}, holders=holders)
    assert later.release == {1} and later.retire == frozenset() and not later.recompute
    # A page seen lost in between (already restored) still counts as lost.
    seen = plan_step(t, [], [], retired=[], holders=holders, lost_pages=[0x3000])
    assert seen.lost == {4, 5} and dict(seen.recompute) == {"a": 3, "b": 0}
    assert not plan_step(t, [0x2000], [0x2000], {2, 3}, holders)


@settings(max_examples=100)
@given(
    st.sets(st.sampled_from([0x1000, 0x2000, 0x3000, 0x4000])),
    st.sets(st.sampled_from([0x1000, 0x2000, 0x3000, 0x4000])),
)
def test_plan_step_never_leaves_a_quarantined_block_usable(before: set[int], now: set[int]) -> None:
    t = _table()
    retired = {b for va in before for b in t.page_blocks.get(va, ())} - {0}
    plan = plan_step(t, before, now, retired, {})
    after = (retired | plan.retire) - plan.release
    in_quarantine = {b for va in now for b in t.page_blocks.get(va, ())} - {0}
    assert in_quarantine <= after  # every block in a quarantined page stays retired
    assert not plan.retire & retired and plan.release <= retired


def _reference_wire(
    t: PageTable, reqs: dict[str, RequestBlocks], bs: int, q: list[int], gpu: int
) -> list[bytes]:
    return [m.encode(0) for m in handle_frames(gpu, handle_entries(t, reqs, bs, q))]


def _draw_report(
    case: tuple[KvLayout, list[int]], data: st.DataObject
) -> tuple[PageTable, dict[str, RequestBlocks], list[int], int]:
    """A page table, up to 5 requests on it, up to 3 quarantined pages and a GPU index."""
    lay, pages = case
    t = page_table([lay], pages, PAGE)
    nblocks = lay.num_kernel_blocks // lay.kernel_blocks_per_block
    ids = st.lists(st.integers(0, max(0, nblocks - 1)), max_size=8)  # duplicates allowed
    reqs = {
        f"req-{i}": RequestBlocks(tuple(data.draw(ids)), data.draw(st.integers(0, 200)))
        for i in range(data.draw(st.integers(0, 5)))
    }
    q = data.draw(st.lists(st.sampled_from(pages), max_size=3)) if pages else []
    gpu = data.draw(st.integers(0, 7))
    return t, reqs, q, gpu


@settings(max_examples=100)
@given(layouts(), st.data())
def test_encode_handles_is_byte_identical_to_the_reference(
    case: tuple[KvLayout, list[int]], data: st.DataObject
) -> None:
    t, reqs, q, gpu = _draw_report(case, data)
    got = encode_handles(t, page_groups(t), reqs, 16, q, gpu)
    assert got == _reference_wire(t, reqs, 16, q, gpu)


def test_encode_handles_splits_large_spans_and_pages_across_frames() -> None:
    # 3 groups of 2 pages; group 1 holds 40,000 blocks (a span larger than one frame).
    r1, r2, r3 = range(0, 100), range(100, 40100), range(40100, 40300)
    ranges = {0x1000: r1, 0x2000: r1, 0x3000: r2, 0x4000: r2, 0x5000: r3, 0x6000: r3}
    b2p: dict[int, set[int]] = {}
    for va, r in ranges.items():
        for blk in r:
            b2p.setdefault(blk, set()).add(va)
    t = PageTable(
        4096,
        (*ranges, 0x7000),
        {va: frozenset(r) for va, r in ranges.items()},
        {b: frozenset(v) for b, v in b2p.items()},
    )
    g = page_groups(t)
    assert len(g.blocks) == 3 and g.page_group[0x3000] == g.page_group[0x4000]
    reqs = {f"r{i}": RequestBlocks(tuple(range(i * 700, i * 700 + 900)), 50_000) for i in range(58)}
    reqs["big"] = RequestBlocks(tuple(range(40299, -1, -1)), 700_000)
    got = encode_handles(t, g, reqs, 16, [0x2000])
    assert len(got) > 6 and got == _reference_wire(t, reqs, 16, [0x2000], 0)
    # One frame each, RESET first only; nothing lost in the split.
    dec = p.FrameDecoder()
    msgs = [m for f in got for m in dec.feed(f) if isinstance(m, p.OfflineHandles)]
    assert len(msgs) == len(got) and [m.reset for m in msgs] == [True] + [False] * (len(got) - 1)
    held: dict[tuple[int, str], list[int]] = {}
    for m in msgs:
        assert isinstance(m, p.OfflineHandles)
        for e in m.entries:
            held.setdefault((e.handle, e.request_id), []).extend(e.block_ids)
    assert sorted(held[(0x3000, "big")]) == list(range(100, 40100))
    assert (0x2000, "big") not in held and held[(0x7000, "")] == []


_PerPage = dict[int, dict[str, tuple[int, list[int]]]]


def _reference_pages(
    t: PageTable, reqs: dict[str, RequestBlocks], bs: int, q: list[int]
) -> _PerPage:
    """handle_entries (the OFFLINE_HANDLES reference) as page → request → (tokens, blocks)."""
    out: _PerPage = {}
    for e in handle_entries(t, reqs, bs, q):
        per = out.setdefault(e.handle, {})
        if e.request_id or e.block_ids:
            per[e.request_id] = (e.tokens, list(e.block_ids))
    return out


def _decode_groups(frames: list[bytes], gpu: int) -> tuple[_PerPage, set[int], int]:
    """What an agent learns from OFFLINE_PAGE_GROUPS frames, expanded per page (test only):
    page → request → (tokens, blocks) (pieces of one request's span concatenate, same
    tokens), the quarantined pages, and the page size."""
    per_page: _PerPage = {}
    quarantined: set[int] = set()
    sizes: set[int] = set()
    dec = p.FrameDecoder()
    msgs = [m for f in frames for m in dec.feed(f)]
    assert len(msgs) == len(frames)
    assert all(len(f) - p.HEADER_SIZE <= p.MAX_PAYLOAD for f in frames)
    for i, m in enumerate(msgs):
        assert isinstance(m, p.OfflinePageGroups) and m.gpu == gpu and m.reset == (i == 0)
        for g in m.groups:
            sizes.add(g.page_bytes)
            if g.quarantined:
                assert not g.spans
                quarantined.update(g.pages)
                continue
            for va in g.pages:
                per = per_page.setdefault(va, {})
                for sp in g.spans:
                    got = per.get(sp.request_id)
                    if got is None:
                        per[sp.request_id] = (sp.tokens, list(sp.block_ids))
                    else:
                        assert got[0] == sp.tokens
                        got[1].extend(sp.block_ids)
    assert len(sizes) <= 1
    return per_page, quarantined, sizes.pop() if sizes else 0


@settings(max_examples=100)
@given(layouts(), st.data())
def test_encode_page_groups_carries_the_reference_table(
    case: tuple[KvLayout, list[int]], data: st.DataObject
) -> None:
    t, reqs, q, gpu = _draw_report(case, data)
    frames = encode_page_groups(t, page_groups(t), reqs, 16, q, gpu)
    per_page, quarantined, size = _decode_groups(frames, gpu)
    assert per_page == _reference_pages(t, reqs, 16, q)
    assert quarantined == set(q)
    assert size in ((PAGE,) if t.pages else (0,))


def test_encode_page_groups_splits_pages_and_spans_across_frames() -> None:
    # Group A: 5,000 pages over blocks 0..99 (its VAs alone exceed half a frame); group B:
    # 2 pages over blocks 100..40099 (a span larger than a frame); 9,000 empty pages; 5,000
    # pages of group A's block set quarantined (a QUARANTINED group over half a frame).
    a = tuple(0x10_0000 + 0x1000 * i for i in range(5000))
    b = (0x9000_0000, 0x9000_1000)
    empty = tuple(0xA000_0000 + 0x1000 * i for i in range(9000))
    lost = tuple(0xC000_0000 + 0x1000 * i for i in range(5000))
    fa, fb = frozenset(range(100)), frozenset(range(100, 40100))
    pa, pb = frozenset(a), frozenset(b)
    t = PageTable(
        4096,
        tuple(sorted(a + b + empty + lost)),
        {**{va: fa for va in a}, **{va: fb for va in b}, **{va: fa for va in lost}},
        {**{blk: pa | frozenset(lost) for blk in fa}, **{blk: pb for blk in fb}},
    )
    g = page_groups(t)
    assert len(g.blocks) == 2 and len(g.empty) == 9000
    reqs = {f"r{i}": RequestBlocks(tuple(range(i * 700, i * 700 + 900)), 50_000) for i in range(58)}
    reqs["big"] = RequestBlocks(tuple(range(40099, -1, -1)), 700_000)
    frames = encode_page_groups(t, g, reqs, 16, lost, 5)
    per_page, quarantined, size = _decode_groups(frames, 5)
    assert size == 4096 and quarantined == set(lost)
    assert per_page == _reference_pages(t, reqs, 16, list(lost))
    assert sorted(per_page[b[0]]["big"][1]) == list(range(100, 40100))
    pieces = [
        len(sp.block_ids)
        for f in frames
        for m in [p.decode(f)[0]]
        if isinstance(m, p.OfflinePageGroups)
        for grp in m.groups
        if b[0] in grp.pages
        for sp in grp.spans
        if sp.request_id == "big"
    ]
    assert len(pieces) >= 2 and max(pieces) <= PG_SPAN_IDS  # the big span was cut
    # 19,002 page VAs (152 KiB) + 40,000+ block ids: at least 4 frames, at most ~2x that.
    assert 4 <= len(frames) <= 10


def test_encode_page_groups_of_an_empty_table_is_one_reset_frame() -> None:
    t = PageTable(4096, (), {}, {})
    frames = encode_page_groups(t, page_groups(t), {}, 16, (), 1)
    msg, _ = p.decode(frames[0])
    assert len(frames) == 1 and msg == p.OfflinePageGroups(gpu=1, groups=(), reset=True)


def test_a_request_id_utf8_cannot_encode_is_reported_not_raised() -> None:
    """A lone surrogate (possible in a client-supplied request id) must not stop the reports:
    it goes out as ``?``; an id longer than the field is cut to 63 bytes."""
    pages = [0x10_0000, 0x20_0000]
    t = PageTable(PAGE, tuple(pages), {pages[0]: frozenset({0})}, {0: frozenset({pages[0]})})
    long = "x" * 100
    reqs = {"a\ud800b": RequestBlocks((0,), 16), long: RequestBlocks((0,), 8)}
    frames = encode_page_groups(t, page_groups(t), reqs, 16)
    decoded = [m for f in frames for m in p.FrameDecoder().feed(f)]
    assert all(isinstance(m, p.OfflinePageGroups) for m in decoded)
    ids = {
        sp.request_id
        for m in decoded
        if isinstance(m, p.OfflinePageGroups)
        for g in m.groups
        for sp in g.spans
    }
    assert ids == {"a?b", "x" * 63}
