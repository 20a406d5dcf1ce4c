"""Scheduler configuration: one typed, documented object, built once and passed in.

Contract. :class:`SchedulerConfig` names the filter and score plugins to run (by their
registry names: ``FILTER_PLUGINS`` and ``SCORE_PLUGINS``, which ``gleaner.scheduler.registry``
maps to classes), the score weights, the performance model's knobs (``ModelConfig``:
``min_pair_overlap`` is the pair-overlap admission threshold), and the bounds that keep a
cycle fast on large clusters. Validation happens at construction, so a bad config fails
where it is built, not mid-cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gleaner.perfmodel.model import ModelConfig

FILTER_PLUGINS: frozenset[str] = frozenset(
    {
        "NodeUsable",
        "NodeExcluded",
        "GPUSelector",
        "GPUFree",
        "Instrumented",
        "PairOverlap",
        "MemoryFit",
        "ThroughputSLA",
    }
)
"""Names of the filter plugins ``gleaner.scheduler.registry`` registers (a test holds them
equal). The names live here, not in the registry, because the plugins import this config:
validating against the registry would make the two import each other."""
SCORE_PLUGINS: frozenset[str] = frozenset({"SLAFit", "KeepAligned", "PackNodes"})
"""Names of the score plugins the registry registers (see ``FILTER_PLUGINS``)."""

DEFAULT_NODE_FILTERS: tuple[str, ...] = ("NodeUsable", "NodeExcluded", "GPUSelector", "GPUFree")
DEFAULT_SET_FILTERS: tuple[str, ...] = ("Instrumented", "PairOverlap", "MemoryFit", "ThroughputSLA")
DEFAULT_FILTERS: tuple[str, ...] = DEFAULT_NODE_FILTERS + DEFAULT_SET_FILTERS
DEFAULT_SCORES: Mapping[str, float] = MappingProxyType(
    {"SLAFit": 1.0, "KeepAligned": 1.0, "PackNodes": 1.0}
)
DEFAULT_SLA_MARGIN = 0.15
"""SLAFit's default margin: placements admitted within 0.15 of their SLA miss far more
windows than the others (docs/benchmarks.md, "The throughput SLA")."""


@dataclass(frozen=True)
class SchedulerConfig:
    """How the scheduler filters and scores (see the module docstring)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """Performance-model knobs; ``model.min_pair_overlap`` is the pair-overlap threshold."""
    filters: tuple[str, ...] = DEFAULT_FILTERS
    """Filter plugins, in the order a node is checked (its reason is the first failure)."""
    scores: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_SCORES))
    """Score plugin name -> weight (>= 0); the total is the weighted mean, 0..100."""
    min_memory_factor: float = 0.0
    """MemoryFit: a GPU set needs a predicted P_memory strictly above this."""
    exact_batch: int = 4
    """Multi-GPU: candidates evaluated with the exact joint-memory model per round,
    best estimated score first; the best feasible one of the first round that has any wins."""
    max_sets_per_node: int = 512
    """Aligned GPU sets enumerated per node and set size (bounds 16-GPU nodes; an
    8-GPU node has at most 255 sets of all sizes together, so it is never cut)."""
    sla_step: float = 0.1
    """Queue order buckets SLAs by this step so that priority decides among similar ones."""
    sla_margin: float = DEFAULT_SLA_MARGIN
    """SLAFit: a set predicted less than this above the job's SLA scores 0, so a set with
    that much margin is preferred to a best fit at the edge (0: best fit only)."""
    explain: bool = True
    """Compute per-node-class reasons for unschedulable jobs."""

    def __post_init__(self) -> None:
        unknown = [f for f in self.filters if f not in FILTER_PLUGINS]
        if unknown:
            raise ValueError(f"unknown filter plugin(s) {unknown}; known: {sorted(FILTER_PLUGINS)}")
        if len(set(self.filters)) != len(self.filters):
            raise ValueError("a filter plugin is listed twice")
        unknown = [s for s in self.scores if s not in SCORE_PLUGINS]
        if unknown:
            raise ValueError(f"unknown score plugin(s) {unknown}; known: {sorted(SCORE_PLUGINS)}")
        if any(w < 0 for w in self.scores.values()):
            raise ValueError("score weights must be >= 0")
        if not 0.0 <= self.min_memory_factor < 1.0:
            raise ValueError("min_memory_factor must be within [0, 1)")
        if self.exact_batch < 1 or self.max_sets_per_node < 1:
            raise ValueError("exact_batch and max_sets_per_node must be >= 1")
        if self.sla_step < 0:
            raise ValueError("sla_step must be >= 0")
        if not 0.0 <= self.sla_margin < 1.0:
            raise ValueError("sla_margin must be within [0, 1)")
