"""Free GPU memory from NVML (nvidia-ml-py's ``pynvml``), for the agent's memory decisions.

Contract. :class:`NvmlFreeMemory` maps the agent's GPU indices to the free bytes NVML reports
for the device with that index's UUID (the inventory's, i.e. nvidia-smi's), so index
renumbering by ``CUDA_VISIBLE_DEVICES`` or container device lists cannot mix GPUs up.

- :meth:`NvmlFreeMemory.open` initializes NVML once and looks every inventory UUID up; it
  returns None, after one log line, when NVML is not there (no ``pynvml``, no
  ``libnvidia-ml.so.1``, no driver): free memory then stays unknown for the whole run.
- :meth:`NvmlFreeMemory.free_bytes` returns ``nvmlDeviceGetMemoryInfo(handle).free`` of the
  GPU, cached for ``ttl_s`` (100 ms by default: a burst of reservation decisions costs one
  query; a decision never acts on a reading older than that), or None when it is unknown —
  a UUID NVML does not know, or a query that failed (each logged once per GPU; a failed
  query is retried at the next call, never cached).
- :meth:`NvmlFreeMemory.running_pids` returns the pids of the GPU's compute and graphics
  processes (``nvmlDeviceGetComputeRunningProcesses`` / ``GraphicsRunningProcesses``), never
  cached, or None when NVML cannot tell (logged once per GPU) — the agent's own view of who
  uses the GPU, independent of the shims (docs/agent.md, "Uninstrumented processes").
- :meth:`NvmlFreeMemory.close` shuts NVML down.

NVML answers from the driver in microseconds, so queries run inline on the agent's loop.
Verified against a fake ``libnvidia-ml.so.1`` (``tests/runtime-agent/fake_nvml.c``) only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from gleaner.api import GpuInfo

log = logging.getLogger("gleaner.runtime_agent.nvml")

DEFAULT_TTL_S = 0.1


class NvmlFreeMemory:
    """See the module docstring."""

    def __init__(
        self,
        nvml: Any,
        handles: dict[int, Any],
        *,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nvml = nvml
        self._handles = handles
        self.ttl_s = ttl_s
        self._clock = clock
        self._cache: dict[int, tuple[float, int]] = {}
        self._warned: set[int] = set()
        self._warned_procs: set[int] = set()
        self.queries = 0
        """NVML memory queries made (cache misses)."""

    @classmethod
    def open(
        cls,
        inventory: Sequence[GpuInfo],
        *,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> NvmlFreeMemory | None:
        """NVML initialized and the inventory's GPUs looked up; None (logged) without NVML."""
        try:
            import pynvml  # type: ignore[import-untyped]
        except ImportError:
            log.warning("nvidia-ml-py is not installed: free GPU memory stays unknown")
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            log.warning("NVML unavailable (%s): free GPU memory stays unknown", exc)
            return None
        handles: dict[int, Any] = {}
        for gpu in inventory:
            try:
                handles[gpu.index] = pynvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
            except pynvml.NVMLError as exc:
                log.warning(
                    "NVML does not know GPU %s (%s): %s; its free memory stays unknown",
                    gpu.index,
                    gpu.uuid,
                    exc,
                )
        log.info("NVML free memory for GPUs %s", sorted(handles))
        return cls(pynvml, handles, ttl_s=ttl_s, clock=clock)

    def free_bytes(self, gpu: int) -> int | None:
        """Free bytes of ``gpu`` now (cached up to ``ttl_s``); None when unknown."""
        handle = self._handles.get(gpu)
        if handle is None:
            return None
        now = self._clock()
        cached = self._cache.get(gpu)
        if cached is not None and now - cached[0] < self.ttl_s:
            return cached[1]
        self.queries += 1
        try:
            free = int(self._nvml.nvmlDeviceGetMemoryInfo(handle).free)
        except self._nvml.NVMLError as exc:
            self._cache.pop(gpu, None)
            if gpu not in self._warned:
                self._warned.add(gpu)
                log.warning("NVML memory query for GPU %s failed: %s", gpu, exc)
            return None
        self._cache[gpu] = (now, free)
        return free

    def running_pids(self, gpu: int) -> list[int] | None:
        """Pids of the processes using ``gpu`` now (compute and graphics); None: unknown."""
        handle = self._handles.get(gpu)
        if handle is None:
            return None
        nvml = self._nvml
        try:
            procs = [
                *nvml.nvmlDeviceGetComputeRunningProcesses(handle),
                *nvml.nvmlDeviceGetGraphicsRunningProcesses(handle),
            ]
        except nvml.NVMLError as exc:
            if gpu not in self._warned_procs:
                self._warned_procs.add(gpu)
                log.warning("NVML process query for GPU %s failed: %s", gpu, exc)
            return None
        return sorted({int(proc.pid) for proc in procs})

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)
