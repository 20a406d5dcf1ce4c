"""Thin torch shell: allocate vLLM's KV cache through the shim (UNVERIFIED: no torch and no
GPU where this was written; see docs/vllm-hook.md).

Contract: :func:`wrap_runner` wraps the pinned runner's ``initialize_kv_cache_tensors(self,
kv_cache_config, kernel_block_sizes)`` (vllm-project/vllm ``vllm/v1/worker/gpu_model_runner.py``
at 4e179065) so its allocations (``_allocate_kv_cache_tensors``: one ``torch.zeros(size,
int8)`` per KV tensor) come from a ``torch.cuda.MemPool`` over
``torch.cuda.memory.CUDAPluggableAllocator(shim, "gleaner_kv_malloc", "gleaner_kv_free")``,
then records each attention layer's :class:`pages.KvLayout` in :data:`LAYOUTS`. Only with
``tensor_parallel_size == 1`` and ``pipeline_parallel_size == 1`` (else the runner is left
alone: no layouts, no handles reported, nothing reclaimable). :func:`layout_of` is pure.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from gleaner.protocol.node import KV_FREE_SYMBOL, KV_MALLOC_SYMBOL
from gleaner.vllm_hook.pages import KvLayout
from gleaner.vllm_hook.shimapi import shim_path

log = logging.getLogger(__name__)

LAYOUTS: list[KvLayout] = []
"""The KV layer layouts of this process's engine (filled once the KV cache exists)."""
_POOL: list[Any] = []  # keeps the MemPool (and its allocator) alive for the process


def layout_of(
    data_ptr: int,
    shape: Sequence[int],
    strides: Sequence[int],
    element_size: int,
    num_blocks: int,
    kernel_blocks_per_block: int = 1,
) -> KvLayout | None:
    """The layout of one KV tensor; None when the block dimension is not unique."""
    nkb = num_blocks * kernel_blocks_per_block
    dims = [i for i, n in enumerate(shape) if n == nkb]
    if len(dims) != 1:
        return None
    return KvLayout(
        data_ptr, tuple(shape), tuple(strides), element_size, dims[0], kernel_blocks_per_block
    )


def wrap_runner(
    runner_cls: type, on_layouts: Callable[[list[KvLayout]], None] | None = None
) -> bool:
    original = getattr(runner_cls, "initialize_kv_cache_tensors", None)
    if original is None or getattr(original, "__gleaner_hook__", False):
        return original is not None

    def initialize_kv_cache_tensors(
        self: Any, kv_cache_config: Any, kernel_block_sizes: list[int]
    ) -> Any:
        par = self.vllm_config.parallel_config
        if par.tensor_parallel_size != 1 or par.pipeline_parallel_size != 1:
            log.warning("gleaner: tensor/pipeline parallel engine: KV cache left to vLLM")
            return original(self, kv_cache_config, kernel_block_sizes)
        torch: Any = importlib.import_module("torch")  # lazily: only in a real vLLM worker

        if not _POOL:
            alloc = torch.cuda.memory.CUDAPluggableAllocator(
                shim_path(), KV_MALLOC_SYMBOL, KV_FREE_SYMBOL
            )
            _POOL.extend([alloc, torch.cuda.MemPool(alloc.allocator())])
        with torch.cuda.use_mem_pool(_POOL[1]):
            kv = original(self, kv_cache_config, kernel_block_sizes)
        layouts: list[KvLayout] = []
        groups = kv_cache_config.kv_cache_groups
        f = 1
        if len(groups) == 1 and kernel_block_sizes:
            f = max(1, groups[0].kv_cache_spec.block_size // kernel_block_sizes[0])
        seen: set[int] = set()
        for t in kv.values():
            if not isinstance(t, torch.Tensor) or id(t) in seen:
                continue
            seen.add(id(t))
            lay = layout_of(
                t.data_ptr(), t.shape, t.stride(), t.element_size(), kv_cache_config.num_blocks, f
            )
            if lay is None:
                log.warning("gleaner: KV tensor %s has no unique block dim; no handles", t.shape)
                return kv
            layouts.append(lay)
        LAYOUTS[:] = layouts
        if on_layouts is not None:
            on_layouts(layouts)
        return kv

    initialize_kv_cache_tensors.__gleaner_hook__ = True  # type: ignore[attr-defined]
    runner_cls.initialize_kv_cache_tensors = initialize_kv_cache_tensors  # type: ignore[attr-defined]
    return True
