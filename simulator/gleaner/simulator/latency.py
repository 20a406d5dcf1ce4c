"""Context-aware iteration latency of an LLM serving engine (one continuous-batching step).

Contract: for a batch of requests, each processing ``P_i`` new tokens on top of ``C_i``
cached context tokens,

    Latency = k1·ΣP + k2·Σ P_i·(P_i + C_i) + k3·ΣP + k4·Σ(P_i + C_i) + k5    (seconds)

- k1: dense GEMM time per new token (2 · parameters FLOPs at a model-FLOPs utilization);
- k2: attention time per (query, key) pair (4 · layers · hidden FLOPs per pair);
- k3: per-token non-GEMM work (norms, RoPE, activations, sampling bookkeeping);
- k4: KV-cache read per context token (KV bytes per token / achieved HBM bandwidth);
- k5: per-iteration fixed cost (reading all weights once, plus launch overhead).

``LLAMA31_8B_H100`` holds the shipped coefficients; docs/simulator.md derives them from the
public H100 SXM datasheet and the Llama-3.1-8B configuration and checks them against
published vLLM TTFT/TPOT figures. Pure arithmetic, vectorized over numpy arrays.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from gleaner.api.units import GIB

FloatArray = npt.NDArray[np.float64]


class LatencyModel(BaseModel):
    """Coefficients of the iteration latency model, plus the model's memory footprint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    k1: float = Field(ge=0, description="Seconds per new token (dense GEMMs).")
    k2: float = Field(ge=0, description="Seconds per (new token, attended token) pair.")
    k3: float = Field(ge=0, description="Seconds per new token (non-GEMM work).")
    k4: float = Field(ge=0, description="Seconds per context token read (KV cache).")
    k5: float = Field(ge=0, description="Seconds per iteration (weights read, launches).")
    kv_bytes_per_token: int = Field(gt=0, description="KV-cache bytes per token.")
    weights_gib: float = Field(gt=0, description="Resident weights, GiB.")

    def batch(self, new_tokens: FloatArray, context: FloatArray) -> float:
        """Latency (s) of one iteration over requests with ``new_tokens`` on ``context``."""
        p = new_tokens
        total = p + context
        return float(
            (self.k1 + self.k3) * p.sum()
            + self.k2 * float(np.dot(p, total))
            + self.k4 * total.sum()
            + self.k5
        )

    def step(self, sum_p: float, sum_pc: float, sum_total: float) -> float:
        """Latency from batch aggregates: ΣP, Σ P·(P+C) and Σ(P+C)."""
        return (self.k1 + self.k3) * sum_p + self.k2 * sum_pc + self.k4 * sum_total + self.k5

    def prefill(self, tokens: float) -> float:
        """Latency of a lone prefill of ``tokens`` prompt tokens (no cached context)."""
        return self.step(tokens, tokens * tokens, tokens)

    def decode(self, batch: int, mean_context: float) -> float:
        """Latency of one decode step of ``batch`` requests with ``mean_context`` tokens."""
        total = batch * (mean_context + 1.0)
        return self.step(float(batch), total, total)

    def kv_gib(self, tokens: float) -> float:
        return tokens * self.kv_bytes_per_token / GIB


# Llama-3.1-8B (8.03e9 parameters, 32 layers, hidden 4096, 8 KV heads × 128 dims, BF16) on
# an H100 SXM 80GB (989 TFLOPS dense BF16, 3.35 TB/s HBM3). Derivation in docs/simulator.md.
LLAMA31_8B_H100 = LatencyModel(
    k1=2.95e-5,  # 2·8.03e9 FLOP / (989e12 FLOP/s · 0.55 MFU)
    k2=1.0e-9,  # 4·32·4096 FLOP per pair / (989e12 · 0.5); causal masking halves prefill pairs
    k3=2.0e-6,  # elementwise kernels and activation traffic (~6 MB/token at ~3 TB/s)
    k4=6.5e-8,  # 131,072 KV bytes per token / (3.35e12 B/s · 0.6)
    k5=6.3e-3,  # 16.06e9 weight bytes / (3.35e12 B/s · 0.8) + 0.3 ms launch/graph overhead
    kv_bytes_per_token=2 * 32 * 8 * 128 * 2,
    weights_gib=16.06e9 / GIB,
)

MODELS: dict[str, LatencyModel] = {"llama-3.1-8b-h100": LLAMA31_8B_H100}
