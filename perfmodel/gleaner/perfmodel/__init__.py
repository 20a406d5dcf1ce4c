"""Performance model: predicted throughput of an offline job on harvested GPUs (pure).

The public facade; the modules behind it are:

- ``profile``: ``JobProfile``, the memory–throughput curve (interpolation, P_memory of
  weighted memory values);
- ``profiling``: measuring a profile (KV budgets to run, the isotonic fit, the deficit
  coefficient from swing runs, goodness of fit; docs/profiling.md);
- ``sketch``: ``MemoryHistogram``, the joint harvestable-memory sketch with its error bound;
- ``summary``: ``NodeSummary`` (a node's window in seconds and counts; merges by
  addition);
- ``frames``: the trace file format (docs/architecture.md) as a pandas frame
  (``validate_trace_frame``, ``summarize_samples``);
- ``model``: ``ModelConfig``, ``Prediction``, ``predict`` and the factor functions
  (scalar per GPU set, vectorized per node and per subset);
- ``fleet``: ``GpuFleet``, single-GPU scoring over thousands of GPUs at once;
- ``sources``: the ``TraceSource`` protocol, file and NodeTrace sources;
- ``parse_duration`` (for ``--window``) is ``gleaner.api.units``'s, re-exported here.

Nothing here does network I/O or imports a Kubernetes/Prometheus client (import-linter
holds that); the Prometheus source lives in ``gleaner.operator.sources.prometheus``.
"""

from gleaner.api.units import parse_duration
from gleaner.perfmodel.fleet import GpuFleet, memory_factors_single
from gleaner.perfmodel.frames import (
    OPTIONAL_COLUMNS,
    TRACE_COLUMNS,
    summarize_samples,
    validate_trace_frame,
)
from gleaner.perfmodel.model import (
    BASELINE_MODEL,
    ModelConfig,
    Prediction,
    compute_factor,
    compute_factors,
    memory_factor,
    multi_gpu_factor,
    pair_scores,
    predict,
    subset_factors,
)
from gleaner.perfmodel.profile import JobProfile
from gleaner.perfmodel.sketch import DEFAULT_MAX_STATES, DEFAULT_STEP_GIB, MemoryHistogram
from gleaner.perfmodel.sources import (
    FileTraceSource,
    NodeTraceListSource,
    TraceSource,
    read_trace_frame,
)
from gleaner.perfmodel.summary import GpuEvents, GpuSpec, NodeSummary, TraceFormatError

__all__ = [
    "BASELINE_MODEL",
    "DEFAULT_MAX_STATES",
    "DEFAULT_STEP_GIB",
    "OPTIONAL_COLUMNS",
    "TRACE_COLUMNS",
    "FileTraceSource",
    "GpuEvents",
    "GpuFleet",
    "GpuSpec",
    "JobProfile",
    "MemoryHistogram",
    "ModelConfig",
    "NodeSummary",
    "NodeTraceListSource",
    "Prediction",
    "TraceFormatError",
    "TraceSource",
    "compute_factor",
    "compute_factors",
    "memory_factor",
    "memory_factors_single",
    "multi_gpu_factor",
    "pair_scores",
    "parse_duration",
    "predict",
    "read_trace_frame",
    "subset_factors",
    "summarize_samples",
    "validate_trace_frame",
]
