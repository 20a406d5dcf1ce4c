"""The shim's KV-cache allocator and page API (exported C functions), against the fake
libcuda's VMM tables (no GPU).

A Python child process preloads the shim and reaches ``gleaner_kv_*`` through
``ctypes.CDLL(None)``, as the framework hook does (fixture ``kv_process``, conftest.py).
RECLAIM and RESTORE come from an agent stub over a real Unix socket, encoded by
:mod:`gleaner.protocol.wire`. The fake libcuda's counters (allocations alive, mappings,
reserved ranges, bytes in use) show what the shim left behind.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gleaner.protocol import wire as p
from gleaner.testing.shim import AgentStub, PreloadedPython

MiB = 1 << 20
PAGE = 2 * MiB
CUDA_ERROR_INVALID_VALUE = 1
BACKED, QUARANTINED = 0, 1

KvFactory = Callable[..., Any]  # conftest.KvProcess (not importable under importlib mode)


def _gate(agent: AgentStub, seq: int, enable: bool) -> p.GateAck:
    mark = agent.mark()
    agent.send(p.Gate(gate_seq=seq, enable=enable))
    return agent.wait_for(p.GateAck, lambda m: m.gate_seq == seq, after=mark)


def _reclaim(agent: AgentStub, seq: int, pages: tuple[int, ...]) -> p.ReclaimAck:
    agent.send(p.Reclaim(reclaim_seq=seq, gpu=0, handles=pages))
    return agent.wait_for(p.ReclaimAck, lambda m: m.reclaim_seq == seq)


def _restore(agent: AgentStub, seq: int, pages: tuple[int, ...]) -> p.RestoreAck:
    agent.send(p.Restore(restore_seq=seq, gpu=0, handles=pages))
    return agent.wait_for(p.RestoreAck, lambda m: m.restore_seq == seq)


# --- allocation, pages, free (no agent needed) ---------------------------------------


def test_allocation_is_whole_pages_each_mapped_with_access(kv_process: KvFactory) -> None:
    kp = kv_process(role="none")
    assert kp.call("page_bytes")["page_bytes"] == PAGE
    g0 = kp.generation()
    ptr = kp.malloc(5 * MiB)
    assert ptr and ptr % PAGE == 0
    assert kp.pages() == [(ptr + i * PAGE, BACKED) for i in range(3)]
    handles = set()
    for i in range(3):
        h, access = kp.mapping(ptr + i * PAGE)
        assert h and access
        handles.add(h)
    assert len(handles) == 3  # one allocation per page
    assert kp.counts() == {"allocs": 3, "maps": 3, "reserved": 1, "used": 3 * PAGE}
    assert kp.generation() == g0 + 1


@pytest.mark.parametrize(
    ("env_page", "granularity", "page"),
    [(3 * MiB, 2 * MiB, 4 * MiB), (3 * MiB, 1 * MiB, 3 * MiB), (1 * MiB, 2 * MiB, 2 * MiB)],
)
def test_page_size_is_rounded_up_to_the_granularity(
    kv_process: KvFactory, env_page: int, granularity: int, page: int
) -> None:
    env = {"GLEANER_KV_PAGE_BYTES": str(env_page), "GLEANER_FAKE_GRANULARITY": str(granularity)}
    kp = kv_process(role="none", extra_env=env)
    assert kp.call("page_bytes")["page_bytes"] == env_page  # before the first allocation
    ptr = kp.malloc(2 * page + 1)
    assert kp.call("page_bytes")["page_bytes"] == page
    assert kp.pages() == [(ptr + i * page, BACKED) for i in range(3)]
    assert kp.counts()["used"] == 3 * page


def test_out_of_memory_returns_null_and_leaves_nothing(kv_process: KvFactory) -> None:
    kp = kv_process(role="none", extra_env={"GLEANER_FAKE_DEVICE_BYTES": str(5 * MiB)})
    g0 = kp.generation()
    assert kp.malloc(8 * MiB) == 0  # the third page does not fit
    assert kp.counts() == {"allocs": 0, "maps": 0, "reserved": 0, "used": 0}
    assert kp.pages() == [] and kp.generation() == g0
    assert "failed after 2 of 4 pages" in kp.stderr()
    ptr = kp.malloc(4 * MiB)  # what was taken was given back
    assert ptr and len(kp.pages()) == 2


@pytest.mark.parametrize("size", [0, -1])
def test_nonpositive_sizes_allocate_nothing(kv_process: KvFactory, size: int) -> None:
    kp = kv_process(role="none")
    assert kp.malloc(size) == 0
    assert kp.counts()["reserved"] == 0


def test_free_unmaps_and_releases_every_page(kv_process: KvFactory) -> None:
    kp = kv_process(role="none")
    a = kp.malloc(3 * PAGE)
    b = kp.malloc(PAGE)
    assert len(kp.pages()) == 4
    g = kp.generation()
    kp.free(a)
    assert kp.pages() == [(b, BACKED)]
    assert kp.counts() == {"allocs": 1, "maps": 1, "reserved": 1, "used": PAGE}
    assert kp.generation() == g + 1
    kp.free(b)
    assert kp.counts() == {"allocs": 0, "maps": 0, "reserved": 0, "used": 0}
    assert kp.pages() == [] and kp.generation() == g + 2
    kp.free(b)  # twice: ignored, logged
    kp.free(b + PAGE)
    assert kp.generation() == g + 2
    assert "not a KV allocation" in kp.stderr()


def test_pages_are_listed_in_address_order_and_capped(kv_process: KvFactory) -> None:
    kp = kv_process(role="none")
    ptrs = [kp.malloc(PAGE * n) for n in (2, 1, 3)]
    listed = kp.pages()
    assert [va for va, _ in listed] == sorted(
        ptr + i * PAGE for ptr, n in zip(ptrs, (2, 1, 3), strict=True) for i in range(n)
    )
    capped = kp.call("pages", cap=2)
    assert capped["total"] == 6 and capped["va"] == [va for va, _ in listed[:2]]


def test_a_second_device_gets_its_own_pages(kv_process: KvFactory) -> None:
    kp = kv_process(role="none")
    assert kp.malloc(PAGE, device=1)
    assert kp.malloc(PAGE, device=7) == 0  # the fake knows devices 0 and 1
    assert len(kp.pages()) == 1


# --- RECLAIM and RESTORE over the agent socket -------------------------------------------


def _offline(kv_process: KvFactory, agent: AgentStub, npages: int, **env: str) -> tuple[Any, int]:
    kp = kv_process(role="offline", extra_env=env)
    ptr = kp.malloc(npages * PAGE)  # starts the control thread
    assert ptr
    agent.wait_for(p.Hello)
    return kp, ptr


def test_reclaim_quarantines_kv_pages_and_restore_backs_them_again(
    kv_process: KvFactory, agent: AgentStub
) -> None:
    kp, ptr = _offline(kv_process, agent, 4)
    va = [ptr + i * PAGE for i in range(4)]
    before = {v: kp.mapping(v)[0] for v in va}
    g0 = kp.generation()
    assert not _gate(agent, 1, enable=False).enabled
    ack = _reclaim(agent, 7, (va[1], va[3]))
    assert ack.ok and ack.released == 2 and ack.err == 0
    assert kp.pages() == list(zip(va, [BACKED, QUARANTINED, BACKED, QUARANTINED], strict=True))
    g1 = kp.generation()
    assert g1 > g0
    quarantine = kp.mapping(va[1])[0]
    assert kp.mapping(va[3])[0] == quarantine and quarantine not in before.values()
    assert kp.counts()["used"] == 3 * PAGE  # pages 0 and 2, and the shared quarantine page

    ack2 = _restore(agent, 8, (va[1],))  # gate closed
    assert ack2.ok and ack2.restored == 1 and ack2.err == 0
    assert kp.pages()[1] == (va[1], BACKED) and kp.pages()[3] == (va[3], QUARANTINED)
    h, access = kp.mapping(va[1])
    assert h not in (0, quarantine, before[va[1]]) and access
    assert kp.generation() > g1
    assert kp.counts()["used"] == 4 * PAGE

    assert _gate(agent, 2, enable=True).enabled
    ack3 = _restore(agent, 9, (va[3],))  # gate open: allowed
    assert ack3.ok and ack3.restored == 1
    assert all(state == BACKED for _, state in kp.pages())

    kp.free(ptr)  # frees restored pages too; only the quarantine page stays
    assert kp.counts() == {"allocs": 1, "maps": 0, "reserved": 0, "used": PAGE}


def test_restore_of_a_page_that_is_not_quarantined_is_enoent(
    kv_process: KvFactory, agent: AgentStub
) -> None:
    kp, ptr = _offline(kv_process, agent, 2)
    g = kp.generation()
    for seq, page in ((1, ptr), (2, ptr + 64 * PAGE)):  # backed; unknown
        ack = _restore(agent, seq, (page,))
        assert not ack.ok and ack.restored == 0 and ack.err == errno.ENOENT
    assert kp.pages() == [(ptr, BACKED), (ptr + PAGE, BACKED)] and kp.generation() == g
    assert _gate(agent, 1, enable=True).ok  # not fail closed


def test_restore_out_of_memory_leaves_the_page_quarantined(
    kv_process: KvFactory, agent: AgentStub
) -> None:
    kp, ptr = _offline(kv_process, agent, 3)
    _gate(agent, 1, enable=False)
    assert _reclaim(agent, 1, (ptr + PAGE,)).ok
    quarantine = kp.mapping(ptr + PAGE)[0]
    g = kp.generation()
    kp.call("device_bytes", bytes=kp.counts()["used"])  # the device is full
    ack = _restore(agent, 2, (ptr + PAGE,))
    # CUDA_ERROR_OUT_OF_MEMORY (2) would read as ENOENT (2, "forget the page"): ENOMEM.
    assert not ack.ok and ack.restored == 0 and ack.err == errno.ENOMEM
    assert kp.pages()[1] == (ptr + PAGE, QUARANTINED) and kp.generation() == g
    assert kp.mapping(ptr + PAGE) == (quarantine, True)
    assert _gate(agent, 2, enable=True).ok  # not fail closed
    kp.call("device_bytes", bytes=0)  # memory came back: a later RESTORE succeeds
    assert _restore(agent, 3, (ptr + PAGE,)).ok
    assert kp.pages()[1] == (ptr + PAGE, BACKED)


def test_restore_that_cannot_map_puts_the_quarantine_back(
    kv_process: KvFactory, agent: AgentStub
) -> None:
    kp, ptr = _offline(kv_process, agent, 2)
    _gate(agent, 1, enable=False)
    assert _reclaim(agent, 1, (ptr,)).ok
    quarantine = kp.mapping(ptr)[0]
    used = kp.counts()["used"]
    kp.call("fail_map", va=ptr, n=1)  # the fresh allocation's map fails
    ack = _restore(agent, 2, (ptr,))
    assert not ack.ok and ack.err == CUDA_ERROR_INVALID_VALUE
    assert kp.mapping(ptr) == (quarantine, True) and kp.pages()[0] == (ptr, QUARANTINED)
    assert kp.counts()["used"] == used  # the fresh allocation was released
    assert _gate(agent, 2, enable=True).ok


def test_restore_fails_closed_when_the_quarantine_cannot_be_put_back(
    kv_process: KvFactory, agent: AgentStub
) -> None:
    kp, ptr = _offline(kv_process, agent, 2)
    _gate(agent, 1, enable=False)
    assert _reclaim(agent, 1, (ptr,)).ok
    kp.call("fail_map", va=ptr, n=2)  # the fresh map and the quarantine's re-map fail
    ack = _restore(agent, 2, (ptr,))
    assert not ack.ok and ack.restored == 0
    assert kp.mapping(ptr)[0] == 0 and kp.pages()[0] == (ptr, QUARANTINED)
    mark = agent.mark()
    g = _gate(agent, 2, enable=True)
    assert not g.ok and not g.enabled  # work stays held for good
    st = agent.wait_for(p.Status, lambda m: m.code == p.StatusCode.CONTROL_REFUSED, after=mark)
    assert "failed" in st.reason
    assert _restore(agent, 3, (ptr,)).err == errno.ENOENT  # the broken page is not retried


def test_reclaim_with_the_gate_open_is_refused_for_kv_pages(
    kv_process: KvFactory, agent: AgentStub
) -> None:
    kp, ptr = _offline(kv_process, agent, 2)
    g = kp.generation()
    ack = _reclaim(agent, 1, (ptr,))
    assert not ack.ok and ack.released == 0 and ack.err == errno.EBUSY
    assert kp.pages()[0] == (ptr, BACKED) and kp.generation() == g


# --- page epochs (gleaner_kv_page_epochs), read in the process through ctypes --------

EPOCH_DRIVER = r"""
import ctypes as C, json, sys
from gleaner.vllm_hook import shimapi
shim = C.CDLL(None)
shim.gleaner_kv_malloc.restype = C.c_void_p
shim.gleaner_kv_malloc.argtypes = [C.c_ssize_t, C.c_int, C.c_void_p]
shim.gleaner_kv_page_epochs.restype = C.c_size_t
shim.gleaner_kv_page_epochs.argtypes = [C.c_void_p, C.c_size_t]
kv = shimapi.load()
for line in sys.stdin:
    a = json.loads(line)
    if a["op"] == "malloc":
        out = {"ptr": shim.gleaner_kv_malloc(a["size"], 0, None) or 0}
    else:  # the C function with a capped buffer, and the hook's binding
        buf = (C.c_uint32 * 8)(*([0xFFFFFFFF] * 8))
        total = shim.gleaner_kv_page_epochs(buf, a.get("cap", 8))
        out = {"total": total, "buf": list(buf), "binding": kv.epochs(), "pages": kv.pages(),
               "gen": kv.generation()}
    print(json.dumps(out), flush=True)
"""


class EpochProcess(PreloadedPython):
    """A Python process with the shim preloaded (fake libcuda), reading page epochs."""

    def __init__(self, tmp: Path, sock: Path) -> None:
        super().__init__(tmp, EPOCH_DRIVER, socket_path=sock, job=None)

    def call(self, **args: int | str) -> dict[str, Any]:
        return self.request(args)


def test_page_epochs_count_reclaims_so_a_reclaim_restore_pair_shows(
    tmp_path: Path, sock_path: Path, agent: AgentStub
) -> None:
    ep = EpochProcess(tmp_path, sock_path)
    try:
        ptr = int(ep.call(op="malloc", size=3 * PAGE)["ptr"])
        assert ptr
        agent.wait_for(p.Hello)
        first = ep.call(op="epochs")
        assert first["total"] == 3 and first["buf"][:3] == [0, 0, 0]
        assert first["buf"][3:] == [0xFFFFFFFF] * 5  # only `total` entries written
        assert first["binding"] == [0, 0, 0]
        _gate(agent, 1, enable=False)
        # Page 1 reclaimed and restored, page 2 reclaimed twice around a restore.
        assert _reclaim(agent, 1, (ptr + PAGE, ptr + 2 * PAGE)).ok
        assert _restore(agent, 2, (ptr + PAGE, ptr + 2 * PAGE)).ok
        assert _reclaim(agent, 3, (ptr + 2 * PAGE,)).ok
        assert _restore(agent, 4, (ptr + PAGE,)).err == errno.ENOENT  # not quarantined: no bump
        got = ep.call(op="epochs")
        assert got["buf"][:3] == [0, 1, 2] and got["binding"] == [0, 1, 2]
        # Page 1's state is as before: only its epoch tells its content is gone.
        assert got["pages"] == [[ptr, BACKED], [ptr + PAGE, BACKED], [ptr + 2 * PAGE, QUARANTINED]]
        assert got["gen"] > first["gen"]
        capped = ep.call(op="epochs", cap=1)
        assert capped["total"] == 3 and capped["buf"][:2] == [0, 0xFFFFFFFF]
        ptr2 = int(ep.call(op="malloc", size=PAGE)["ptr"])  # a new allocation starts at 0
        order = sorted([(ptr, 0), (ptr + PAGE, 1), (ptr + 2 * PAGE, 2), (ptr2, 0)])
        assert ep.call(op="epochs")["binding"] == [e for _, e in order]
    finally:
        ep.close()
