"""Reporting to the agent without blocking the engine.

Contracts:

- :class:`Reporter` — the engine thread :meth:`Reporter.offer` s a value (cheap: stores it
  and wakes a thread); a background thread turns the latest value into encoded frames with
  ``build`` and sends them through ``send``, at most once per ``min_interval_s``
  (``GLEANER_KV_REPORT_MS``, default 1000 ms), only when the frames differ from the last
  ones sent on this connection (a reconnect, seen as a new ``session()``, resends). A
  failed send is retried on the next offer or tick. Building (the OFFLINE_HANDLES table
  can be large) happens on that thread, never on the engine's.
- :class:`HandleEncoder` — a :class:`memory.Snapshot` → encoded frames (RESET first) for
  GPU index 0 of the hook's HELLO, page groups computed once per page table. The format is
  ``GLEANER_KV_REPORT_FORMAT`` (:func:`report_format`, read once at construction):
  ``"groups"`` (default) — OFFLINE_PAGE_GROUPS through :func:`pages.encode_page_groups`
  (~30× fewer bytes than OFFLINE_HANDLES, ~100× cheaper for the agent to decode, and it
  names the quarantined pages, which a restarted agent adopts; docs/benchmarks.md);
  ``"handles"`` — OFFLINE_HANDLES through :func:`pages.encode_handles` (for an agent older
  than OFFLINE_PAGE_GROUPS). :func:`handle_messages` is the OFFLINE_HANDLES reference (message
  objects, ~50× slower).
- :class:`OnlineMemoryPolicy` — whether an online engine reports ONLINE_MEMORY now: on the
  first call, when used bytes moved by at least one page (2 MiB) since the last report, or
  when ``period_s`` (1 s) passed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from gleaner.protocol import wire as p
from gleaner.protocol.node import ENV_KV_REPORT_FORMAT, ENV_KV_REPORT_MS
from gleaner.vllm_hook import pages as pg
from gleaner.vllm_hook.memory import Snapshot

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_REPORT_MS = 1000
PAGE_BYTES = 2 << 20


def report_interval_s(env: Mapping[str, str] | None = None) -> float:
    e = os.environ if env is None else env
    try:
        ms = int(e.get(ENV_KV_REPORT_MS, DEFAULT_REPORT_MS))
    except ValueError:
        ms = DEFAULT_REPORT_MS
    return max(0, ms) / 1000.0


FORMATS = ("handles", "groups")
DEFAULT_FORMAT = "groups"


def report_format(env: Mapping[str, str] | None = None) -> str:
    """``GLEANER_KV_REPORT_FORMAT`` (``handles`` or ``groups``); anything else: the default."""
    e = os.environ if env is None else env
    fmt = e.get(ENV_KV_REPORT_FORMAT, DEFAULT_FORMAT).strip().lower()
    return fmt if fmt in FORMATS else DEFAULT_FORMAT


def handle_messages(snap: Snapshot, gpu: int = 0) -> list[p.Message]:
    entries = pg.handle_entries(snap.table, snap.requests, snap.block_size, snap.quarantined)
    return list(pg.handle_frames(gpu, entries))


class HandleEncoder:
    """See the module docstring (one per reporter thread: it caches the last table's groups)."""

    def __init__(self, gpu: int = 0, fmt: str | None = None) -> None:
        self.gpu = gpu
        self.format = report_format() if fmt is None else fmt
        if self.format not in FORMATS:
            raise ValueError(f"unknown KV report format {self.format!r}")
        self._encode = pg.encode_page_groups if self.format == "groups" else pg.encode_handles
        self._table: pg.PageTable | None = None
        self._groups: pg.PageGroups | None = None

    def groups(self, table: pg.PageTable) -> pg.PageGroups:
        if self._groups is None or table is not self._table:
            self._table, self._groups = table, pg.page_groups(table)
        return self._groups

    def __call__(self, snap: Snapshot) -> list[bytes]:
        return self._encode(
            snap.table,
            self.groups(snap.table),
            snap.requests,
            snap.block_size,
            snap.quarantined,
            self.gpu,
        )


def encoded(msg: p.Message) -> list[bytes]:
    """One message's frame (the online reporter's build)."""
    return [msg.encode(0)]


class Reporter(Generic[T]):
    """See the module docstring."""

    def __init__(
        self,
        build: Callable[[T], list[bytes]],
        send: Callable[[list[bytes]], bool],
        session: Callable[[], int],
        min_interval_s: float = DEFAULT_REPORT_MS / 1000.0,
        tick_s: float = 1.0,
    ) -> None:
        self.build = build
        self.send = send
        self.session = session
        self.min_interval_s = min_interval_s
        self.tick_s = tick_s
        self.sent_frames = 0
        self.builds = 0
        self._latest: T | None = None
        self._version = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gleaner-kv-report", daemon=True)
        self._thread.start()

    def offer(self, value: T) -> None:
        with self._lock:
            self._latest = value
            self._version += 1
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        last_frames: list[bytes] | None = None
        last_session = -1
        last_version = -1
        last_at = -1e9
        while not self._stop.is_set():
            self._wake.wait(self.tick_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            wait = last_at + self.min_interval_s - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                return
            with self._lock:
                value, version = self._latest, self._version
            session = self.session()
            if value is None or (version == last_version and session == last_session):
                continue
            try:
                frames = self.build(value)
            except Exception:  # a bad snapshot must not kill the reporter
                log.exception("gleaner: building a report failed")
                last_version = version
                continue
            self.builds += 1
            if frames == last_frames and session == last_session:
                last_version = version
                continue
            if self.send(frames):
                self.sent_frames += len(frames)
                last_frames, last_session, last_version = frames, session, version
                last_at = time.monotonic()


@dataclass
class OnlineMemoryPolicy:
    """See the module docstring."""

    step_bytes: int = PAGE_BYTES
    period_s: float = 1.0
    _last_used: int | None = None
    _last_at: float = 0.0

    def due(self, now: float, used: int) -> bool:
        if (
            self._last_used is None
            or abs(used - self._last_used) >= self.step_bytes
            or now - self._last_at >= self.period_s
        ):
            self._last_used = used
            self._last_at = now
            return True
        return False


def online_usage(sched: object) -> tuple[int, int] | None:
    """(kv_used_bytes, kv_reserved_bytes) of a vLLM scheduler, or None if not readable:
    used blocks (all but the free ones and the null block) × bytes per block; reserved =
    the KV tensors' total size (``kv_cache_config.kv_cache_tensors[*].size``)."""
    try:
        pool = sched.kv_cache_manager.block_pool  # type: ignore[attr-defined]
        cfg = sched.kv_cache_config  # type: ignore[attr-defined]
        reserved = sum(int(t.size) for t in cfg.kv_cache_tensors)
        total = int(pool.num_gpu_blocks)
        used_blocks = max(0, total - 1 - int(pool.get_num_free_blocks()))
    except (AttributeError, TypeError):
        return None
    per_block = reserved // total if total else 0
    return used_blocks * per_block, reserved
