"""The agent ⇄ shim codec: round trips, incremental framing, malformed frames, SCM_RIGHTS."""

from __future__ import annotations

import os
import socket
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gleaner.protocol import wire as p

SAMPLES: list[p.Message] = [
    p.Hello(
        pid=1234,
        role=p.Role.OFFLINE,
        gpu_uuids=("GPU-aaaa", "GPU-bbbb"),
        gpu_indices=(0, 3),
        job="ns/job",
        caps=p.CAP_GATE_THREAD | p.CAP_FD_PASS,
    ),
    p.HelloAck(accepted=True, gate_open=True, gate_mode=p.GateMode.AGENT, heartbeat_ms=250),
    p.ChannelAdd(
        h_client=0xC1D00001,
        h_parent=0x5C000002,
        h_object=0x5C000010,
        h_class=0xA06C,
        kind=p.Kind.TSG,
        gpu=0,
        engine_type=1,
    ),
    p.ChannelFree(h_client=1, h_parent=2, h_object=3, h_class=0xC86F, kind=p.Kind.CHANNEL),
    p.OnlineBusy(gpu=1, mono_ns=123456789, request_id=7),
    p.OnlineIdle(gpu=1, mono_ns=123999999),
    p.DecodeGap(gpu=0, mono_ns=5, gap_ns=2_000_000),
    p.Gate(gate_seq=42, enable=False),
    p.GateAck(gate_seq=42, enabled=False, ok=True, latency_ns=150_000, n_objects=3),
    p.GateAck(gate_seq=43, enabled=True, ok=False, err=-22, rm_status=0x1F, n_failed=1),
    p.FdRequest(),
    p.FdPass(h_client=0xC1D00001, sender_fd=9),
    p.Status(
        code=p.StatusCode.NO_AGENT,
        reason="agent socket unreachable",
        blocked_ns=10,
        blocked_threads=2,
    ),
    p.MemHandles(
        entries=(
            p.MemHandle(1, 2, 3, 0x40, 0, p.MEM_ADDED, 2 << 20),
            p.MemHandle(1, 2, 4, 0x40, 0, p.MEM_FREED, 0),
        )
    ),
    p.InvalidateBlocks(request_id="cmpl-abc-0", block_ids=(3, 17, 99)),
    p.Heartbeat(mono_ns=99, pid=1234, state=1),
    p.OnlineMemory(gpu=0, kv_used_bytes=3 << 30, kv_reserved_bytes=40 << 30, mono_ns=77),
    p.OfflineHandles(
        gpu=1,
        entries=(
            p.HandleSpan(0x7F0000000000, 2 << 20, "req-a", tokens=512, block_ids=(0, 1, 2)),
            p.HandleSpan(0x7F0000000000, 2 << 20, "req-b", tokens=16, block_ids=(3,)),
            p.HandleSpan(0x7F0000200000, 2 << 20),
        ),
    ),
    p.OfflineHandles(gpu=0, entries=(), reset=False),
    p.OfflinePageGroups(
        gpu=2,
        groups=(
            p.PageGroup(
                2 << 20,
                (0x7F0000000000, 0x7F0000400000),
                (p.GroupSpan("req-a", 512, (0, 1, 2)), p.GroupSpan("req-b", 16, (3,))),
            ),
            p.PageGroup(2 << 20, (0x7F0000200000,)),
            p.PageGroup(2 << 20, (0x7F0000600000, 0x7F0000800000), quarantined=True),
        ),
    ),
    p.OfflinePageGroups(gpu=0, groups=(), reset=False),
    p.Reclaim(reclaim_seq=5, gpu=1, handles=(0x7F0000000000, 0x7F0000200000)),
    p.ReclaimAck(reclaim_seq=5, gpu=1, released=2),
    p.ReclaimAck(reclaim_seq=6, gpu=0, released=0, ok=False, err=38),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg: p.Message) -> None:
    frame = msg.encode(seq=5)
    assert len(frame) == p.HEADER_SIZE + len(msg.payload())
    assert frame[:4] == b"GLNR"
    decoded, used = p.decode(frame + b"tail")
    assert used == len(frame)
    assert decoded == msg
    assert type(decoded) is type(msg)
    assert p.decode_with_seq(frame)[2] == 5


def test_fixed_payload_sizes_match_struct_table() -> None:
    for msg in SAMPLES:
        if msg.TYPE not in p.VARIABLE_TYPES:
            assert len(msg.payload()) == msg.SIZE
        else:
            assert len(msg.payload()) >= msg.SIZE


def test_incremental_decoder_byte_by_byte() -> None:
    stream = b"".join(m.encode(seq=i) for i, m in enumerate(SAMPLES))
    dec = p.FrameDecoder()
    got: list[p.Message] = []
    for i in range(len(stream)):
        got += dec.feed(stream[i : i + 1])
    assert got == SAMPLES


def test_partial_frame_needs_more() -> None:
    frame = p.Gate(gate_seq=1, enable=True).encode()
    assert p.decode(frame[:10]) == (None, 0)
    assert p.decode(frame[:-1]) == (None, 0)


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        (lambda f: b"XXXX" + f[4:], "bad magic"),
        (lambda f: f[:4] + b"\x09" + f[5:], "version"),
        (lambda f: f[:5] + b"\xee" + f[6:], "MsgType"),
        (lambda f: f[:8] + struct.pack("<I", 15) + f[12:], "expected 16"),
        (lambda f: f[:8] + struct.pack("<I", p.MAX_PAYLOAD + 1) + f[12:], "exceeds"),
    ],
)
def test_malformed_frames_raise(patch: object, match: str) -> None:
    frame = p.Gate(gate_seq=1, enable=True).encode()
    assert callable(patch)
    with pytest.raises(p.ProtocolError, match=match):
        p.decode(patch(frame))


def test_unknown_enum_value_in_payload_raises() -> None:
    frame = bytearray(p.Status(code=p.StatusCode.OK).encode())
    frame[p.HEADER_SIZE] = 77
    with pytest.raises(p.ProtocolError, match="StatusCode"):
        p.decode(bytes(frame))


def test_variable_length_mismatch_raises() -> None:
    frame = bytearray(p.InvalidateBlocks(request_id="r", block_ids=(1, 2)).encode())
    struct.pack_into("<I", frame, p.HEADER_SIZE + p.REQUEST_ID_LEN, 3)
    with pytest.raises(p.ProtocolError, match="do not fill"):
        p.decode(bytes(frame))


def test_oversized_strings_are_rejected() -> None:
    with pytest.raises(p.ProtocolError, match="does not fit"):
        p.Hello(pid=1, role=p.Role.ONLINE, job="x" * p.JOB_LEN).encode()
    with pytest.raises(p.ProtocolError, match="at most"):
        p.Hello(pid=1, role=p.Role.ONLINE, gpu_indices=tuple(range(9))).encode()


@given(st.lists(st.integers(0, 2**32 - 1), max_size=200), st.text(max_size=20))
def test_invalidate_blocks_property(ids: list[int], rid: str) -> None:
    msg = p.InvalidateBlocks(request_id=rid.replace("\0", ""), block_ids=tuple(ids))
    if len(msg.request_id.encode()) >= p.REQUEST_ID_LEN:
        return
    assert p.decode(msg.encode())[0] == msg


def test_fd_pass_over_socketpair_carries_a_working_descriptor(tmp_path: object) -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    r, w = os.pipe()
    try:
        p.send_message(a, p.Heartbeat(mono_ns=1))
        p.send_message(a, p.FdPass(h_client=7, sender_fd=w, fd=w))
        dec = p.FrameDecoder()
        got: list[p.Message] = []
        while len(got) < 2:
            batch = p.recv_messages(b, dec)
            assert batch is not None
            got += batch
        fdmsg = got[1]
        assert isinstance(fdmsg, p.FdPass)
        assert fdmsg.h_client == 7 and fdmsg.fd is not None and fdmsg.fd != w
        os.write(fdmsg.fd, b"hi")  # the passed descriptor is the pipe's write end
        assert os.read(r, 2) == b"hi"
        os.close(fdmsg.fd)
        a.close()
        assert p.recv_messages(b, dec) is None
    finally:
        for fd in (r, w):
            os.close(fd)
        b.close()


def test_offline_handles_with_a_short_block_list_is_refused() -> None:
    frame = p.OfflineHandles(gpu=0, entries=(p.HandleSpan(1, 2, "r", 3, (4, 5)),)).encode()
    # Drop the last block id and fix the header length: the entry now overruns the payload.
    body = frame[p.HEADER_SIZE : -4]
    header = struct.pack(
        "<IBBHII", p.MAGIC, p.VERSION, int(p.MsgType.OFFLINE_HANDLES), 0, len(body), 0
    )
    with pytest.raises(p.ProtocolError, match="overrun"):
        p.decode(header + body)
    # Extra bytes after the last entry are refused too.
    body = frame[p.HEADER_SIZE :] + b"\0\0\0\0"
    header = struct.pack(
        "<IBBHII", p.MAGIC, p.VERSION, int(p.MsgType.OFFLINE_HANDLES), 0, len(body), 0
    )
    with pytest.raises(p.ProtocolError, match="do not fill"):
        p.decode(header + body)


def test_reclaim_count_must_fill_the_payload() -> None:
    frame = p.Reclaim(reclaim_seq=1, gpu=0, handles=(1, 2)).encode()
    body = frame[p.HEADER_SIZE : -8]
    header = struct.pack("<IBBHII", p.MAGIC, p.VERSION, int(p.MsgType.RECLAIM), 0, len(body), 0)
    with pytest.raises(p.ProtocolError, match="RECLAIM"):
        p.decode(header + body)


def _frame(kind: p.MsgType, body: bytes) -> bytes:
    return struct.pack("<IBBHII", p.MAGIC, p.VERSION, int(kind), 0, len(body), 0) + body


_GROUPS = p.OfflinePageGroups(
    gpu=0,
    groups=(
        p.PageGroup(4096, (0x1000, 0x2000), (p.GroupSpan("r", 3, (4, 5)),)),
        p.PageGroup(4096, (0x3000,)),
    ),
)


# _GROUPS' payload: head 16; group 0 head at 16, 2 page VAs at 40, span at 56, its 2 block
# ids at 128; group 1 head at 136, its page VA at 160; 168 bytes in all.
@pytest.mark.parametrize(
    ("length", "match"),
    [
        (132, "2 block ids overrun"),  # the span's last block id is missing
        (100, "1 spans overrun"),  # the span record is cut
        (40, "2 pages overrun"),  # group 0 ends after its head
        (150, "2 groups overrun"),  # group 1's head is cut
        (160, "1 pages overrun"),  # group 1's page VA is missing
    ],
)
def test_offline_page_groups_truncated_is_refused(length: int, match: str) -> None:
    body = _GROUPS.encode()[p.HEADER_SIZE :]
    assert len(body) == 168
    with pytest.raises(p.ProtocolError, match=match):
        p.decode(_frame(p.MsgType.OFFLINE_PAGE_GROUPS, body[:length]))


def test_offline_page_groups_counts_must_fill_the_payload() -> None:
    body = bytearray(_GROUPS.encode()[p.HEADER_SIZE :])
    # One group fewer than the records that follow: the rest does not fill.
    struct.pack_into("<I", body, 4, 1)
    with pytest.raises(p.ProtocolError, match="do not fill"):
        p.decode(_frame(p.MsgType.OFFLINE_PAGE_GROUPS, bytes(body)))
    # One group more than there are: it overruns.
    struct.pack_into("<I", body, 4, 3)
    with pytest.raises(p.ProtocolError, match="overrun"):
        p.decode(_frame(p.MsgType.OFFLINE_PAGE_GROUPS, bytes(body)))
    # A span count that claims more spans than there are bytes.
    body = bytearray(_GROUPS.encode()[p.HEADER_SIZE :])
    struct.pack_into("<I", body, 16 + 12, 500)
    with pytest.raises(p.ProtocolError, match="spans overrun"):
        p.decode(_frame(p.MsgType.OFFLINE_PAGE_GROUPS, bytes(body)))
    # A head shorter than 16 bytes is refused by the header check.
    with pytest.raises(p.ProtocolError, match="shorter"):
        p.decode(_frame(p.MsgType.OFFLINE_PAGE_GROUPS, b"\0" * 12))


def test_offline_page_groups_quarantined_group_has_no_spans() -> None:
    body = bytearray(_GROUPS.encode()[p.HEADER_SIZE :])
    struct.pack_into("<I", body, 16 + 16, p.PAGE_GROUP_QUARANTINED)  # group 0 gflags
    with pytest.raises(p.ProtocolError, match="quarantined"):
        p.decode(_frame(p.MsgType.OFFLINE_PAGE_GROUPS, bytes(body)))
    bad = p.PageGroup(4096, (1,), (p.GroupSpan("r", 1, ()),), quarantined=True)
    with pytest.raises(p.ProtocolError, match="quarantined"):
        p.OfflinePageGroups(gpu=0, groups=(bad,)).encode()


_u32 = st.integers(0, 2**32 - 1)
_spans = st.builds(
    p.GroupSpan,
    st.text(st.characters(codec="utf-8", blacklist_characters="\0"), max_size=20),
    _u32,
    st.lists(_u32, max_size=30).map(tuple),
)
_groups = st.one_of(
    st.builds(
        p.PageGroup,
        st.integers(0, 2**64 - 1),
        st.lists(st.integers(0, 2**64 - 1), max_size=20).map(tuple),
        st.lists(_spans, max_size=5).map(tuple),
        st.just(False),
    ),
    st.builds(
        p.PageGroup,
        st.integers(0, 2**64 - 1),
        st.lists(st.integers(0, 2**64 - 1), max_size=20).map(tuple),
        st.just(()),
        st.just(True),
    ),
)


@given(_u32, st.lists(_groups, max_size=8).map(tuple), st.booleans())
def test_offline_page_groups_property(
    gpu: int, groups: tuple[p.PageGroup, ...], reset: bool
) -> None:
    msg = p.OfflinePageGroups(gpu=gpu, groups=groups, reset=reset)
    frame = msg.encode(seq=3)
    got, used = p.decode(frame)
    assert got == msg and used == len(frame)
    # Every strict prefix of the payload (with the header's length fixed) is refused.
    body = frame[p.HEADER_SIZE :]
    for cut in {len(body) - 1, len(body) - 4, 17, len(body) // 2}:
        if 16 <= cut < len(body):
            with pytest.raises(p.ProtocolError):
                p.decode(_frame(p.MsgType.OFFLINE_PAGE_GROUPS, body[:cut]))
