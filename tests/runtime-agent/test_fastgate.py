"""GateSegment, the agent's side of the shared-memory gate (no shim: the file's fields)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gleaner.runtime_agent import fastgate as fg


def test_create_fills_the_segment_and_publishes_it_whole(tmp_path: Path) -> None:
    path = fg.segment_path(tmp_path)
    seg = fg.GateSegment.create(path, [(0, "GPU-a"), (5, "GPU-b")], stale_s=0.25)
    try:
        assert path.stat().st_size == fg.SIZE
        assert path.stat().st_mode & 0o777 == 0o666
        assert not list(tmp_path.glob(".*"))  # the temporary name is gone
        view = fg.GateSegment.open(path)
        raw = fg.SegmentLayout.from_buffer_copy(path.read_bytes())
        assert (raw.magic, raw.version, raw.nslots) == (fg.MAGIC, fg.VERSION, 2)
        assert raw.stale_ns == 250_000_000
        assert raw.slot[1].uuid == b"GPU-b" and raw.slot[1].index == 5
        assert abs(raw.heartbeat_ns - time.monotonic_ns()) < 60 * 1_000_000_000
        view.online_edge(5)
        view.online_edge(5)
        view.online_edge()  # every GPU
        assert (seg.busy_seq(0), seg.busy_seq(5)) == (1, 3)
        assert seg.open_seq(5) == 0
        seg.allow(5)
        assert seg.open_seq(5) == 3 and seg.open_seq(0) == 0
        view.close()
    finally:
        seg.retire()


def test_retire_zeroes_the_magic_and_removes_only_its_own_file(tmp_path: Path) -> None:
    path = fg.segment_path(tmp_path)
    old = fg.GateSegment.create(path, [(0, "GPU-a")])
    reader = fg.GateSegment.open(path)
    new = fg.GateSegment.create(path, [(0, "GPU-a")])  # a restarted agent replaced it
    old.retire()
    old.retire()  # idempotent
    assert path.exists(), "retire removed the newer agent's file"
    assert reader._view.magic == 0  # the shims mapping the old one see it retired
    reader.close()
    new.retire()
    assert not path.exists()


def test_a_segment_holds_one_to_sixty_four_gpus(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        fg.GateSegment.create(tmp_path / "g", [])
    with pytest.raises(ValueError):
        fg.GateSegment.create(tmp_path / "g", [(i, f"GPU-{i}") for i in range(65)])
    (tmp_path / "junk").write_bytes(b"\0" * fg.SIZE)
    with pytest.raises(ValueError):
        fg.GateSegment.open(tmp_path / "junk")
