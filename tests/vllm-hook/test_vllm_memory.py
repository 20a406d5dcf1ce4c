"""The KV memory adapter against the fake engine (gleaner.testing.vllm_fake): pinned block
pool semantics, the runner's own block tables and a KV store that reads garbage from
reclaimed pages, so a wrong recompute shows as a different sampled token."""

from __future__ import annotations

from collections.abc import Callable

from gleaner.testing import vllm_fake as v
from gleaner.vllm_hook import memory
from gleaner.vllm_hook.pages import KvLayout

BASE = 0x7F0000000000
BPB = 1024  # bytes per block
BS = 4  # tokens per block
NBLOCKS = 64
PAGE = 4 * BPB  # 4 blocks per page


Drain = Callable[[], dict[str, set[int]]]


def _engine(
    hooked: bool, with_epochs: bool = True, drain: Drain = dict
) -> tuple[v.EngineScheduler, v.FakeRunner, v.FakeKvPages, list[object]]:
    shim = v.FakeKvPages(BASE, NBLOCKS * BPB, PAGE, with_epochs=with_epochs)
    hooks: list[object] = []

    class Sched(v.EngineScheduler):
        pass

    if hooked:
        layout = KvLayout(BASE, (NBLOCKS, BPB), (BPB, 1), 1, 0)

        def make(s: object) -> memory.MemoryHook:
            h = memory.MemoryHook(shim, [layout], publish=hooks.append)
            return h

        assert memory.install(Sched, lambda: drain(), make)
    s = Sched(num_blocks=NBLOCKS, block_size=BS, bytes_per_block=BPB)
    r = v.FakeRunner(BS, lost=lambda b: shim.quarantined(BASE + b * BPB, BASE + (b + 1) * BPB))
    shim.on_restore = lambda vas: r.forget(
        b for va in vas for b in range((va - BASE) // BPB, (va - BASE + PAGE) // BPB)
    )
    for i in range(6):
        s.add_request(v.EngineRequest(f"r{i}", [i] * 3 + list(range(20 + i)), max_tokens=12))
    return s, r, shim, hooks


def _run(
    hooked: bool,
    events: dict[int, object],
    with_epochs: bool = True,
    invalidate_at: int | None = None,
) -> tuple[dict[str, list[int]], v.EngineScheduler]:
    box: list[object] = []

    def drain() -> dict[str, set[int]]:
        # The agent's RECLAIM lands after the step boundary read the shim, and its
        # INVALIDATE_BLOCKS for the page's blocks arrive before the hook drains them.
        s_ = box[0]
        assert isinstance(s_, v.EngineScheduler)
        if s_.steps != invalidate_at:
            return {}
        shim.reclaim([BASE + 5 * PAGE])
        blocks = set(range(5 * PAGE // BPB, 6 * PAGE // BPB))
        return {q.request_id: blocks for q in s_.running}

    s, r, shim, _ = _engine(hooked, with_epochs, drain)
    box.append(s)
    for step in range(200):
        ev = events.get(step)
        if ev == "reclaim":
            shim.reclaim([BASE + PAGE, BASE + 2 * PAGE])
        elif ev == "restore":
            shim.restore([BASE + PAGE])
        elif ev == "flap":  # reclaimed and restored between two steps: invisible in states
            shim.reclaim([BASE + 3 * PAGE])
            shim.restore([BASE + 3 * PAGE])
        out = s.schedule()
        if not out.num_scheduled_tokens:
            break
        s.update_from_output(out, r.execute_model(out, s.requests))
        if hooked:
            q = {va for va, st in shim.pages() if st == 1}
            for req in s.running:  # never a block in a quarantined page after the boundary
                for b in s.kv_cache_manager.get_block_ids(req.request_id)[0]:
                    assert BASE + b * BPB // PAGE * PAGE not in q, (step, req.request_id, b)
    return {k: q.output_token_ids for k, q in s.requests.items()}, s


def test_reclaim_mid_run_recomputes_to_the_reference_output() -> None:
    ref, _ = _run(False, {})
    assert all(len(t) == 12 for t in ref.values())
    broken, _ = _run(False, {4: "reclaim"})
    assert broken != ref  # without the hook the reclaimed pages corrupt the output
    got, s = _run(True, {4: "reclaim"})
    assert got == ref
    assert s.preempted > 0


def test_restore_releases_retired_blocks_and_flaps_are_caught() -> None:
    ref, _ = _run(False, {})
    got, s = _run(True, {3: "reclaim", 6: "restore", 9: "flap"})
    assert got == ref
    pool = s.kv_cache_manager.block_pool  # type: ignore[attr-defined]
    # Page 2 (blocks 8..11) is still quarantined: retired, held by our reference only.
    assert [pool.blocks[b].ref_cnt for b in range(8, 12)] == [1, 1, 1, 1]
    assert pool.get_num_free_blocks() == NBLOCKS - 1 - 4


def test_snapshots_are_published_and_unsupported_configs_stay_off() -> None:
    s, r, _shim, hooks = _engine(True)
    out = s.schedule()
    s.update_from_output(out, r.execute_model(out, s.requests))
    snap = hooks[-1]
    assert isinstance(snap, memory.Snapshot) and set(snap.requests) == set(out.num_scheduled_tokens)
    assert len(snap.table.pages) == NBLOCKS * BPB // PAGE
    s2 = v.EngineScheduler(num_blocks=8)
    assert memory.unsupported(s2) is None
    s2.parallel_config.tensor_parallel_size = 2
    assert "tensor_parallel" in (memory.unsupported(s2) or "")
    s2.parallel_config.tensor_parallel_size = 1
    s2.scheduler_config.async_scheduling = True
    assert "async" in (memory.unsupported(s2) or "")


def test_a_page_reclaimed_and_restored_between_steps_is_caught() -> None:
    ref, _ = _run(False, {})
    assert _run(False, {5: "flap"})[0] != ref  # restored memory is fresh: content gone
    got, s = _run(True, {5: "flap"})
    assert got == ref and s.preempted > 0


def _memory(s: v.EngineScheduler) -> memory.MemoryHook:
    mem = s.__dict__["_gleaner_memory"]
    assert isinstance(mem, memory.MemoryHook)
    return mem


def test_page_epochs_limit_a_flap_to_the_requests_holding_that_page() -> None:
    ref, _ = _run(False, {})
    got, s = _run(True, {5: "flap"})
    blind, s_blind = _run(True, {5: "flap"}, with_epochs=False)  # a shim without epochs
    assert got == ref and blind == ref
    assert _memory(s).resets == 0 and _memory(s_blind).resets == 1
    # Page 3 holds blocks 12..15 only: with epochs only their holders recompute; without,
    # every running request does.
    assert 0 < s.preempted < s_blind.preempted


def test_invalidations_never_truncate_into_a_quarantined_page() -> None:
    ref, _ = _run(False, {})
    for step in (2, 4, 6):
        got, s = _run(True, {}, invalidate_at=step)  # _run asserts no quarantined block is held
        assert got == ref
        assert _memory(s).rechecks == 1 and s.preempted > 0
