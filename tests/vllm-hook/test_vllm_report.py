"""The hook's reporting path through real sockets and the real shim (fake libcuda)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gleaner.protocol import wire as p
from gleaner.testing.shim import AgentStub, build_shim
from gleaner.vllm_hook import memory, report
from gleaner.vllm_hook.feed import InvalidationFeed, gpu_identity
from gleaner.vllm_hook.pages import PageTable, RequestBlocks

UUID = "GPU-11111111-2222-3333-4444-555555555555"


def _snap(tokens: int) -> memory.Snapshot:
    table = PageTable(
        4096,
        (0x1000, 0x2000),
        {0x1000: frozenset({1, 2})},
        {1: frozenset({0x1000}), 2: frozenset({0x1000})},
    )
    return memory.Snapshot(table, {"r": RequestBlocks((1, 2), tokens)}, frozenset(), 16)


def test_handles_reach_the_agent_rate_limited_and_only_when_changed(
    agent: AgentStub, sock_path: Path
) -> None:
    uuids, indices = gpu_identity(
        {"NVIDIA_VISIBLE_DEVICES": f"{UUID},GPU-x", "GLEANER_GPU_INDICES": "3"}
    )
    feed = InvalidationFeed(str(sock_path), job="ns/j", retry_s=0.05, gpu_uuids=uuids,
                            gpu_indices=indices)  # fmt: skip
    rep = report.Reporter(
        report.HandleEncoder(fmt="handles"), feed.send_frames, lambda: feed.sessions, 0.3, 0.05
    )
    try:
        hello = agent.wait_for(p.Hello)
        assert hello.pid == os.getpid() and hello.role == p.Role.FRAMEWORK
        assert hello.gpu_uuids == (UUID,) and hello.gpu_indices == (3,)
        rep.offer(_snap(20))
        first = agent.wait_for(p.OfflineHandles)
        assert first.reset and first.gpu == 0
        assert [(e.handle, e.request_id, e.block_ids, e.tokens) for e in first.entries] == [
            (0x1000, "r", (1, 2), 20),
            (0x2000, "", (), 0),
        ]
        for _ in range(5):
            rep.offer(_snap(20))  # unchanged: nothing more is sent
        rep.offer(_snap(21))
        second = agent.wait_for(p.OfflineHandles, lambda m: m.entries[0].tokens == 21)
        assert second.reset
        assert len(agent.all_of(p.OfflineHandles)) == 2  # the unchanged offers sent nothing
    finally:
        rep.close()
        feed.close()


def test_page_groups_reach_the_agent_with_the_quarantined_pages(
    agent: AgentStub, sock_path: Path
) -> None:
    feed = InvalidationFeed(str(sock_path), job="ns/j", retry_s=0.05, gpu_indices=(0,))
    enc = report.HandleEncoder(fmt="groups")
    rep = report.Reporter(enc, feed.send_frames, lambda: feed.sessions, 0.05, 0.05)
    try:
        assert agent.wait_for(p.Hello).role == p.Role.FRAMEWORK
        rep.offer(_snap(20))
        first = agent.wait_for(p.OfflinePageGroups)
        assert first.reset and first.gpu == 0
        assert first.groups == (
            p.PageGroup(4096, (0x1000,), (p.GroupSpan("r", 20, (1, 2)),)),
            p.PageGroup(4096, (0x2000,)),
        )
        snap = _snap(20)
        rep.offer(memory.Snapshot(snap.table, {}, frozenset({0x1000}), 16))
        second = agent.wait_for(p.OfflinePageGroups, lambda m: len(m.groups) == 2 and
                                m.groups[1].quarantined)  # fmt: skip
        assert second.reset and second.groups == (
            p.PageGroup(4096, (0x2000,)),
            p.PageGroup(4096, (0x1000,), (), quarantined=True),
        )
        assert not agent.all_of(p.OfflineHandles)
    finally:
        rep.close()
        feed.close()


def test_report_format_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLEANER_KV_REPORT_FORMAT", "groups")
    assert report.HandleEncoder().format == "groups"
    monkeypatch.delenv("GLEANER_KV_REPORT_FORMAT")
    assert report.HandleEncoder().format == "groups"  # the default
    assert report.report_format({}) == "groups"
    assert report.report_format({"GLEANER_KV_REPORT_FORMAT": " Groups "}) == "groups"
    assert report.report_format({"GLEANER_KV_REPORT_FORMAT": "bogus"}) == "groups"
    assert report.report_format({"GLEANER_KV_REPORT_FORMAT": "handles"}) == "handles"
    with pytest.raises(ValueError, match="format"):
        report.HandleEncoder(fmt="bogus")


def test_online_policy_reports_on_a_page_of_change_or_each_second() -> None:
    pol = report.OnlineMemoryPolicy()
    assert pol.due(0.0, 0)
    assert not pol.due(0.1, report.PAGE_BYTES - 1)
    assert pol.due(0.2, report.PAGE_BYTES)
    assert not pol.due(0.5, report.PAGE_BYTES)
    assert pol.due(1.3, report.PAGE_BYTES)
    assert report.report_interval_s({"GLEANER_KV_REPORT_MS": "50"}) == 0.05
    assert report.report_interval_s({}) == 1.0  # default: 1 Hz


def test_online_memory_from_a_scheduler_reaches_the_agent(
    agent: AgentStub, sock_path: Path
) -> None:
    from gleaner.testing import vllm_fake as v
    from gleaner.vllm_hook import plugin

    class Sched(v.EngineScheduler):
        pass

    feed = InvalidationFeed(str(sock_path), retry_s=0.05, role=p.Role.ONLINE, gpu_indices=(0,))
    rep: report.Reporter[p.Message] = report.Reporter(
        report.encoded, feed.send_frames, lambda: feed.sessions, 0.0, 0.05
    )
    try:
        assert agent.wait_for(p.Hello).role == p.Role.ONLINE
        assert plugin.install_online(Sched, rep)
        s = Sched(num_blocks=1025, block_size=16, bytes_per_block=4096)
        r = v.FakeRunner(16)
        s.add_request(v.EngineRequest("a", list(range(700 * 16)), max_tokens=2))
        out = s.schedule()
        s.update_from_output(out, r.execute_model(out, s.requests))
        msg = agent.wait_for(p.OnlineMemory)
        assert msg.kv_reserved_bytes == 1025 * 4096
        assert msg.kv_used_bytes == 700 * 4096  # the prompt's 700 blocks (null block excluded)
    finally:
        rep.close()
        feed.close()


DRIVER = """
import ctypes, json, sys
from gleaner.vllm_hook import shimapi
kv = shimapi.load()
lib = ctypes.CDLL(None)
lib.gleaner_kv_malloc.restype = ctypes.c_void_p
lib.gleaner_kv_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
g0 = kv.generation()
ptr = lib.gleaner_kv_malloc(3 * kv.page_bytes() + 1, 0, None)
print(json.dumps({"path": kv.path, "g0": g0, "g1": kv.generation(), "ptr": ptr,
                  "page": kv.page_bytes(), "pages": kv.pages()}))
"""


def test_ctypes_binding_reads_the_real_shims_pages(shim_build: Path, tmp_path: Path) -> None:
    build = build_shim()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join(sys.path),
        "LD_PRELOAD": str(build / "libgleaner_shim.so"),
        "GLEANER_LIBCUDA": str(build / "libfake_cuda.so"),
        "GLEANER_ROLE": "online",  # no gate: the allocation does not wait on an agent
        "GLEANER_SOCKET": str(tmp_path / "none.sock"),
        "GLEANER_NVIDIACTL_PATH": str(tmp_path / "nvidiactl"),
    }
    res = subprocess.run(
        [sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    page = out["page"]
    assert out["path"] == "<preloaded>" and page > 0 and out["ptr"]
    assert out["g1"] > out["g0"]
    assert out["pages"] == [[out["ptr"] + i * page, 0] for i in range(4)]
