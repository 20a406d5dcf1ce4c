"""Where a batch's progress outlives the Pod: one directory (on the job's PVC), exactly once.

Contract (docs/batch.md, "Progress and resumption"). The directory holds:

- ``output.jsonl``: one OpenAI batch output line per request answered with a 2xx;
- ``errors.jsonl``: one line per request the engine refused (the OpenAI error file);
- ``checkpoint.json``: the custom_ids answered, the byte length of both files they are in,
  and the counts (requests, tokens), replaced atomically (write, fsync, rename, fsync of the
  directory) so a reader sees the old checkpoint or the new one, never half of one;
- ``.lock``: held (``flock``) by the one runner that writes here.

Every answer is appended to its file with one ``write`` and ``fsync``-ed before it counts as
done; the checkpoint is written every few answers, not after each (it grows with the
batch). So after a crash the files may hold whole lines the checkpoint does not list yet,
and at most one torn line at their end. :meth:`ProgressStore.open` reads the checkpoint,
takes the whole lines past its offsets as done too, and cuts the torn tail: every answer
on disk is kept, each custom_id is in the files exactly once, and the runner sends again
only what is not there.

Standard library only (the runner runs beside the engine).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gleaner.batch.records import Result, Usage, decode_output_line, encode_line, usage_of

OUTPUT_FILE = "output.jsonl"
ERROR_FILE = "errors.jsonl"
CHECKPOINT_FILE = "checkpoint.json"
LOCK_FILE = ".lock"
CHECKPOINT_VERSION = 1


class StoreError(RuntimeError):
    """The progress directory cannot be used (busy, or its files contradict the checkpoint)."""


@dataclass
class Progress:
    """What a batch has done so far; the checkpoint's counts."""

    total: int = 0
    succeeded: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    starts: int = 0
    complete: bool = False

    @property
    def done(self) -> int:
        return self.succeeded + self.failed

    def add(self, ok: bool, usage: Usage) -> None:
        if ok:
            self.succeeded += 1
        else:
            self.failed += 1
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens


@dataclass
class _Checkpoint:
    progress: Progress = field(default_factory=Progress)
    offsets: dict[str, int] = field(default_factory=lambda: {OUTPUT_FILE: 0, ERROR_FILE: 0})
    done: list[str] = field(default_factory=list)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old content or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(path)
    _fsync_directory(path.parent)


def _load_checkpoint(path: Path) -> _Checkpoint:
    if not path.exists():
        return _Checkpoint()
    raw = json.loads(path.read_bytes())
    if raw.get("version") != CHECKPOINT_VERSION:
        raise StoreError(f"{path}: unknown checkpoint version {raw.get('version')!r}")
    known = {k: raw["progress"][k] for k in asdict(Progress()) if k in raw["progress"]}
    return _Checkpoint(
        progress=Progress(**known),
        offsets={name: int(raw["offsets"][name]) for name in (OUTPUT_FILE, ERROR_FILE)},
        done=[str(x) for x in raw["done"]],
    )


def read_progress(directory: Path) -> Progress | None:
    """The progress a directory's checkpoint records (None before the first one); for readers
    other than the runner, which may lag the files by a few answers."""
    path = directory / CHECKPOINT_FILE
    return _load_checkpoint(path).progress if path.exists() else None


class ProgressStore:
    """The one writer of a progress directory: recover, record answers, checkpoint."""

    def __init__(
        self,
        directory: Path,
        *,
        checkpoint_every: int = 64,
        checkpoint_seconds: float = 2.0,
        lock_timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.checkpoint_every = checkpoint_every
        self.checkpoint_seconds = checkpoint_seconds
        self.lock_timeout = lock_timeout
        self._clock = clock
        self.progress = Progress()
        self._done: set[str] = set()
        self._done_order: list[str] = []
        self._offsets: dict[str, int] = {}
        self._fds: dict[str, int] = {}
        self._lock_fd: int | None = None
        self._since_checkpoint = 0
        self._last_checkpoint = 0.0

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> Progress:
        """Lock the directory, recover what the last attempt left, count this start."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock()
        cp = _load_checkpoint(self.directory / CHECKPOINT_FILE)
        self.progress = cp.progress
        self._done = set(cp.done)
        self._done_order = list(cp.done)
        for name in (OUTPUT_FILE, ERROR_FILE):
            self._offsets[name] = self._recover_file(name, cp.offsets.get(name, 0))
            self._fds[name] = os.open(
                self.directory / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
            )
        self.progress.starts += 1
        self.checkpoint()
        return self.progress

    def close(self) -> None:
        """Checkpoint what was recorded and release the directory."""
        if self._lock_fd is None:
            return
        self.checkpoint()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        os.close(self._lock_fd)
        self._lock_fd = None

    def __enter__(self) -> ProgressStore:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries ---------------------------------------------------------------------------

    def is_done(self, custom_id: str) -> bool:
        return custom_id in self._done

    @property
    def done_ids(self) -> frozenset[str]:
        return frozenset(self._done)

    # -- writes ----------------------------------------------------------------------------

    def record(self, result: Result) -> bool:
        """Append one answer (fsync-ed) unless its custom_id is already on disk.

        Returns whether it was written. Not thread-safe: the runner records from one thread.
        """
        if self._lock_fd is None:
            raise StoreError("the store is not open")
        if result.custom_id in self._done:
            return False
        name = OUTPUT_FILE if result.ok else ERROR_FILE
        data = encode_line(result.to_line())
        fd = self._fds[name]
        # One write call per line: a crash leaves a whole line or a torn tail, which
        # recovery cuts; never half a line in the middle of the file.
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        self._offsets[name] += len(data)
        self._done.add(result.custom_id)
        self._done_order.append(result.custom_id)
        self.progress.add(result.ok, usage_of(result.body))
        self._since_checkpoint += 1
        if (
            self._since_checkpoint >= self.checkpoint_every
            or self._clock() - self._last_checkpoint >= self.checkpoint_seconds
        ):
            self.checkpoint()
        return True

    def set_total(self, total: int) -> None:
        self.progress.total = total

    def mark_complete(self) -> None:
        self.progress.complete = True
        self.checkpoint()

    def checkpoint(self) -> None:
        """Write the checkpoint atomically (it names only answers already fsync-ed)."""
        doc: dict[str, Any] = {
            "version": CHECKPOINT_VERSION,
            "progress": asdict(self.progress),
            "offsets": dict(self._offsets),
            "done": self._done_order,
        }
        write_atomically(
            self.directory / CHECKPOINT_FILE, json.dumps(doc, separators=(",", ":")).encode()
        )
        self._since_checkpoint = 0
        self._last_checkpoint = self._clock()

    # -- internals -------------------------------------------------------------------------

    def _lock(self) -> None:
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        give_up = self._clock() + self.lock_timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock_fd = fd
                return
            except BlockingIOError:
                # The previous attempt's Pod may still be terminating on a shared volume.
                if self._clock() >= give_up:
                    os.close(fd)
                    raise StoreError(
                        f"{self.directory}: another runner holds {LOCK_FILE}"
                    ) from None
                time.sleep(0.5)

    def _recover_file(self, name: str, offset: int) -> int:
        """Take the whole lines past the checkpoint's offset as done; cut a torn tail.

        Returns the file's length after recovery.
        """
        path = self.directory / name
        if not path.exists():
            if offset:
                raise StoreError(f"{path} is missing but the checkpoint counts {offset} bytes")
            return 0
        size = path.stat().st_size
        if size < offset:
            raise StoreError(f"{path} is shorter ({size}) than the checkpoint says ({offset})")
        good = offset
        with path.open("rb") as f:
            f.seek(offset)
            for line in f:
                decoded = decode_output_line(line)
                if decoded is None or decoded[0] in self._done:
                    break
                custom_id, usage = decoded
                self._done.add(custom_id)
                self._done_order.append(custom_id)
                self.progress.add(name == OUTPUT_FILE, usage)
                good += len(line)
        if good < size:
            with path.open("r+b") as f:
                f.truncate(good)
                os.fsync(f.fileno())
        return good
