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

import json
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gleaner.api import Placement
from gleaner.api.contract import BIAS_KEY
from gleaner.perfmodel.admission import corrected, risk_factor

NODE_LEVEL = ""
"""The job-class key of a node's class-independent entry."""
ALL_NODES = ""
"""The residual pool of the whole table (node names are never empty)."""


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
    risk_target: float | None = None
    """Risk-aware admission: the probability a window must meet the SLA with (e.g. 0.99);
    :meth:`BiasTable.factor` then also multiplies by the ``1 - target`` quantile of past
    residuals (``gleaner.perfmodel.admission.risk_factor``). None: the mean rule."""
    residuals_kept: int = 256
    """Residuals (observed / corrected prediction) kept per node and for the whole table."""
    min_residuals: int = 20
    """Residuals a node needs before its own spread is used (else the table's)."""

    def __post_init__(self) -> None:
        if not 0 < self.alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        if not 0 < self.min_ratio <= 1 <= self.max_ratio:
            raise ValueError("need 0 < min_ratio <= 1 <= max_ratio")
        if self.min_observations < 1:
            raise ValueError("min_observations must be >= 1")
        if self.risk_target is not None and not 0 < self.risk_target < 1:
            raise ValueError("risk_target must be in (0, 1)")
        if self.residuals_kept < 1 or self.min_residuals < 1:
            raise ValueError("residuals_kept and min_residuals must be >= 1")


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
        residuals: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        self.config = config or BiasConfig()
        self._entries: dict[tuple[str, str], BiasEntry] = dict(entries or {})
        keep = self.config.residuals_kept
        self._residuals: dict[str, deque[float]] = {
            node: deque(values, maxlen=keep) for node, values in (residuals or {}).items()
        }

    def __len__(self) -> int:
        return len(self._entries)

    def copy(self) -> BiasTable:
        """An independent table with the same entries and residuals: a decision taken on
        another thread reads it while this one keeps learning."""
        return BiasTable(
            self.config, self._entries, {node: list(v) for node, v in self._residuals.items()}
        )

    def __iter__(self) -> Iterator[tuple[tuple[str, str], BiasEntry]]:
        return iter(sorted(self._entries.items()))

    def entry(self, node: str, job_class: str = NODE_LEVEL) -> BiasEntry:
        return self._entries.get((node, job_class), BiasEntry())

    def observe(self, node: str, job_class: str, observed: float, predicted: float) -> bool:
        """Learn from one measurement; False when it carried no information (ignored)."""
        cfg = self.config
        if predicted < cfg.min_predicted or observed < 0:
            return False
        # The residual is taken against the prediction as corrected before this observation:
        # the spread the admission rule must cover is the one left after the correction.
        residual = observed / max(cfg.min_predicted, predicted * self._ratio(node, job_class))
        for pool_key in (node, ALL_NODES):
            pool = self._residuals.setdefault(pool_key, deque(maxlen=cfg.residuals_kept))
            pool.append(residual)
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
        """The multiplier for a prediction of a ``job_class`` job on ``node``: the learned
        ratio, times the risk quantile (and at most 1) when ``config.risk_target`` is set."""
        ratio = self._ratio(node, job_class)
        target = self.config.risk_target
        if target is None:
            return ratio
        # With a risk target a correction never raises a prediction above the model's own:
        # the target is a bound from below, and an upward correction is what it guards.
        return min(1.0, ratio * risk_factor(self.residuals(node), target, 1))

    def residuals(self, node: str) -> list[float]:
        """The spread to judge ``node`` by: its own residuals once it has ``min_residuals``,
        else the whole table's (empty: none known)."""
        own = self._residuals.get(node)
        if own is not None and len(own) >= self.config.min_residuals:
            return list(own)
        pool = self._residuals.get(ALL_NODES)
        if pool is None or len(pool) < self.config.min_residuals:
            return []
        return list(pool)

    def _ratio(self, node: str, job_class: str) -> float:
        if job_class != NODE_LEVEL:
            specific = self._entries.get((node, job_class))
            if specific is not None and specific.observations >= self.config.min_observations:
                return specific.ratio
        general = self._entries.get((node, NODE_LEVEL))
        return general.ratio if general is not None else 1.0

    def corrected(self, node: str, job_class: str, predicted: float) -> float:
        """``predicted`` times the factor, clipped to [0, 1] (admission's ``corrected``)."""
        return float(corrected(predicted, self.factor(node, job_class)))

    def nodes(self) -> set[str]:
        return {node for node, _ in self._entries}

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": [
                {"node": n, "jobClass": c, "ratio": e.ratio, "observations": e.observations}
                for (n, c), e in sorted(self._entries.items())
            ],
            "residuals": {n: [round(r, 6) for r in v] for n, v in sorted(self._residuals.items())},
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
            residuals = {
                str(n): [float(r) for r in v] for n, v in (data.get("residuals") or {}).items()
            }
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"malformed bias table: {exc}") from exc
        return cls(config, entries, residuals)


def from_configmap(body: Mapping[str, Any] | None, config: BiasConfig | None = None) -> BiasTable:
    """The table stored in the operator's ConfigMap ``body`` (its ``BIAS_KEY``; an empty
    table when there is none): the operator reads its own back with it, the dashboard and
    ``gleaner place`` the operator's.

    Raises ValueError when the stored document does not parse.
    """
    if body is None:
        return BiasTable(config)
    text = (body.get("data") or {}).get(BIAS_KEY)
    if not text:
        return BiasTable(config)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"malformed bias table: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError("malformed bias table: not an object")
    return BiasTable.from_json(data, config)


def raw_prediction(placement: Placement) -> float:
    """The model's uncorrected prediction for a placement (its recorded factors' product):
    what a table is fed against, never the corrected ``throughput_fraction``."""
    return placement.compute * placement.memory * placement.multi_gpu


def feed(table: BiasTable, placement: Placement, cls: str, observed: float) -> bool:
    """Learn from one observed window of a job on ``placement`` (the operator's SLA monitor
    and the simulator's); False when ignored."""
    return table.observe(placement.node, cls, observed, raw_prediction(placement))
