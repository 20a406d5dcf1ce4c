"""The shim in an offline process, through a fake control device (no GPU).

LD_PRELOAD="libgleaner_shim.so libfake_rm.so": rm_client issues RM ioctls the way libcuda
does, the shim sees them first, and the fake RM behind it answers and logs each call.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from gleaner.protocol import wire as p
from gleaner.testing.shim import AgentStub, ShimProcess, wait_until


def _setup(sp: ShimProcess) -> dict[str, int]:
    handles = {"fd": int(sp.cmd("open")["fd"])}
    for step, cmd in (
        ("client", "client"),
        ("device", "device 3"),
        ("tsg", "tsg"),
        ("chan", "chan c86f"),
    ):
        r = sp.cmd(cmd)
        assert r["status"] == "0" and int(r["handle"], 16)
        handles[step] = int(r["handle"], 16)
    return handles


def _controls(sp: ShimProcess) -> list[dict[str, str]]:
    return sp.rm_calls("control")


def test_registration_reaches_the_agent(tmp_path: Path, agent: AgentStub, sock_path: Path) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        h = _setup(sp)
        sp.cmd("mem 2097152")
        hello = agent.wait_for(p.Hello)
        assert hello.role == p.Role.OFFLINE
        assert hello.pid == sp.proc.pid
        assert hello.job == "team-a/job-1"
        assert hello.gpu_uuids == ("GPU-11111111-2222-3333-4444-555555555555",)
        assert hello.gpu_indices == (3,)
        assert hello.caps & p.CAP_GATE_THREAD and hello.caps & p.CAP_FD_PASS
        tsg = agent.wait_for(p.ChannelAdd, lambda m: m.kind == p.Kind.TSG)
        assert (tsg.h_client, tsg.h_parent, tsg.h_object, tsg.h_class) == (
            h["client"],
            h["device"],
            h["tsg"],
            0xA06C,
        )
        assert tsg.gpu == 3  # from the device alloc's deviceId
        assert tsg.engine_type == 1
        ch = agent.wait_for(p.ChannelAdd, lambda m: m.kind == p.Kind.CHANNEL)
        assert (ch.h_parent, ch.h_object, ch.h_class, ch.gpu) == (h["tsg"], h["chan"], 0xC86F, 3)
        mem = agent.wait_for(p.MemHandles)
        assert mem.entries[0].size == 2 << 20 and mem.entries[0].flags == p.MEM_ADDED


def test_alloc_forms_and_xfer_envelope_are_parsed(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        _setup(sp)  # client/tsg: NVOS21, device/channel: NVOS64
        x = int(sp.cmd("xfer-tsg")["handle"], 16)
        agent.wait_for(p.ChannelAdd, lambda m: m.h_object == x and m.kind == p.Kind.TSG)
        forms = {(r["class"], r["form"]) for r in sp.rm_calls("alloc")}
        assert {("0x41", "21"), ("0x80", "64"), ("0xa06c", "21"), ("0xc86f", "64")} <= forms


def test_channels_registered_before_the_agent_came_up_are_replayed(
    tmp_path: Path, sock_path: Path
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        h = _setup(sp)
        with AgentStub(sock_path) as stub:
            stub.wait_for(p.Hello)
            stub.wait_for(p.ChannelAdd, lambda m: m.h_object == h["tsg"])
            stub.wait_for(p.ChannelAdd, lambda m: m.h_object == h["chan"])


def test_frees_and_subtree_frees_are_reported(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        h = _setup(sp)
        agent.wait_for(p.ChannelAdd, lambda m: m.h_object == h["chan"])
        sp.cmd("free-chan")
        agent.wait_for(p.ChannelFree, lambda m: m.h_object == h["chan"])
        sp.cmd("chan c56f")
        sp.cmd("free-client")  # frees the device, the TSG and its channel with it
        agent.wait_for(p.ChannelFree, lambda m: m.h_object == h["tsg"])
        agent.wait_for(p.ChannelFree, lambda m: m.h_class == 0xC56F)


def test_closing_the_control_fd_drops_its_objects(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        h = _setup(sp)
        agent.wait_for(p.ChannelAdd, lambda m: m.h_object == h["chan"])
        sp.cmd("close")
        agent.wait_for(p.ChannelFree, lambda m: m.h_object == h["tsg"])


def test_gate_issues_the_schedule_control_on_libcudas_own_fd(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    # Generous waits (they return as soon as the frame is there): a loaded CI machine can
    # take seconds to schedule the shim's control thread.
    wait = 30.0
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        h = _setup(sp)
        agent.wait_for(p.ChannelAdd, lambda m: m.h_object == h["chan"], timeout=wait)
        mark = agent.mark()
        sent_ns = time.monotonic_ns()
        agent.send(p.Gate(gate_seq=7, enable=False))
        ack = agent.wait_for(p.GateAck, lambda m: m.gate_seq == 7, timeout=wait)
        round_trip_ns = time.monotonic_ns() - sent_ns
        assert ack.ok and not ack.enabled and ack.n_objects == 1 and ack.n_failed == 0
        # The shim's latency is a real measurement, from its receipt of the GATE to its last
        # control: inside the round trip seen here (one clock on one host), however slow.
        assert 0 < ack.latency_ns <= round_trip_ns
        ctl = _controls(sp)[-1]
        assert ctl["cmd"] == "0xa06c0101" and ctl["enable"] == "0" and ctl["psize"] == "3"
        assert int(ctl["object"], 16) == h["tsg"] and int(ctl["client"], 16) == h["client"]
        assert ctl["fd"] == ctl["owner_fd"] == str(h["fd"])  # the RM's ownership rule
        assert ctl["status"] == "0x0"
        # The status the GATE caused: a loaded shim may still report, after the mark, the
        # same code from before its HELLO_ACK ("waiting for the agent's HELLO_ACK").
        st = agent.wait_for(
            p.Status,
            lambda m: m.code == p.StatusCode.GATED_BY_AGENT and "gated by the agent" in m.reason,
            after=mark,
            timeout=wait,
        )
        assert "1 object(s) disabled" in st.reason
        agent.send(p.Gate(gate_seq=8, enable=True))
        ack = agent.wait_for(p.GateAck, lambda m: m.gate_seq == 8, timeout=wait)
        assert ack.ok and ack.enabled and ack.n_objects == 1
        assert _controls(sp)[-1]["enable"] == "1"


def test_channel_variant_is_the_fallback(tmp_path: Path, agent: AgentStub, sock_path: Path) -> None:
    env = {"GLEANER_FAKE_RM_FAIL_CMDS": "a06c0101"}
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path, extra_env=env) as sp:
        h = _setup(sp)
        agent.wait_for(p.ChannelAdd, lambda m: m.h_object == h["chan"])
        agent.send(p.Gate(gate_seq=1, enable=False))
        ack = agent.wait_for(p.GateAck, lambda m: m.gate_seq == 1)
        assert ack.ok and ack.n_failed == 0
        calls = _controls(sp)
        assert [c["cmd"] for c in calls[-2:]] == ["0xa06c0101", "0xa06f0103"]
        assert calls[-2]["status"] == "0x56"
        assert int(calls[-1]["object"], 16) == h["chan"] and calls[-1]["enable"] == "0"


def test_refused_control_is_reported_and_work_stays_held(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    env = {"GLEANER_FAKE_RM_FAIL_CMDS": "a06c0101,a06f0103"}
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path, extra_env=env) as sp:
        h = _setup(sp)
        agent.wait_for(p.ChannelAdd, lambda m: m.h_object == h["chan"])
        agent.send(p.Gate(gate_seq=3, enable=False))
        ack = agent.wait_for(p.GateAck, lambda m: m.gate_seq == 3)
        assert not ack.ok and ack.n_failed == 1 and ack.rm_status == 0x56
        agent.wait_for(p.Status, lambda m: m.code == p.StatusCode.CONTROL_REFUSED)
        sp.send("launch 1")
        assert sp.no_reply_within(0.5), "a launch ran although the gate is closed"
        agent.send(p.Gate(gate_seq=4, enable=True))
        assert sp.reply()["rc"] == "0"


def test_application_schedule_enable_is_deferred_while_gated(
    tmp_path: Path, sock_path: Path
) -> None:
    with (
        AgentStub(sock_path, gate_open=False) as agent,
        ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp,
    ):
        h = _setup(sp)
        agent.wait_for(p.ChannelAdd, lambda m: m.h_object == h["chan"])
        agent.send(p.Gate(gate_seq=0, enable=False))
        agent.wait_for(p.GateAck, lambda m: m.gate_seq == 0)
        before = _controls(sp)
        assert before and all(c["enable"] == "0" for c in before)
        r = sp.cmd("sched 1")  # libcuda enabling its TSG: answered, not forwarded
        assert r["rc"] == "0" and r["status"] == "0"
        assert _controls(sp) == before
        agent.send(p.Gate(gate_seq=1, enable=True))
        ack = agent.wait_for(p.GateAck, lambda m: m.gate_seq == 1)
        assert ack.ok and ack.n_objects == 1
        (ctl,) = _controls(sp)[len(before) :]
        assert int(ctl["object"], 16) == h["tsg"] and ctl["enable"] == "1"
        sp.cmd("sched 1")  # gate open now: forwarded as is
        assert len(_controls(sp)) == len(before) + 2


def test_fail_closed_without_an_agent(tmp_path: Path, sock_path: Path) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        _setup(sp)
        sp.send("launch 1")
        assert sp.no_reply_within(0.7), "offline work ran with no agent"
        assert wait_until(lambda: "offline GPU work held in cuLaunchKernel" in sp.stderr())
        assert "unreachable" in sp.stderr()
        with AgentStub(sock_path, gate_open=True) as agent:
            agent.wait_for(p.Hello)
            assert sp.reply()["rc"] == "0"  # released once an agent opens the gate


def test_fail_closed_when_the_agent_goes_away(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        h = _setup(sp)
        agent.wait_for(p.ChannelAdd, lambda m: m.h_object == h["chan"])
        assert sp.cmd("launch 1")["rc"] == "0"
        agent.close()  # the agent dies: no one to reconnect to
        assert wait_until(lambda: any(c["enable"] == "0" for c in _controls(sp)))
        sp.send("launch 1")
        assert sp.no_reply_within(0.5)
        # Reconnect attempts every 50 ms re-close the gate without a second RPC per TSG.
        assert [c["enable"] for c in _controls(sp)] == ["0"]
        assert wait_until(lambda: "unreachable" in sp.stderr()), sp.stderr()


def test_fd_passing_hands_over_the_same_open_file(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        h = _setup(sp)
        agent.wait_for(p.Hello)
        agent.send(p.FdRequest())
        msg = agent.wait_for(p.FdPass)
        assert msg.fd is not None and msg.h_client == h["client"] and msg.sender_fd == h["fd"]
        try:
            # Same open file description: a seek through our copy moves the shim's offset.
            os.lseek(msg.fd, 4242, os.SEEK_SET)
            assert sp.cmd("offset")["value"] == "4242"
        finally:
            os.close(msg.fd)


def test_agent_gate_mode_holds_launches_without_issuing_controls(
    tmp_path: Path, sock_path: Path
) -> None:
    with (
        AgentStub(sock_path, gate_mode=p.GateMode.AGENT) as agent,
        ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp,
    ):
        h = _setup(sp)
        agent.wait_for(p.ChannelAdd, lambda m: m.h_object == h["chan"])
        agent.send(p.Gate(gate_seq=2, enable=False))
        ack = agent.wait_for(p.GateAck, lambda m: m.gate_seq == 2)
        assert ack.ok and ack.n_objects == 0
        assert _controls(sp) == []
        sp.send("launch 1")
        assert sp.no_reply_within(0.4)
        agent.send(p.Gate(gate_seq=3, enable=True))
        assert sp.reply()["rc"] == "0"


def test_garbage_from_the_agent_closes_the_gate(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        _setup(sp)
        agent.wait_for(p.Hello)
        assert sp.cmd("launch 1")["rc"] == "0"
        with agent._cv:
            conn = agent.conns[-1]
        conn.sendall(b"NOPE" + bytes(12))
        assert wait_until(lambda: "protocol" in sp.stderr())
        assert sp.proc.poll() is None  # the host process lives on


def test_large_subtrees_are_freed_completely(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        h = _setup(sp)
        mems = {int(sp.cmd("mem 4096")["handle"], 16) for _ in range(300)}
        agent.wait_for(p.ChannelAdd, lambda m: m.h_object == h["chan"])
        sp.cmd("free-tsg")  # the group and its channel, not the device's memory
        agent.wait_for(p.ChannelFree, lambda m: m.h_object == h["chan"])
        agent.wait_for(p.ChannelFree, lambda m: m.h_object == h["tsg"])
        mark = agent.mark()
        sp.cmd("free-client")

        def freed() -> set[int]:
            return {
                e.h_memory
                for m in agent.all_of(p.MemHandles)
                for e in m.entries
                if e.flags == p.MEM_FREED
            }

        assert wait_until(lambda: freed() == mems)
        assert agent.mark() >= mark + 300
        assert not [m for m in agent.all_of(p.ChannelFree) if m.h_object == h["device"]]


def test_a_gate_change_reaches_every_live_group_after_frees_reshuffled_the_registry(
    tmp_path: Path, agent: AgentStub, sock_path: Path
) -> None:
    """The registry visits only its used slots: after many objects came and went, a gate
    change still reaches every live channel group and no freed one (the bitmap's bookkeeping
    under long probe chains: test_the_registry_visits_exactly_its_live_objects)."""
    with ShimProcess(tmp_path, role="offline", socket_path=sock_path) as sp:
        sp.cmd("open")
        live: set[int] = set()
        for k in range(8):
            sp.cmd("client")
            sp.cmd("device 3")
            tsg = int(sp.cmd("tsg")["handle"], 16)
            for _ in range(60):  # neighbours in the table, so that frees shift entries back
                assert sp.cmd("mem 4096")["status"] == "0"
            if k % 3 == 1:
                assert sp.cmd("free-tsg")["status"] == "0"
            elif k != 7:
                live.add(tsg)
        assert sp.cmd("free-client")["status"] == "0"  # the last client: its whole subtree
        assert wait_until(
            lambda: {m.h_object for m in agent.all_of(p.ChannelAdd)} >= live, timeout=10
        )
        before = len(_controls(sp))
        agent.send(p.Gate(gate_seq=1, enable=False))
        ack = agent.wait_for(p.GateAck, lambda m: m.gate_seq == 1)
        disabled = {int(c["object"], 16) for c in _controls(sp)[before:] if c["enable"] == "0"}
        assert ack.ok and ack.n_objects == len(live) == 5
        assert disabled == live


def test_the_registry_visits_exactly_its_live_objects(shim_build: Path) -> None:
    """The registry alone (build/registry_check, built with the shim): filled to 73 % of its
    slots, then 1,500 objects freed in random order (backward shifts move entries); every
    visit of the gate's walk (gl_reg_each) finds exactly the live objects. Then handle trees
    among them: a device's free, a channel's and an fd's close report and remove exactly
    their objects, walking the used slots only."""
    out = subprocess.run(
        [str(shim_build / "registry_check")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.startswith("ok "), out.stdout + out.stderr
