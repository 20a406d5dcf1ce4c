"""The simulator's engine model: the one in ``gleaner.perfmodel.engine``, under its old names.

Contract: :class:`LatencyModel` is :class:`gleaner.perfmodel.engine.EngineModel` (iteration
latency ``k1·ΣP + k2·Σ P_i·(P_i + C_i) + k3·ΣP + k4·Σ(P_i + C_i) + k5``, KV bytes per token,
KV block size, offline throughput against memory), and ``LLAMA31_8B_H100`` / ``MODELS`` are
its shipped parameters. The runtime agent's simulated backend and the vLLM test fake use the
same model, so the simulator, the agent without a GPU and the tests agree on every constant.
A scenario may override the coefficients (``latency:`` in the node scenario).
"""

from __future__ import annotations

from gleaner.perfmodel.engine import ENGINES, LLAMA31_8B_H100, EngineModel

LatencyModel = EngineModel
"""The simulator's name for the engine model (scenario files call it ``latency``)."""

MODELS: dict[str, LatencyModel] = dict(ENGINES)

__all__ = ["LLAMA31_8B_H100", "MODELS", "LatencyModel"]
