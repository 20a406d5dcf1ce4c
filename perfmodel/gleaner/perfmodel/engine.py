"""One model of an LLM serving engine: iteration latency, KV use per token, throughput vs memory.

Contract. :class:`EngineModel` is a frozen dataclass of named, documented parameters and the
pure arithmetic over them that every modeled engine in Gleaner uses:

- **online latency per iteration** (one continuous-batching step): for a batch of requests,
  each processing ``P_i`` new tokens on top of ``C_i`` cached context tokens,

      Latency = k1·ΣP + k2·Σ P_i·(P_i + C_i) + k3·ΣP + k4·Σ(P_i + C_i) + k5    (seconds)

  (:meth:`EngineModel.step`, :meth:`EngineModel.batch`, :meth:`EngineModel.prefill`,
  :meth:`EngineModel.decode`);
- **KV use per token**: ``kv_bytes_per_token`` bytes, allocated in blocks of ``block_tokens``
  tokens (vLLM's paged KV cache; :meth:`EngineModel.block_bytes`, :meth:`EngineModel.blocks_for`);
- **offline throughput against memory** (:meth:`EngineModel.batch_throughput`): with ``kv``
  GiB of KV cache a continuous-batching engine keeps ``B = min(max_seqs, kv / (prompt +
  output/2) tokens)`` requests in flight; finishing ``B`` requests takes ``output`` decode
  steps of batch ``B`` plus ``B`` prefills riding along them (chunked prefill, no extra
  ``k5``), so ``tokens/s = B·output / (output·decode(B) + B·(prefill(prompt) − k5))``;
- **memory an engine holds**: ``resident_gib`` = weights + ``runtime_gib`` (activations, CUDA
  graphs) before any KV cache, and ``kv_gib(tokens)`` for its KV cache
  (:attr:`EngineModel.resident_gib`, :meth:`EngineModel.kv_gib`); the cost of recomputing a
  lost token (:meth:`EngineModel.recompute_per_token`);
- **online load** (:meth:`EngineModel.online_load`): the busy fraction and the KV tokens an
  online engine holds at a request rate (Little's law over the latency above).

:data:`LLAMA31_8B_H100` holds the shipped parameters; docs/simulator.md derives them from the
public H100 SXM datasheet and the Llama-3.1-8B configuration and checks them against
published vLLM TTFT/TPOT figures.

Why here. Three shells model an engine: the node- and cluster-level simulator
(``gleaner.simulator``), the runtime agent's simulated backend
(``gleaner.runtime_agent.simulated``, which may not import the simulator: it sits a layer
below it) and the test fake of vLLM's block pool (``gleaner.testing.vllm_fake``). The lowest
layer all three import is ``gleaner.perfmodel``, which already holds the pure performance
arithmetic; ``gleaner.api`` is the wrong place (it holds the API's shapes and contract names,
not numbers about an engine). Pure: numbers in, numbers out; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

GIB = float(1 << 30)
ONLINE_LOAD_ITERATIONS = 100
"""Most fixed-point steps of :meth:`EngineModel.online_load` (about ten reach
:data:`ONLINE_LOAD_TOLERANCE` at the shipped parameters)."""
ONLINE_LOAD_TOLERANCE = 1e-10
""":meth:`EngineModel.online_load` stops when no busy fraction moved by more than this."""
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class EngineModel:
    """Parameters of one model on one GPU (see the module docstring for the formulas)."""

    k1: float
    """Seconds per new token, dense GEMMs: 2 · parameters FLOP / (peak FLOP/s · MFU)."""
    k2: float
    """Seconds per (new token, attended token) pair: 4 · layers · hidden FLOP / achieved
    FLOP/s."""
    k3: float
    """Seconds per new token of non-GEMM work (norms, RoPE, activations, sampling)."""
    k4: float
    """Seconds per context token read: KV bytes per token / achieved HBM bandwidth."""
    k5: float
    """Seconds per iteration: all weights read once / achieved HBM bandwidth, plus launch and
    graph overhead."""
    kv_bytes_per_token: int
    """KV-cache bytes per token: 2 (K and V) · layers · KV heads · head dim · bytes per
    element."""
    weights_gib: float
    """Resident weights, GiB."""
    block_tokens: int = 16
    """Tokens per KV block: vLLM's default ``block_size`` (CUDA backends)."""
    runtime_gib: float = 3.0429
    """Memory an engine holds beside its weights and KV cache, GiB: activations, CUDA graphs,
    allocator slack. The default is the simulator's long-standing 18.0 GiB of an 8B model
    under vLLM with CUDA graphs, less that model's 14.957 GiB of weights (a hair under, so
    that 76 − 18 GiB still holds the same whole number of 2 MiB KV blocks)."""

    def __post_init__(self) -> None:
        if min(self.k1, self.k2, self.k3, self.k4, self.k5) < 0:
            raise ValueError("latency coefficients must be >= 0")
        if self.kv_bytes_per_token <= 0 or self.weights_gib <= 0 or self.block_tokens <= 0:
            raise ValueError("kv_bytes_per_token, weights_gib and block_tokens must be > 0")
        if self.runtime_gib < 0:
            raise ValueError("runtime_gib must be >= 0")

    # -- online latency per iteration --------------------------------------------------------

    def step(self, sum_p: float, sum_pc: float, sum_total: float) -> float:
        """Latency (s) from batch aggregates: ΣP, Σ P·(P+C) and Σ(P+C)."""
        return (self.k1 + self.k3) * sum_p + self.k2 * sum_pc + self.k4 * sum_total + self.k5

    def batch(self, new_tokens: FloatArray, context: FloatArray) -> float:
        """Latency (s) of one iteration over requests with ``new_tokens`` on ``context``."""
        total = new_tokens + context
        return self.step(
            float(new_tokens.sum()), float(np.dot(new_tokens, total)), float(total.sum())
        )

    def prefill(self, tokens: float) -> float:
        """Latency of a lone prefill of ``tokens`` prompt tokens (no cached context)."""
        return self.step(tokens, tokens * tokens, tokens)

    def decode(self, batch: int, mean_context: float) -> float:
        """Latency of one decode step of ``batch`` requests with ``mean_context`` tokens."""
        total = batch * (mean_context + 1.0)
        return self.step(float(batch), total, total)

    def recompute_per_token(self, context_tokens: float) -> float:
        """Seconds to recompute one token of a prompt of ``context_tokens`` tokens: the
        per-token terms of a prefill (``k1 + k3 + k4 + k2 · context``), without ``k5``
        (recomputation rides along iterations that run anyway)."""
        return self.k1 + self.k3 + self.k4 + self.k2 * context_tokens

    # -- KV use per token --------------------------------------------------------------------

    @property
    def block_bytes(self) -> int:
        """Bytes of one KV block."""
        return self.block_tokens * self.kv_bytes_per_token

    def blocks_for(self, tokens: int) -> int:
        """KV blocks ``tokens`` tokens occupy (the last one partly)."""
        return -(-tokens // self.block_tokens)

    def kv_gib(self, tokens: float) -> float:
        """GiB of KV cache ``tokens`` tokens hold."""
        return tokens * self.kv_bytes_per_token / GIB

    # -- memory an engine holds --------------------------------------------------------------

    @property
    def resident_gib(self) -> float:
        """Memory an engine holds before any KV cache: weights + runtime, GiB."""
        return self.weights_gib + self.runtime_gib

    # -- online load: request rate to busy fraction and KV in flight ------------------------

    def online_load(
        self,
        rate_per_s: FloatArray,
        prompt_tokens: float | FloatArray,
        output_tokens: float,
        max_seqs: int = 256,
    ) -> tuple[FloatArray, FloatArray]:
        """(busy fraction, KV tokens held) of an online engine serving ``rate_per_s``
        requests/s of ``prompt_tokens`` prompt and ``output_tokens`` output tokens (means;
        ``rate_per_s`` and ``prompt_tokens`` elementwise, broadcast).

        A request is in flight for ``R = prefill(prompt) + output · decode(b, prompt +
        output/2)`` seconds, ``b`` the batch while the engine is busy. Requests in flight:
        ``N = rate · R`` (Little's law), Poisson distributed (independent arrivals, each in
        flight for its own time); the engine is busy while one is: ``busy = 1 − e^(−N)``,
        and ``b = N / busy`` (at least 1, at most ``max_seqs``). ``R`` is the smallest
        fixed point, reached from below (``b = 1``). KV tokens held: ``min(N, max_seqs) ·
        (prompt + output/2)`` (each running request's prompt and half its output on average;
        waiting ones hold none).
        """
        rate = np.maximum(np.asarray(rate_per_s, dtype=np.float64), 0.0)
        p = np.asarray(prompt_tokens, dtype=np.float64)
        o = float(output_tokens)
        context = p + o / 2.0
        prefill = (self.k1 + self.k3 + self.k4) * p + self.k2 * p * p + self.k5  # prefill(p)
        # decode(b, context) = k5 + b · per_seq (the per-request terms of one decode step)
        per_seq = self.k1 + self.k3 + (self.k2 + self.k4) * (context + 1.0)
        held = rate * (prefill + o * (self.k5 + per_seq))
        busy = -np.expm1(-held)
        for _ in range(ONLINE_LOAD_ITERATIONS):
            batch = np.where(held > 1e-12, held / np.maximum(busy, 1e-300), 1.0)
            batch = np.clip(batch, 1.0, float(max_seqs))
            held = rate * (prefill + o * (self.k5 + batch * per_seq))
            nxt = -np.expm1(-held)
            done = held.size == 0 or float(np.max(np.abs(nxt - busy))) < ONLINE_LOAD_TOLERANCE
            busy = nxt
            if done:
                break
        busy_out: FloatArray = busy
        # Requests beyond max_seqs wait for a slot and hold no KV cache yet.
        tokens: FloatArray = np.minimum(held, float(max_seqs)) * context
        return busy_out, tokens

    # -- offline throughput against memory ---------------------------------------------------

    def batch_throughput(
        self, kv_gib: float, prompt_tokens: float, output_tokens: float, max_seqs: int
    ) -> float:
        """Steady-state output tokens/s of a batch job with ``kv_gib`` of KV cache."""
        p, o = prompt_tokens, output_tokens
        tokens = kv_gib * GIB / self.kv_bytes_per_token
        b = min(float(max_seqs), tokens / (p + o / 2.0))
        if b < 1.0:
            return 0.0
        decode = self.decode(int(b), p + o / 2.0)
        prefill = self.prefill(p) - self.k5  # prompts ride along decode steps (chunked prefill)
        return b * o / (o * decode + b * prefill)


# Llama-3.1-8B (8.03e9 parameters, 32 layers, hidden 4096, 8 KV heads × 128 dims, BF16) on
# an H100 SXM 80GB (989 TFLOPS dense BF16, 3.35 TB/s HBM3). Derivation in docs/simulator.md.
LLAMA31_8B_H100 = EngineModel(
    k1=2.95e-5,  # 2·8.03e9 FLOP / (989e12 FLOP/s · 0.55 MFU)
    k2=1.0e-9,  # 4·32·4096 FLOP per pair / (989e12 · 0.5); causal masking halves prefill pairs
    k3=2.0e-6,  # elementwise kernels and activation traffic (~6 MB/token at ~3 TB/s)
    k4=6.5e-8,  # 131,072 KV bytes per token / (3.35e12 B/s · 0.6)
    k5=6.3e-3,  # 16.06e9 weight bytes / (3.35e12 B/s · 0.8) + 0.3 ms launch/graph overhead
    kv_bytes_per_token=2 * 32 * 8 * 128 * 2,
    weights_gib=16.06e9 / GIB,
)

ENGINES: dict[str, EngineModel] = {"llama-3.1-8b-h100": LLAMA31_8B_H100}
"""Shipped engine models by name."""
