"""The memory path end to end, no stubs between: one process with the shim LD_PRELOADed (over
the fake libcuda) runs the fake vLLM engine (``gleaner.testing.vllm_fake``) with the hook —
its KV cache allocated through ``gleaner_kv_malloc``, its page table sent by the hook's
reporter (OFFLINE_PAGE_GROUPS, the default format) — connected to the real ``AgentDaemon``
(nvidia backend, synthetic inventory).

An online client reports memory in use past the MIAD headroom (and turns busy); the agent
picks pages with Algorithm 1 from the hook's page table and reclaims them through the
shim. The hook retires those pages' blocks, the requests that held them recompute, and the
engine's output equals a run without reclamation; /metrics count it. Online's memory then
drops: the headroom's releases RESTORE the pages one by one, and the hook gives their blocks
back to the pool (a second batch of requests runs on them). A second test restarts the
agent while pages are quarantined: the new agent learns them from the hook's first report
and restores them.

The engine only steps when the test says so (``step`` commands), so what happens between
steps (the agent reclaiming or restoring) is an event the hook sees at the next boundary;
every wait polls with a generous deadline (a loaded 2-core machine), nothing asserts timing.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gleaner.protocol import wire as p
from gleaner.protocol.node import ENV_SHIM_LOG
from gleaner.runtime_agent.daemon import AgentDaemon
from gleaner.runtime_agent.policy import MemoryConfig
from gleaner.testing import vllm_fake as v
from gleaner.testing.shim import PreloadedPython, agent_metrics, running_agent, wait_until

NODE = "e2e-node"
GPU = 3
PAGE = 2 << 20
BPB = PAGE // 8  # 8 blocks per page
NPAGES = 16
NBLOCKS = NPAGES * PAGE // BPB
BS = 4  # tokens per block
RECLAIM = 4  # handles: the headroom grows from 4 to 8 at the pressure event

# Runs in the child (shim preloaded). One JSON command per stdin line, one reply per line.
DRIVER = r"""
import ctypes, json, os, sys
from gleaner.vllm_hook import memory, report, shimapi
from gleaner.vllm_hook.feed import InvalidationFeed, gpu_identity
from gleaner.vllm_hook.pages import KvLayout
from gleaner.protocol import wire as p
from gleaner.testing import vllm_fake as v

NBLOCKS, BPB, BS = (int(os.environ[k]) for k in ("E2E_NBLOCKS", "E2E_BPB", "E2E_BS"))
lib = ctypes.CDLL(None)
lib.gleaner_kv_malloc.restype = ctypes.c_void_p
lib.gleaner_kv_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
shim = shimapi.load()
ptr = lib.gleaner_kv_malloc(NBLOCKS * BPB, 0, None)  # the engine's KV cache tensor
assert ptr and shim is not None
page = shim.page_bytes()
layout = KvLayout(ptr, (NBLOCKS, BPB), (BPB, 1), 1, 0)
uuids, indices = gpu_identity()
feed = InvalidationFeed(os.environ["GLEANER_SOCKET"], job=os.environ["GLEANER_JOB"],
                        retry_s=0.1, role=p.Role.FRAMEWORK, gpu_uuids=uuids,
                        gpu_indices=indices)
rep = report.Reporter(report.HandleEncoder(), feed.send_frames, lambda: feed.sessions,
                      report.report_interval_s(), 0.1)
hooks = []

class Sched(v.EngineScheduler):
    pass

def make(s):
    hooks.append(memory.MemoryHook(shim, [layout], publish=rep.offer))
    return hooks[-1]

assert memory.install(Sched, feed.drain, make)
s = Sched(num_blocks=NBLOCKS, block_size=BS, bytes_per_block=BPB)

# The worker's view of memory: a block in a quarantined page reads as garbage and keeps
# nothing written; a page whose reclaim count moved lost what it held (restored pages
# come back fresh).
seen_epochs = {}
def page_of(b):
    return ptr + (b * BPB) // page * page
state = {"q": set()}
def refresh():
    pages, epochs = shim.pages(), shim.epochs()
    state["q"] = {va for va, st in pages if st == 1}
    moved = {va for (va, _), e in zip(pages, epochs) if seen_epochs.get(va, e) != e}
    seen_epochs.update({va: e for (va, _), e in zip(pages, epochs)})
    r.forget(b for b in range(NBLOCKS) if page_of(b) in moved)
r = v.FakeRunner(BS, lost=lambda b: page_of(b) in state["q"])

def status():
    mem = hooks[0] if hooks else None
    return {"ptr": ptr, "page": page, "steps": s.steps, "preempted": s.preempted,
            "running": len(s.running), "waiting": len(s.waiting),
            "free": s.kv_cache_manager.block_pool.get_num_free_blocks(),
            "retired": sorted(mem.retired) if mem else [],
            "rechecks": mem.rechecks if mem else 0, "resets": mem.resets if mem else 0,
            "pages": shim.pages(), "connected": feed.connected.is_set(),
            "outputs": {k: q.output_token_ids for k, q in s.requests.items()}}

for line in sys.stdin:
    a = json.loads(line)
    if a["op"] == "add":
        for rid, prompt, n in a["requests"]:
            s.add_request(v.EngineRequest(rid, prompt, max_tokens=n))
    elif a["op"] == "step":
        for _ in range(a["n"]):
            out = s.schedule()
            if not out.num_scheduled_tokens and not s.waiting:
                break
            refresh()
            s.update_from_output(out, r.execute_model(out, s.requests))
    print(json.dumps(status()), flush=True)
"""


class Engine(PreloadedPython):
    """The child process (shim preloaded) running the fake engine with the hook."""

    def __init__(self, tmp: Path, sock: Path) -> None:
        env = {
            "GLEANER_KV_REPORT_MS": "100",
            # The shim's debug log: what a failed wait below prints (connects, segment
            # mappings, refused enables), so that a rare failure explains itself.
            ENV_SHIM_LOG: "debug",
            "E2E_NBLOCKS": str(NBLOCKS),
            "E2E_BPB": str(BPB),
            "E2E_BS": str(BS),
        }
        super().__init__(
            tmp, DRIVER, socket_path=sock, gpu_index=GPU, visible_devices=None, env=env
        )

    def call(self, timeout: float = 60.0, **cmd: Any) -> dict[str, Any]:
        return self.request(cmd, timeout)

    def run_to_end(self) -> dict[str, Any]:
        st = self.call(op="step", n=1)
        for _ in range(500):
            if not st["running"] and not st["waiting"]:
                return st
            st = self.call(op="step", n=20)
        raise AssertionError(f"the engine did not finish: {st}")


NO_RELEASE = MemoryConfig(
    initial_handles=RECLAIM,
    min_handles=RECLAIM,  # no release before the pressure event
    initial_interval_s=0.3,
    min_interval_s=0.3,
    max_interval_s=0.3,
)


@pytest.fixture
def daemon(sock_path: Path) -> Iterator[AgentDaemon]:
    with running_agent(sock_path, node=NODE, memory=NO_RELEASE) as d:
        yield d


def _batch(tag: str, n: int, prompt: int, out: int) -> list[tuple[str, list[int], int]]:
    return [(f"{tag}{i}", [i + 1] * 3 + list(range(prompt - 3)), out) for i in range(n)]


def _reference(batch: list[tuple[str, list[int], int]]) -> dict[str, list[int]]:
    """The same requests on the fake engine without the shim, the hook or reclamation."""
    s = v.EngineScheduler(num_blocks=NBLOCKS, block_size=BS, bytes_per_block=BPB)
    r = v.FakeRunner(BS)
    for rid, prompt, n in batch:
        s.add_request(v.EngineRequest(rid, list(prompt), max_tokens=n))
    while s.running or s.waiting:
        out = s.schedule()
        s.update_from_output(out, r.execute_model(out, s.requests))
    return {k: q.output_token_ids for k, q in s.requests.items()}


def _blocks_of(ptr: int, pages: set[int]) -> set[int]:
    return {b for b in range(NBLOCKS) if ptr + b * BPB // PAGE * PAGE in pages} - {0}


def test_reclaim_recompute_and_restore_end_to_end(
    tmp_path: Path, sock_path: Path, daemon: AgentDaemon
) -> None:
    server = daemon.server
    assert server is not None
    # 12 requests of 36-token prompts: 9 blocks each, 108 of the 127 usable blocks, so most
    # pages hold live blocks and the agent's cheapest pick must include some of them.
    first = _batch("a", 12, 36, 24)
    ref = _reference(first)
    eng = Engine(tmp_path, sock_path)
    on = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        eng.call(op="add", requests=first)
        st = eng.call(op="step", n=3)
        ptr, labels = st["ptr"], (("gpu", str(GPU)), ("node", NODE))
        assert st["page"] == PAGE and len(st["pages"]) == NPAGES and st["running"] == 12
        # The hook's OFFLINE_HANDLES reached the agent: every page, with the requests' spans.
        assert wait_until(lambda: len(server.offline_handle_map(GPU)) == NPAGES, timeout=60), (
            eng.stderr()
        )
        assert wait_until(
            lambda: sum(len(x) for x in server.offline_handle_map(GPU).values()) >= 12, timeout=60
        )
        assert wait_until(lambda: daemon.health()["gates"][str(GPU)] is True, timeout=60)

        on.settimeout(30)
        on.connect(str(sock_path))
        p.send_message(on, p.Hello(pid=7, role=p.Role.ONLINE, gpu_indices=(GPU,)))
        p.send_message(on, p.OnlineBusy(gpu=0, mono_ns=1))
        p.send_message(on, p.OnlineMemory(gpu=0, kv_used_bytes=RECLAIM * PAGE))
        assert wait_until(lambda: server.reclaims_done == 1, timeout=60), eng.stderr()
        p.send_message(on, p.OnlineIdle(gpu=0, mono_ns=2))

        st = eng.call(op="step", n=1)  # the step boundary sees the quarantined pages
        reclaimed = {va for va, state in st["pages"] if state == 1}
        assert len(reclaimed) == RECLAIM
        assert set(st["retired"]) == _blocks_of(ptr, reclaimed)  # retired, all of them
        end = eng.run_to_end()
        assert end["preempted"] > 0  # requests that held reclaimed blocks recomputed
        assert {k: o for k, o in end["outputs"].items() if k in ref} == ref
        assert end["free"] == NBLOCKS - 1 - len(end["retired"])  # retired stay out of the pool
        m = agent_metrics(daemon)
        assert m[("gleaner_memory_reclaim_events_total", labels)] == 1
        assert m[("gleaner_memory_reclaimed_bytes_total", labels)] == RECLAIM * PAGE
        assert server.reclaims_failed == 0

        # Online gives its memory back: each headroom release restores one page.
        p.send_message(on, p.OnlineMemory(gpu=0, kv_used_bytes=0))

        def restored() -> bool:
            return all(state == 0 for _, state in eng.call(op="step", n=0)["pages"])

        assert wait_until(restored, timeout=60), eng.stderr()
        assert wait_until(lambda: server.restores_done == RECLAIM, timeout=60)
        second = _batch("b", 12, 36, 8)
        eng.call(op="add", requests=second)
        end2 = eng.run_to_end()
        assert end2["retired"] == [] and end2["free"] == NBLOCKS - 1  # all blocks are back
        ref2 = _reference(second)
        assert {k: o for k, o in end2["outputs"].items() if k in ref2} == ref2
        m = agent_metrics(daemon)
        assert m[("gleaner_memory_restore_events_total", labels)] == RECLAIM
        assert m[("gleaner_memory_restored_bytes_total", labels)] == RECLAIM * PAGE
    finally:
        on.close()
        eng.close()


def test_a_restarted_agent_restores_the_pages_the_old_one_reclaimed(
    tmp_path: Path, sock_path: Path
) -> None:
    """The agent restarts while pages are quarantined: the shim and the hook reconnect, the
    hook's first report (OFFLINE_PAGE_GROUPS) names the quarantined pages, and the new agent
    gives them back at its releases — to the same process, which then uses their blocks."""
    first = _batch("a", 12, 36, 24)
    eng = Engine(tmp_path, sock_path)
    on = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with running_agent(sock_path, node=NODE, memory=NO_RELEASE) as old:
            before = old.server
            assert before is not None
            eng.call(op="add", requests=first)
            eng.call(op="step", n=3)
            assert wait_until(lambda: len(before.offline_handle_map(GPU)) == NPAGES, timeout=60)
            assert wait_until(lambda: old.health()["gates"][str(GPU)] is True, timeout=60)
            on.settimeout(30)
            on.connect(str(sock_path))
            p.send_message(on, p.Hello(pid=7, role=p.Role.ONLINE, gpu_indices=(GPU,)))
            p.send_message(on, p.OnlineMemory(gpu=0, kv_used_bytes=RECLAIM * PAGE))
            assert wait_until(lambda: before.reclaims_done == 1, timeout=60), eng.stderr()
            on.close()
        end = eng.run_to_end()
        reclaimed = {va for va, state in end["pages"] if state == 1}
        assert len(reclaimed) == RECLAIM and end["retired"]

        # A new agent that releases headroom from the start (online reports no use).
        releasing = MemoryConfig(
            initial_handles=2 * RECLAIM,
            min_handles=RECLAIM,
            initial_interval_s=0.3,
            min_interval_s=0.3,
            max_interval_s=0.3,
        )
        with running_agent(sock_path, node=NODE, memory=releasing) as new:
            server = new.server
            assert server is not None

            def restored() -> bool:
                return all(state == 0 for _, state in eng.call(op="step", n=0)["pages"])

            assert wait_until(restored, timeout=60), f"{eng.stderr()}\nagent: {new.health()}"
            assert wait_until(lambda: server.restores_done == RECLAIM, timeout=60)
            assert server.restores_failed == 0 and new.agent.quarantine[GPU] == []
            labels = (("gpu", str(GPU)), ("node", NODE))
            m = agent_metrics(new)
            assert m[("gleaner_memory_restore_events_total", labels)] == RECLAIM
            assert m[("gleaner_memory_restored_bytes_total", labels)] == RECLAIM * PAGE
            second = _batch("b", 12, 36, 8)
            eng.call(op="add", requests=second)
            end2 = eng.run_to_end()
            assert end2["retired"] == [] and end2["free"] == NBLOCKS - 1
            ref2 = _reference(second)
            assert {k: o for k, o in end2["outputs"].items() if k in ref2} == ref2
    finally:
        on.close()
        eng.close()
