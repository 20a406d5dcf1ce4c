"""The plugin registry: names -> plugin classes (kube-scheduler's ``registry.go``).

``SchedulerConfig.filters`` and ``SchedulerConfig.scores`` refer to plugins by these
names; :func:`build_plugins` instantiates the configured ones, in configured order.
"""

from __future__ import annotations

from dataclasses import dataclass

from gleaner.scheduler.config import SchedulerConfig
from gleaner.scheduler.framework import NodeFilter, ScorePlugin, SetFilter
from gleaner.scheduler.plugins.gpu_free import GPUFree
from gleaner.scheduler.plugins.gpu_selector import GPUSelector
from gleaner.scheduler.plugins.instrumented import Instrumented
from gleaner.scheduler.plugins.keep_aligned import KeepAligned
from gleaner.scheduler.plugins.memory_fit import MemoryFit
from gleaner.scheduler.plugins.node_excluded import NodeExcluded
from gleaner.scheduler.plugins.node_usable import NodeUsable
from gleaner.scheduler.plugins.pack_nodes import PackNodes
from gleaner.scheduler.plugins.pair_overlap import PairOverlap
from gleaner.scheduler.plugins.sla_fit import SLAFit
from gleaner.scheduler.plugins.throughput_sla import ThroughputSLA

FILTERS: dict[str, type[NodeFilter] | type[SetFilter]] = {
    cls.name: cls
    for cls in (
        NodeUsable,
        NodeExcluded,
        GPUSelector,
        GPUFree,
        Instrumented,
        PairOverlap,
        MemoryFit,
        ThroughputSLA,
    )
}
SCORES: dict[str, type[ScorePlugin]] = {cls.name: cls for cls in (SLAFit, KeepAligned, PackNodes)}


@dataclass(frozen=True)
class Plugins:
    """The configured plugins of one scheduler, in order."""

    node_filters: tuple[NodeFilter, ...]
    set_filters: tuple[SetFilter, ...]
    scores: tuple[tuple[ScorePlugin, float], ...]
    """(plugin, weight) with weight > 0."""

    @property
    def pair_threshold(self) -> float | None:
        for f in self.set_filters:
            if f.pair_threshold is not None:
                return f.pair_threshold
        return None


def build_plugins(config: SchedulerConfig) -> Plugins:
    node_filters: list[NodeFilter] = []
    set_filters: list[SetFilter] = []
    for name in config.filters:
        plugin = FILTERS[name](config)
        if isinstance(plugin, NodeFilter):
            node_filters.append(plugin)
        else:
            set_filters.append(plugin)
    scores = tuple((SCORES[n](config), float(w)) for n, w in config.scores.items() if w > 0)
    return Plugins(tuple(node_filters), tuple(set_filters), scores)
