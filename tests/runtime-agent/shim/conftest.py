"""Fixtures for the shim tests: a Python process that drives the shim's exported KV-cache
allocator through ctypes (:class:`KvProcess`). ``shim_build``, ``sock_path`` and ``agent``
come from tests/conftest.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gleaner.testing.shim import PreloadedPython

# Runs in the child: `python -c DRIVER` with the shim LD_PRELOADed and the fake libcuda
# named by GLEANER_LIBCUDA. One JSON command per stdin line, one JSON reply per line.
DRIVER = r"""
import ctypes, json, os, sys
C = ctypes
shim = C.CDLL(None)  # the framework hook's way: the preloaded shim's exported symbols
fake = C.CDLL(os.environ["GLEANER_LIBCUDA"])
shim.gleaner_kv_malloc.restype = C.c_void_p
shim.gleaner_kv_malloc.argtypes = [C.c_ssize_t, C.c_int, C.c_void_p]
shim.gleaner_kv_free.restype = None
shim.gleaner_kv_free.argtypes = [C.c_void_p, C.c_ssize_t, C.c_int, C.c_void_p]
shim.gleaner_kv_page_bytes.restype = C.c_size_t
shim.gleaner_kv_generation.restype = C.c_uint64
shim.gleaner_kv_pages.restype = C.c_size_t
shim.gleaner_kv_pages.argtypes = [C.c_void_p, C.c_void_p, C.c_size_t]
fake.fake_cuda_mapping.restype = C.c_ulonglong
fake.fake_cuda_mapping.argtypes = [C.c_ulonglong, C.POINTER(C.c_int)]
fake.fake_cuda_set_device_bytes.argtypes = [C.c_size_t]
fake.fake_cuda_fail_map.argtypes = [C.c_ulonglong, C.c_int]

def pages(cap):
    va, st = (C.c_uint64 * max(cap, 1))(), (C.c_uint8 * max(cap, 1))()
    n = shim.gleaner_kv_pages(va, st, cap)
    k = min(n, cap)
    return {"total": n, "va": list(va[:k]), "state": list(st[:k])}

def counts():
    c = (C.c_long * 4)()
    fake.fake_cuda_vmm_counts(C.byref(c, 0), C.byref(c, 8), C.byref(c, 16), C.byref(c, 24))
    return {"allocs": c[0], "maps": c[1], "reserved": c[2], "used": c[3]}

def mapping(va):
    acc = C.c_int()
    return {"handle": fake.fake_cuda_mapping(va, C.byref(acc)), "access": acc.value}

for line in sys.stdin:
    a = json.loads(line)
    op = a["op"]
    if op == "malloc":
        out = {"ptr": shim.gleaner_kv_malloc(a["size"], a.get("device", 0), None) or 0}
    elif op == "free":
        shim.gleaner_kv_free(a["ptr"], a.get("size", 0), 0, None)
        out = {}
    elif op == "pages":
        out = pages(a.get("cap", 4096))
    elif op == "generation":
        out = {"generation": shim.gleaner_kv_generation()}
    elif op == "page_bytes":
        out = {"page_bytes": shim.gleaner_kv_page_bytes()}
    elif op == "counts":
        out = counts()
    elif op == "mapping":
        out = mapping(a["va"])
    elif op == "device_bytes":
        fake.fake_cuda_set_device_bytes(a["bytes"])
        out = {}
    elif op == "fail_map":
        fake.fake_cuda_fail_map(a["va"], a["n"])
        out = {}
    else:
        out = {"error": "unknown op " + op}
    print(json.dumps(out), flush=True)
"""


class KvProcess(PreloadedPython):
    """A Python process with the shim preloaded over the fake libcuda, driven by commands."""

    def __init__(
        self, tmp: Path, *, role: str, socket_path: Path, extra_env: dict[str, str] | None = None
    ) -> None:
        super().__init__(tmp, DRIVER, socket_path=socket_path, role=role, env=extra_env)

    def call(self, op: str, timeout: float = 10.0, **args: int) -> dict[str, Any]:
        out = self.request({"op": op, **args}, timeout)
        if "error" in out:
            raise RuntimeError(out["error"])
        return out

    def malloc(self, size: int, device: int = 0) -> int:
        return int(self.call("malloc", size=size, device=device)["ptr"])

    def free(self, ptr: int) -> None:
        self.call("free", ptr=ptr)

    def pages(self) -> list[tuple[int, int]]:
        r = self.call("pages")
        return list(zip(r["va"], r["state"], strict=True))

    def generation(self) -> int:
        return int(self.call("generation")["generation"])

    def counts(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.call("counts").items()}

    def mapping(self, va: int) -> tuple[int, bool]:
        r = self.call("mapping", va=va)
        return int(r["handle"]), bool(r["access"])


@pytest.fixture
def kv_process(tmp_path: Path, sock_path: Path) -> Iterator[Callable[..., KvProcess]]:
    """A factory: ``kv_process(role="offline", extra_env={...})``; closed after the test."""
    made: list[KvProcess] = []

    def make(role: str = "offline", extra_env: dict[str, str] | None = None) -> KvProcess:
        kp = KvProcess(tmp_path, role=role, socket_path=sock_path, extra_env=extra_env)
        made.append(kp)
        return kp

    yield make
    for kp in made:
        kp.close()
