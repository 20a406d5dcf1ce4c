"""The vLLM KV hook against a faithful minimal model of the pinned vLLM scheduler.

vLLM itself is not installed here (its CPU wheels pull in torch); ``gleaner.testing.vllm_fake``
reproduces the scheduler surface the hook uses (see its docstring and docs/shim.md).
"""

from __future__ import annotations

from pathlib import Path

from gleaner.protocol import wire as p
from gleaner.testing import vllm_fake as v
from gleaner.testing.shim import AgentStub, wait_until
from gleaner.vllm_hook import plugin
from gleaner.vllm_hook.feed import InvalidationFeed, merge
from gleaner.vllm_hook.hook import apply_invalidations, install, signature_matches


def _sched() -> tuple[v.Scheduler, v.Request]:
    s = v.Scheduler(block_size=16)
    # 64 prompt tokens + 3 generated; the first 32 came from the prefix cache.
    r = s.add(
        v.Request("r1", num_tokens=67, num_computed_tokens=66, num_cached_tokens=32),
        [10, 11, 12, 13, 14],
    )
    s.add(v.Request("r2", num_tokens=40, num_computed_tokens=39), [20, 21, 22])
    return s, r


def test_cached_block_goes_through_vllms_own_path() -> None:
    s, r = _sched()
    assert apply_invalidations(s, {"r1": {11}}) == {"r1"}
    assert r.num_computed_tokens == 16  # truncated to the start of block index 1
    assert s.schedule().num_scheduled_tokens["r1"] == 67 - 16  # recomputes from there


def test_locally_computed_block_is_truncated_too() -> None:
    s, r = _sched()
    apply_invalidations(s, {"r1": {13}})  # beyond the cached prefix: outside vLLM's scan
    assert r.num_computed_tokens == 48
    assert s.requests["r2"].num_computed_tokens == 39
    assert s.schedule().num_scheduled_tokens == {"r1": 19, "r2": 1}


def test_unknown_and_finished_requests_and_empty_input_are_ignored() -> None:
    s, r = _sched()
    assert apply_invalidations(s, {}) == set()
    assert apply_invalidations(s, {"gone": {99}}) == set()
    r.status = v.RequestStatus.FINISHED_STOPPED
    assert apply_invalidations(s, {"r1": {14}}) == set()
    assert r.num_computed_tokens == 66


def test_async_loading_request_is_marked_for_retry() -> None:
    s, _ = _sched()
    w = s.add(
        v.Request(
            "w", num_tokens=50, num_computed_tokens=0, status=v.RequestStatus.WAITING_FOR_REMOTE_KVS
        ),
        [30, 31, 32],
    )
    apply_invalidations(s, {"w": {31}})
    assert w.num_computed_tokens == 16 and "w" in s.failed_recving_kv_req_ids


def test_installed_hook_applies_after_each_step() -> None:
    class Sched(v.Scheduler):
        pass

    pending: list[dict[str, set[int]]] = [{}, {"r1": {12}}]
    assert install(Sched, lambda: pending.pop(0) if pending else {})
    assert install(Sched, dict)  # idempotent
    s = Sched(block_size=16)
    r = s.add(
        v.Request("r1", num_tokens=67, num_computed_tokens=66, num_cached_tokens=32),
        [10, 11, 12, 13, 14],
    )
    s.update_from_output(s.schedule())  # step 1: nothing reported
    assert r.num_computed_tokens == 68 - 1 and r.num_tokens == 68
    s.update_from_output(s.schedule())  # step 2: the agent reclaimed block 12
    assert r.num_computed_tokens == 32
    assert s.schedule().num_scheduled_tokens["r1"] == r.num_tokens - 32


def test_signature_guard_refuses_other_vllm_versions() -> None:
    assert signature_matches(v.Scheduler)
    assert not signature_matches(v.SchedulerTwoArg)
    assert not install(v.SchedulerTwoArg, dict)
    assert not signature_matches(object)


def test_merge_unions_batches() -> None:
    got = merge(
        {},
        [
            p.InvalidateBlocks("a", (1, 2)),
            p.InvalidateBlocks("a", (2, 3)),
            p.InvalidateBlocks("b", (9,)),
        ],
    )
    assert got == {"a": {1, 2, 3}, "b": {9}}


def test_plugin_is_opt_in() -> None:
    assert not plugin.enabled({})
    assert not plugin.enabled({"GLEANER_ROLE": "other"})
    assert plugin.enabled({"GLEANER_ROLE": "online"})  # ONLINE_MEMORY reporting
    assert not plugin.enabled({"GLEANER_ROLE": "offline", "GLEANER_VLLM_HOOK": "0"})
    assert plugin.enabled({"GLEANER_ROLE": "offline"})


def test_feed_receives_invalidations_from_the_agent(agent: AgentStub, sock_path: Path) -> None:
    feed = InvalidationFeed(str(sock_path), job="ns/j", retry_s=0.05)
    try:
        hello = agent.wait_for(p.Hello)
        assert hello.role == p.Role.FRAMEWORK and hello.job == "ns/j"
        agent.send(p.InvalidateBlocks("r1", (12, 13)))
        agent.send(p.InvalidateBlocks("r1", (14,)))
        got: dict[str, set[int]] = {}
        assert wait_until(lambda: merge_into(got, feed.drain()) == {"r1": {12, 13, 14}})
        s, r = _sched()
        apply_invalidations(s, got)
        assert r.num_computed_tokens == 32
    finally:
        feed.close()


def merge_into(acc: dict[str, set[int]], new: dict[str, set[int]]) -> dict[str, set[int]]:
    for k, ids in new.items():
        acc.setdefault(k, set()).update(ids)
    return acc
