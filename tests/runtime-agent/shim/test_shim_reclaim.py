"""RECLAIM and RESTORE in the offline shim, against the fake libcuda's VMM tables (no GPU).

rm_client maps 2 MiB pages through the shim's wrapped cuMemCreate/cuMemMap/cuMemSetAccess
(found via cuGetProcAddress, as the CUDA runtime finds them); the agent stub sends RECLAIM
for some of their virtual addresses; the fake's tables show which pages are now backed by
the shared quarantine allocation and which allocations are gone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gleaner.protocol import wire as p
from gleaner.testing.shim import AgentStub, ShimProcess

PAGE = 2 << 20
BASE = 0x7F0000000000


def _va(i: int) -> int:
    return BASE + i * PAGE


def _state(sp: ShimProcess) -> tuple[dict[int, int], int]:
    r = sp.cmd("vmm-state")
    maps: dict[int, int] = {}
    if r["maps"] != "-":
        for pair in r["maps"].split(","):
            va, handle = pair.split(":")
            maps[int(va, 16)] = int(handle, 16)
    return maps, int(r["live"])


def _gate_off(agent: AgentStub, seq: int = 1) -> None:
    agent.send(p.Gate(gate_seq=seq, enable=False))
    ack = agent.wait_for(p.GateAck, lambda m: m.gate_seq == seq)
    assert not ack.enabled


def _reclaim(agent: AgentStub, seq: int, pages: tuple[int, ...]) -> p.ReclaimAck:
    agent.send(p.Reclaim(reclaim_seq=seq, gpu=0, handles=pages))
    return agent.wait_for(p.ReclaimAck, lambda m: m.reclaim_seq == seq)


@pytest.mark.parametrize("cmd", ["vmm-map", "vmm-map-rel"])
def test_reclaim_remaps_the_quarantine_page_and_releases(
    tmp_path: Path, agent: AgentStub, sock_path: Path, cmd: str
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        sp.cmd("open")
        agent.wait_for(p.Hello)
        assert sp.cmd(f"{cmd} 4")["rc"] == "0"
        before, live = _state(sp)
        assert sorted(before) == [_va(i) for i in range(4)] and live == 4
        _gate_off(agent)
        agent.send(p.Reclaim(reclaim_seq=9, gpu=0, handles=(_va(1), _va(3))))
        ack = agent.wait_for(p.ReclaimAck, lambda m: m.reclaim_seq == 9)
        assert ack.ok and ack.released == 2 and ack.err == 0
        after, live = _state(sp)
        # Same addresses still mapped; 1 and 3 now share one new (quarantine) allocation.
        assert sorted(after) == sorted(before)
        assert after[_va(0)] == before[_va(0)] and after[_va(2)] == before[_va(2)]
        quarantine = after[_va(1)]
        assert after[_va(3)] == quarantine and quarantine not in before.values()
        assert live == 3  # pages 0 and 2, and the quarantine page: 1 and 3 are gone


def test_reclaim_fails_closed_when_an_unmap_fails(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    env = {"GLEANER_FAKE_UNMAP_FAIL": hex(_va(2))}
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path, extra_env=env) as sp:
        sp.cmd("open")
        agent.wait_for(p.Hello)
        sp.cmd("vmm-map 3")
        _gate_off(agent)
        agent.send(p.Reclaim(reclaim_seq=4, gpu=0, handles=(_va(1), _va(2))))
        ack = agent.wait_for(p.ReclaimAck, lambda m: m.reclaim_seq == 4)
        assert not ack.ok and ack.released == 1 and ack.err == 1  # CUDA_ERROR_INVALID_VALUE
        maps, _ = _state(sp)
        assert _va(2) in maps  # the page whose unmap failed is untouched
        # Work stays held for good: a later enable is refused.
        mark = agent.mark()
        agent.send(p.Gate(gate_seq=2, enable=True))
        g = agent.wait_for(p.GateAck, lambda m: m.gate_seq == 2, after=mark)
        assert not g.ok and not g.enabled
        st = agent.wait_for(p.Status, lambda m: m.code == p.StatusCode.CONTROL_REFUSED, after=mark)
        assert "reclamation failed" in st.reason


def test_reclaim_is_refused_while_the_gate_is_open(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        sp.cmd("open")
        agent.wait_for(p.Hello)
        sp.cmd("vmm-map 2")
        before, _ = _state(sp)
        agent.send(p.Reclaim(reclaim_seq=1, gpu=0, handles=(_va(0),)))
        ack = agent.wait_for(p.ReclaimAck, lambda m: m.reclaim_seq == 1)
        assert not ack.ok and ack.released == 0 and ack.err == 16  # EBUSY
        assert _state(sp)[0] == before


def test_reclaim_of_an_unknown_page_is_refused(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        sp.cmd("open")
        agent.wait_for(p.Hello)
        sp.cmd("vmm-map 1")
        _gate_off(agent)
        agent.send(p.Reclaim(reclaim_seq=3, gpu=0, handles=(_va(7),)))
        ack = agent.wait_for(p.ReclaimAck, lambda m: m.reclaim_seq == 3)
        assert not ack.ok and ack.released == 0 and ack.err == 2  # ENOENT


@pytest.mark.parametrize("cmd", ["vmm-map", "vmm-map-rel"])
def test_restore_backs_a_reclaimed_page_with_a_fresh_allocation(
    tmp_path: Path, agent: AgentStub, sock_path: Path, cmd: str
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        sp.cmd("open")
        agent.wait_for(p.Hello)
        sp.cmd(f"{cmd} 3")
        before, _ = _state(sp)
        _gate_off(agent)
        assert _reclaim(agent, 5, (_va(1),)).ok
        reclaimed, live = _state(sp)
        quarantine = reclaimed[_va(1)]
        assert live == 3  # pages 0 and 2, and the quarantine page
        agent.send(p.Restore(restore_seq=6, gpu=0, handles=(_va(1),)))
        ack = agent.wait_for(p.RestoreAck, lambda m: m.restore_seq == 6)
        assert ack.ok and ack.restored == 1 and ack.err == 0
        after, live = _state(sp)
        assert after[_va(1)] not in (quarantine, before[_va(1)])
        assert after[_va(0)] == before[_va(0)] and after[_va(2)] == before[_va(2)]
        assert live == 4  # the quarantine page stays for later reclaims
        # Restored pages can be reclaimed again, into the same quarantine page.
        assert _reclaim(agent, 7, (_va(1),)).ok
        assert _state(sp)[0][_va(1)] == quarantine


def test_restore_of_a_page_never_reclaimed_is_refused(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        sp.cmd("open")
        agent.wait_for(p.Hello)
        sp.cmd("vmm-map 1")
        before, _ = _state(sp)
        agent.send(p.Restore(restore_seq=2, gpu=0, handles=(_va(0),)))
        ack = agent.wait_for(p.RestoreAck, lambda m: m.restore_seq == 2)
        assert not ack.ok and ack.restored == 0 and ack.err == 2  # ENOENT
        assert _state(sp)[0] == before
