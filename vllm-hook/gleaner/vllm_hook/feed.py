"""InvalidationFeed: the framework side of the agent protocol (INVALIDATE_BLOCKS in,
OFFLINE_HANDLES / ONLINE_MEMORY out through :meth:`InvalidationFeed.send` or, already
encoded, :meth:`InvalidationFeed.send_frames`).

Contract: connects to the agent socket, says HELLO with its role (``Role.FRAMEWORK`` for
the offline hook, ``Role.ONLINE`` for an online engine), this process's pid (how the agent
routes RECLAIM to the shim in the same process) and its GPU (:func:`gpu_identity`), and collects
every INVALIDATE_BLOCKS frame from a background thread; :meth:`InvalidationFeed.drain`
returns and clears the pending ``request id → block ids`` map. It never blocks the
engine: if the agent is missing the feed stays empty and retries in the background.
:func:`merge` is the pure part (how batches combine).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping

from gleaner.protocol import wire as p
from gleaner.protocol.node import ENV_GPU_INDICES

log = logging.getLogger(__name__)


def gpu_identity(env: Mapping[str, str] | None = None) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The GPU this engine uses (vLLM with tensor_parallel_size 1: the first visible one),
    as the shim names it in HELLO: UUID from ``NVIDIA_VISIBLE_DEVICES``, node index from
    ``GLEANER_GPU_INDICES``; either may be empty."""
    e = os.environ if env is None else env
    first = e.get("NVIDIA_VISIBLE_DEVICES", "").split(",")[0].strip()
    uuids = (first,) if first.startswith("GPU-") else ()
    idx = e.get(ENV_GPU_INDICES, "").split(",")[0].strip()
    indices = (int(idx),) if idx.lstrip("-").isdigit() else ()
    return uuids, indices


def merge(into: dict[str, set[int]], batches: Iterable[p.InvalidateBlocks]) -> dict[str, set[int]]:
    """Fold INVALIDATE_BLOCKS messages into a request → block-id-set map (in place)."""
    for msg in batches:
        into.setdefault(msg.request_id, set()).update(msg.block_ids)
    return into


class InvalidationFeed:
    """Background reader of INVALIDATE_BLOCKS frames for one engine process."""

    def __init__(
        self,
        socket_path: str,
        job: str = "",
        retry_s: float = 1.0,
        *,
        role: p.Role = p.Role.FRAMEWORK,
        gpu_uuids: tuple[str, ...] = (),
        gpu_indices: tuple[int, ...] = (),
    ) -> None:
        self.socket_path = socket_path
        self.job = job
        self.retry_s = retry_s
        self.role = role
        self.gpu_uuids = gpu_uuids
        self.gpu_indices = gpu_indices
        self.sessions = 0
        """Connections made so far (a sender resends everything after a reconnect)."""
        self._send_lock = threading.Lock()
        self._pending: dict[str, set[int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gleaner-kv-feed", daemon=True)
        self._thread.start()

    def drain(self) -> dict[str, set[int]]:
        with self._lock:
            out, self._pending = self._pending, {}
        return out

    def put(self, batch: Mapping[str, Iterable[int]]) -> None:
        """Queue invalidations directly (used when the agent is in-process)."""
        with self._lock:
            for rid, ids in batch.items():
                self._pending.setdefault(rid, set()).update(ids)

    def send(self, msgs: Iterable[p.Message]) -> bool:
        """Send on the current connection (any thread); False when not connected or it failed."""
        with self._send_lock:
            sock = self._sock
            if sock is None or not self.connected.is_set():
                return False
            try:
                for m in msgs:
                    p.send_message(sock, m)
            except OSError as exc:
                log.debug("gleaner agent feed: send failed: %s", exc)
                return False
        return True

    def send_frames(self, frames: Iterable[bytes]) -> bool:
        """Send already encoded frames (one ``sendall``); False when not connected or it
        failed."""
        with self._send_lock:
            sock = self._sock
            if sock is None or not self.connected.is_set():
                return False
            try:
                sock.sendall(b"".join(frames))
            except OSError as exc:
                log.debug("gleaner agent feed: send failed: %s", exc)
                return False
        return True

    def close(self) -> None:
        self._stop.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._session()
            except (OSError, p.ProtocolError) as exc:
                log.debug("gleaner agent feed: %s", exc)
            self.connected.clear()
            self._stop.wait(self.retry_s)

    def _session(self) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(self.socket_path)
            hello = p.Hello(
                pid=os.getpid(),
                role=self.role,
                gpu_uuids=self.gpu_uuids,
                gpu_indices=self.gpu_indices,
                job=self.job,
            )
            with self._send_lock:
                p.send_message(sock, hello)
                self._sock = sock
                self.sessions += 1
                self.connected.set()
            decoder = p.FrameDecoder()
            while not self._stop.is_set():
                batch = p.recv_messages(sock, decoder)
                if batch is None:
                    return
                inval = [m for m in batch if isinstance(m, p.InvalidateBlocks)]
                if inval:
                    with self._lock:
                        merge(self._pending, inval)
                if any(isinstance(m, p.Heartbeat) for m in batch):
                    self.send([p.Heartbeat(mono_ns=time.monotonic_ns(), pid=os.getpid())])
