"""ctypes binding to the shim's KV page API (docs/vllm-hook.md, /work contract "Shim C API").

Contract: :func:`load` returns a :class:`ShimKv` over the ``gleaner_kv_*`` symbols of the
shim already in this process (``LD_PRELOAD``: found through ``dlopen(NULL)``), else of
``ENV_SHIM_PATH`` (default ``SHIM_PATH``; both of :mod:`gleaner.protocol.node`), else None.
:meth:`ShimKv.pages` reads ``gleaner_kv_pages`` and :meth:`ShimKv.epochs`
``gleaner_kv_page_epochs`` (per page, how many times it was reclaimed; None from a shim
without that symbol), each with a buffer grown until the count fits (pages can appear
between the size probe and the read). :class:`KvPages` is the surface the adapter needs;
tests provide it with a fake too.
"""

from __future__ import annotations

import ctypes
import os
from typing import Protocol

from gleaner.protocol.node import ENV_SHIM_PATH, SHIM_PATH


class KvPages(Protocol):
    """What the adapter reads from the shim."""

    def page_bytes(self) -> int: ...

    def generation(self) -> int: ...

    def pages(self) -> list[tuple[int, int]]:
        """(page VA, state) in address order; state 0 backed, 1 quarantined."""
        ...

    def epochs(self) -> list[int] | None:
        """Per page, in :meth:`pages` order, how many times it was reclaimed; None when
        the shim cannot tell (then a page reclaimed and restored between two reads is
        invisible)."""
        ...


class ShimKv:
    """The shim's page API through ctypes."""

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self.path = path
        self._page_bytes = lib.gleaner_kv_page_bytes
        self._page_bytes.restype = ctypes.c_size_t
        self._page_bytes.argtypes = []
        self._generation = lib.gleaner_kv_generation
        self._generation.restype = ctypes.c_uint64
        self._generation.argtypes = []
        self._pages = lib.gleaner_kv_pages
        self._pages.restype = ctypes.c_size_t
        self._pages.argtypes = [
            ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_uint8),
            ctypes.c_size_t,
        ]
        self._epochs = getattr(lib, "gleaner_kv_page_epochs", None)
        if self._epochs is not None:
            self._epochs.restype = ctypes.c_size_t
            self._epochs.argtypes = [ctypes.POINTER(ctypes.c_uint32), ctypes.c_size_t]

    def page_bytes(self) -> int:
        return int(self._page_bytes())

    def generation(self) -> int:
        return int(self._generation())

    def pages(self) -> list[tuple[int, int]]:
        cap = max(16, int(self._pages(None, None, 0)))
        while True:
            va = (ctypes.c_uint64 * cap)()
            st = (ctypes.c_uint8 * cap)()
            n = int(self._pages(va, st, cap))
            if n <= cap:
                return list(zip(va[:n], st[:n], strict=True))
            cap = n * 2

    def epochs(self) -> list[int] | None:
        fn = self._epochs
        if fn is None:
            return None
        cap = max(16, int(fn(None, 0)))
        while True:
            ep = (ctypes.c_uint32 * cap)()
            n = int(fn(ep, cap))
            if n <= cap:
                return ep[:n]
            cap = n * 2


def shim_path(env: dict[str, str] | None = None) -> str:
    e = os.environ if env is None else env
    return e.get(ENV_SHIM_PATH, SHIM_PATH)


def load(env: dict[str, str] | None = None) -> ShimKv | None:
    """The shim's KV API in this process, or None where there is none."""
    try:
        here = ctypes.CDLL(None)
        if hasattr(here, "gleaner_kv_pages"):
            return ShimKv(here, "<preloaded>")
    except OSError:
        pass
    path = shim_path(env)
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    if not hasattr(lib, "gleaner_kv_pages"):
        return None
    return ShimKv(lib, path)
