"""gleaner.batch.store: every answer on disk is kept, each custom_id is there exactly once,
whatever point a crash stopped the writer at (torn last line, lines past the checkpoint).

A crash is modelled by copying the directory while its writer is still open (the files hold
what was fsync-ed, the checkpoint what was last written), then opening the copy.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gleaner.batch.records import Result, encode_line
from gleaner.batch.store import (
    CHECKPOINT_FILE,
    ERROR_FILE,
    OUTPUT_FILE,
    ProgressStore,
    StoreError,
    read_progress,
)


def ok(i: int, tokens: int = 5) -> Result:
    return Result(f"r{i}", 200, {"usage": {"prompt_tokens": 1, "completion_tokens": tokens - 1}})


def ids_in(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)["custom_id"] for line in path.read_text().splitlines()]


def crash_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_answers_and_counts_survive_a_clean_restart(tmp_path: Path) -> None:
    with ProgressStore(tmp_path) as store:
        store.set_total(4)
        assert store.record(ok(1))
        assert store.record(Result("r2", 400, {"error": {"message": "bad"}}))
        assert not store.record(ok(1))  # already answered: not written again
    with ProgressStore(tmp_path) as again:
        assert again.done_ids == {"r1", "r2"}
        p = again.progress
        assert (p.total, p.succeeded, p.failed, p.prompt_tokens, p.completion_tokens) == (
            4,
            1,
            1,
            1,
            4,
        )
        assert p.starts == 2
    assert ids_in(tmp_path / OUTPUT_FILE) == ["r1"]
    assert ids_in(tmp_path / ERROR_FILE) == ["r2"]
    progress = read_progress(tmp_path)
    assert progress is not None
    assert progress.done == 2


def test_lines_past_the_checkpoint_and_a_torn_tail(tmp_path: Path) -> None:
    store = ProgressStore(tmp_path / "live", checkpoint_every=1000, checkpoint_seconds=1e9)
    store.open()
    for i in range(5):
        store.record(ok(i))
    copy = crash_copy(tmp_path / "live", tmp_path / "crashed")
    store.close()
    torn = encode_line(ok(5).to_line())[:-7]
    with (copy / OUTPUT_FILE).open("ab") as f:
        f.write(torn)
    # The checkpoint saw none of the five (written at open only).
    assert json.loads((copy / CHECKPOINT_FILE).read_text())["done"] == []
    with ProgressStore(copy) as recovered:
        assert recovered.done_ids == {f"r{i}" for i in range(5)}
        assert recovered.progress.succeeded == 5
        assert recovered.progress.completion_tokens == 20
        recovered.record(ok(5))
    assert ids_in(copy / OUTPUT_FILE) == [f"r{i}" for i in range(6)]


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    with ProgressStore(tmp_path), pytest.raises(StoreError, match="another runner"):
        ProgressStore(tmp_path, lock_timeout=0).open()


def test_a_file_shorter_than_its_checkpoint_is_refused(tmp_path: Path) -> None:
    with ProgressStore(tmp_path) as store:
        store.record(ok(1))
    (tmp_path / OUTPUT_FILE).write_bytes(b"")
    with pytest.raises(StoreError, match="shorter"):
        ProgressStore(tmp_path).open()


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    answers=st.lists(st.booleans(), min_size=0, max_size=30),
    every=st.integers(1, 8),
    crash_after=st.integers(0, 30),
    torn=st.integers(0, 60),
)
def test_any_crash_point_keeps_every_answer_once(
    tmp_path_factory: pytest.TempPathFactory,
    answers: list[bool],
    every: int,
    crash_after: int,
    torn: int,
) -> None:
    base = tmp_path_factory.mktemp("store")
    live = base / "live"
    crash_after = min(crash_after, len(answers))
    store = ProgressStore(live, checkpoint_every=every, checkpoint_seconds=1e9)
    store.open()
    results = [
        ok(i) if good else Result(f"r{i}", 422, {"message": "no"}) for i, good in enumerate(answers)
    ]
    for r in results[:crash_after]:
        store.record(r)
    copy = crash_copy(live, base / "crashed")
    store.close()
    if crash_after < len(results):  # the next answer was being written when it crashed
        nxt = results[crash_after]
        data = encode_line(nxt.to_line())
        with (copy / (OUTPUT_FILE if nxt.ok else ERROR_FILE)).open("ab") as f:
            f.write(data[: min(torn, len(data) - 1)])
    with ProgressStore(copy) as again:
        assert again.done_ids == {r.custom_id for r in results[:crash_after]}
        for r in results:  # the restarted runner answers everything
            again.record(r)
        assert again.progress.done == len(results)
    on_disk = ids_in(copy / OUTPUT_FILE) + ids_in(copy / ERROR_FILE)
    assert sorted(on_disk) == sorted(r.custom_id for r in results)
    assert ids_in(copy / OUTPUT_FILE) == [r.custom_id for r in results if r.ok]
