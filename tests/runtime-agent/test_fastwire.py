"""The reaction path's codec gives exactly the protocol's bytes and values."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gleaner.protocol import wire as p
from gleaner.runtime_agent import fastwire as fw

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)


@given(seq=U32, gate_seq=U64, enable=st.booleans(), gpu=U32)
def test_gate_frame_is_the_protocol_frame(seq: int, gate_seq: int, enable: bool, gpu: int) -> None:
    fast = fw.encode_gate(seq, gate_seq, enable, gpu)
    assert fast == p.Gate(gate_seq=gate_seq, enable=enable, gpu=gpu).encode(seq)
    msg, used = p.decode(fast)
    assert used == len(fast) and msg == p.Gate(gate_seq=gate_seq, enable=enable, gpu=gpu)


@given(seq=U32, gpu=U32, mono=U64, request=U64, busy=st.booleans())
def test_edges_unpack_in_place(seq: int, gpu: int, mono: int, request: int, busy: bool) -> None:
    cls = p.OnlineBusy if busy else p.OnlineIdle
    frame = b"junk" + cls(gpu=gpu, mono_ns=mono, request_id=request).encode(seq)
    magic, version, mtype, flags, length, got_seq = fw.HEADER.unpack_from(frame, 4)
    assert (magic, version, flags, got_seq) == (p.MAGIC, p.VERSION, 0, seq)
    assert mtype == (fw.T_BUSY if busy else fw.T_IDLE)
    assert fw.FAST_SIZES[mtype] == length
    assert fw.EDGE.unpack_from(frame, 4 + p.HEADER_SIZE) == (gpu, mono, request)


@given(gate_seq=U64, latency=U64, gpu=U32, enabled=st.booleans(), ok=st.booleans())
def test_gate_ack_head_unpacks_in_place(
    gate_seq: int, latency: int, gpu: int, enabled: bool, ok: bool
) -> None:
    ack = p.GateAck(gate_seq=gate_seq, enabled=enabled, ok=ok, latency_ns=latency, gpu=gpu)
    frame = ack.encode(9)
    mtype, length = fw.HEADER.unpack_from(frame)[2], fw.HEADER.unpack_from(frame)[4]
    assert mtype == fw.T_GATE_ACK and fw.FAST_SIZES[mtype] == length
    got = fw.GATE_ACK_HEAD.unpack_from(frame, p.HEADER_SIZE)
    assert got == (gate_seq, latency, gpu, int(enabled), int(ok))


def test_only_the_hot_types_are_fast() -> None:
    assert set(fw.FAST_SIZES) == {
        int(p.MsgType.ONLINE_BUSY),
        int(p.MsgType.ONLINE_IDLE),
        int(p.MsgType.GATE_ACK),
    }
