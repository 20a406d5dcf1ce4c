"""The vLLM fake's default block sizes are the shared engine model's."""

from __future__ import annotations

from gleaner.perfmodel.engine import LLAMA31_8B_H100
from gleaner.testing import vllm_fake as v


def test_default_sizes_come_from_the_engine_model() -> None:
    s = v.EngineScheduler(num_blocks=8)
    assert s.block_size == LLAMA31_8B_H100.block_tokens == v.Scheduler().block_size
    assert s.kv_cache_config.kv_cache_tensors[0].size == 8 * LLAMA31_8B_H100.block_bytes
    small = v.EngineScheduler(num_blocks=8, block_size=4, bytes_per_block=64)
    assert small.block_size == 4 and small.kv_cache_config.kv_cache_tensors[0].size == 512
