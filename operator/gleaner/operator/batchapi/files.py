"""The Batch API's own file store: a directory on the operator's volume (I/O).

Contract (docs/batch.md, "The Batch API"). Layout under the root, per namespace::

    <namespace>/files/<file-id>          the bytes, written to a temporary name, fsync-ed,
                                         renamed (a reader never sees half a file)
    <namespace>/files/<file-id>.json     its FileRecord
    <namespace>/batches/<batch-id>.json  its BatchRecord (rewritten atomically)

A namespace's files are seen only through that namespace (the caller's, checked by the
API). The store is one process's: the operator Deployment runs one replica serving the
API; two replicas on one ReadWriteMany volume would race on the batch records.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import IO

from gleaner.operator.batchapi.objects import (
    BatchRecord,
    FileRecord,
    batch_id_of,
    file_id_of,
    valid_batch_id,
    valid_file_id,
)

CHUNK = 1 << 20


class TooLargeError(Exception):
    """An upload over the store's size limit."""


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class FileStore:
    """Files and batch records under ``root`` (see the module docstring)."""

    def __init__(self, root: Path, max_file_bytes: int) -> None:
        self.root = root
        self.max_file_bytes = max_file_bytes

    def _dir(self, namespace: str, kind: str) -> Path:
        path = self.root / namespace / kind
        path.mkdir(parents=True, exist_ok=True)
        return path

    # files

    def add_file(
        self, namespace: str, filename: str, purpose: str, chunks: Iterator[bytes], now: int
    ) -> FileRecord:
        """Store the bytes of ``chunks`` as a new file; :class:`TooLargeError` past the limit."""
        directory = self._dir(namespace, "files")
        file_id = file_id_of(secrets.token_hex(12))
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    size += len(chunk)
                    if size > self.max_file_bytes:
                        raise TooLargeError(f"a file may hold at most {self.max_file_bytes} bytes")
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            Path(tmp).replace(directory / file_id)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        record = FileRecord(file_id, namespace, filename, purpose, size, now)
        _atomic_write(directory / f"{file_id}.json", json.dumps(asdict(record)).encode())
        return record

    def file(self, namespace: str, file_id: str) -> FileRecord | None:
        if not valid_file_id(file_id):
            return None
        path = self._dir(namespace, "files") / f"{file_id}.json"
        try:
            return FileRecord(**json.loads(path.read_text()))
        except FileNotFoundError:
            return None

    def files(self, namespace: str) -> list[FileRecord]:
        directory = self._dir(namespace, "files")
        return [FileRecord(**json.loads(p.read_text())) for p in directory.glob("file-*.json")]

    def open_content(self, namespace: str, file_id: str) -> IO[bytes] | None:
        if self.file(namespace, file_id) is None:
            return None
        return (self._dir(namespace, "files") / file_id).open("rb")

    # batches

    def new_batch_id(self) -> str:
        return batch_id_of(secrets.token_hex(12))

    def put_batch(self, record: BatchRecord) -> None:
        path = self._dir(record.namespace, "batches") / f"{record.id}.json"
        _atomic_write(path, json.dumps(asdict(record)).encode())

    def batch(self, namespace: str, batch_id: str) -> BatchRecord | None:
        if not valid_batch_id(batch_id):
            return None
        path = self._dir(namespace, "batches") / f"{batch_id}.json"
        try:
            return BatchRecord(**json.loads(path.read_text()))
        except FileNotFoundError:
            return None

    def batches(self, namespace: str) -> list[BatchRecord]:
        directory = self._dir(namespace, "batches")
        return [BatchRecord(**json.loads(p.read_text())) for p in directory.glob("batch_*.json")]

    def namespaces(self) -> list[str]:
        """The namespaces that hold files or batches."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def update_batch(self, record: BatchRecord, **changes: object) -> BatchRecord:
        updated = replace(record, **changes)  # type: ignore[arg-type]
        self.put_batch(updated)
        return updated
