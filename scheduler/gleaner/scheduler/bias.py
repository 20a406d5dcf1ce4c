"""Prediction bias correction: learn observed/predicted ratios per node and job class.

Contract. The performance model can be systematically off on a node (a noisy
neighbour, a throttled GPU, an online service the trace under-represents). Each time
the SLA monitor measures a placed job, the caller feeds the observed throughput
fraction and the *raw* model prediction for that placement (never an already
corrected one, or the correction would chase itself) into :meth:`BiasTable.observe`.

The table keeps, per node and per (node, job class), an exponentially weighted moving
average of the ratio r = observed / predicted:

    ratio <- (1 - alpha) * ratio + alpha * clamp(r, min_ratio, max_ratio),  ratio_0 = 1

Bounded: a single wild measurement moves the ratio by at most
alpha * (max_ratio - min_ratio), and the ratio always stays within
[min_ratio, max_ratio]. With a constant true ratio r* the error after N observations
is |1 - r*| * (1 - alpha)^N (e.g. 0.2 * 0.7^10 = 0.6% for a node 20% slower than
modelled).

:meth:`BiasTable.factor` answers the multiplier to apply to a later prediction for a
job of a class on a node: the (node, class) ratio once it has ``min_observations``,
else the node's ratio, else 1. The scheduler multiplies the predicted product by it
before comparing with the SLA, so a node that under-delivers stops receiving SLAs it
cannot meet. The table is a small mutable object (it learns); ``to_json``/``from_json``
let the operator persist it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

NODE_LEVEL = ""
"""The job-class key of a node's class-independent entry."""


@dataclass(frozen=True)
class BiasConfig:
    """How fast and how far the correction moves."""

    alpha: float = 0.3
    """EWMA weight of a new observation, (0, 1]."""
    min_ratio: float = 0.5
    """Lowest ratio kept (observations are clamped to it)."""
    max_ratio: float = 1.1
    """Highest ratio kept: the model is trusted to be optimistic more than pessimistic."""
    min_observations: int = 3
    """Observations before a (node, class) entry overrides the node-level entry."""
    min_predicted: float = 0.01
    """Predictions below this carry no information about the ratio and are ignored."""

    def __post_init__(self) -> None:
        if not 0 < self.alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        if not 0 < self.min_ratio <= 1 <= self.max_ratio:
            raise ValueError("need 0 < min_ratio <= 1 <= max_ratio")
        if self.min_observations < 1:
            raise ValueError("min_observations must be >= 1")


@dataclass(frozen=True)
class BiasEntry:
    ratio: float = 1.0
    observations: int = 0


class BiasTable:
    """Per-node and per-(node, job class) observed/predicted ratios (see module docstring)."""

    def __init__(
        self,
        config: BiasConfig | None = None,
        entries: Mapping[tuple[str, str], BiasEntry] | None = None,
    ) -> None:
        self.config = config or BiasConfig()
        self._entries: dict[tuple[str, str], BiasEntry] = dict(entries or {})

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[tuple[tuple[str, str], BiasEntry]]:
        return iter(sorted(self._entries.items()))

    def entry(self, node: str, job_class: str = NODE_LEVEL) -> BiasEntry:
        return self._entries.get((node, job_class), BiasEntry())

    def observe(self, node: str, job_class: str, observed: float, predicted: float) -> bool:
        """Learn from one measurement; False when it carried no information (ignored)."""
        cfg = self.config
        if predicted < cfg.min_predicted or observed < 0:
            return False
        r = min(cfg.max_ratio, max(cfg.min_ratio, observed / predicted))
        keys = [(node, NODE_LEVEL)]
        if job_class != NODE_LEVEL:
            keys.append((node, job_class))
        for key in keys:
            old = self._entries.get(key, BiasEntry())
            ratio = (1 - cfg.alpha) * old.ratio + cfg.alpha * r
            self._entries[key] = BiasEntry(ratio, old.observations + 1)
        return True

    def factor(self, node: str, job_class: str = NODE_LEVEL) -> float:
        """The multiplier for a prediction of a ``job_class`` job on ``node``."""
        if job_class != NODE_LEVEL:
            specific = self._entries.get((node, job_class))
            if specific is not None and specific.observations >= self.config.min_observations:
                return specific.ratio
        general = self._entries.get((node, NODE_LEVEL))
        return general.ratio if general is not None else 1.0

    def corrected(self, node: str, job_class: str, predicted: float) -> float:
        """``predicted`` times the factor, clipped to [0, 1]."""
        return min(1.0, max(0.0, predicted * self.factor(node, job_class)))

    def nodes(self) -> set[str]:
        return {node for node, _ in self._entries}

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": [
                {"node": n, "jobClass": c, "ratio": e.ratio, "observations": e.observations}
                for (n, c), e in sorted(self._entries.items())
            ]
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], config: BiasConfig | None = None) -> BiasTable:
        try:
            entries = {
                (str(e["node"]), str(e.get("jobClass", NODE_LEVEL))): BiasEntry(
                    float(e["ratio"]), int(e["observations"])
                )
                for e in data.get("entries", [])
            }
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed bias table: {exc}") from exc
        return cls(config, entries)
