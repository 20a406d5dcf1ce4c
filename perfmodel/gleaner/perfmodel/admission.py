"""Admission rules of the performance model, decided and worded in one place (pure).

Contract. Two rules make a GPU set admissible for a job; everything that judges a set
(``predict``, the scheduler's ``ThroughputSLA`` and ``PairOverlap`` filters, the
scheduler's per-node explanations) calls these functions, so a set is never admitted by
one caller and refused by another, and every caller words a verdict the same way:

- **SLA**: the bias-corrected product ``clip(compute * memory * multi * bias, 0, 1)``
  must reach the job's throughput SLA (:func:`reaches_sla`, with a 1e-12 tolerance so
  that a product equal to the SLA up to rounding passes);
- **risk** (when a target probability is configured): the product is first multiplied by
  :func:`risk_factor`, the ``1 - target`` quantile of how past windows came out relative
  to their (bias-corrected) prediction, so the SLA rule then admits a set only where the
  predicted probability that a window meets the SLA (:func:`meet_probability`) is at least
  the target; without enough past windows the factor is 1 (the mean rule);
- **pair overlap**: every GPU pair of a multi-GPU set must have online busy
  overlap / union >= ``ModelConfig.min_pair_overlap`` (:func:`pairs_admissible` on
  P_multi, the minimum over the pairs; an unmeasured pair scores 0).

The decisions are vectorized (numpy arrays in, boolean arrays out); the wording
functions (:func:`sla_reason`, :func:`pair_reasons`) give one line per verdict, e.g.
``predicted 0.16 < SLA 0.60 (compute 0.50)``, ``predicted 0.52 >= SLA 0.50 (bias
0.80)``, ``GPU pair 0-1: busy overlap 0.50 < 0.95 (admission)``. docs/perfmodel.md
and docs/scheduler.md show them in context.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel.summary import NodeSummary

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

SLA_EPS = 1e-12
"""Tolerance of both rules: a value equal to its bound up to float rounding passes."""

DEFAULT_RISK_TARGET = 0.95
"""The probability a window's online load must stay under the admission forecast with (the
load spread of ``worst_hours``): the simulator's default ``risk_target`` and the operator's.
0.95, not 0.9: at 0.9 the default scenario meets 98.8% of SLA windows at the gate efficiency
its node level measures, at 0.95 99.3%, and 99.05% on twelve seeds none was chosen on
(docs/benchmarks.md, "The throughput SLA")."""
ADMISSION_HORIZON_H = 7.0
"""The hours ahead a placement is admitted over (``worst_hours``): the simulator's default
``forecast_horizon_h`` and the operator's. Seven hours, not a whole run: a job that would
not meet a later peak is moved before it (``gleaner.scheduler.move``), so a longer horizon
only keeps GPUs idle at quiet hours (docs/benchmarks.md, "The throughput SLA")."""
SPREAD_KEPT = 512
"""Past windows' busy ratios a :class:`LoadSpread` keeps per node (four times as many
cluster-wide)."""
SPREAD_MIN = 20
"""Windows a node needs before its own spread is used (the cluster's until then)."""


def corrected(raw: npt.ArrayLike, bias: npt.ArrayLike) -> FloatArray:
    """The bias-corrected predicted fraction: ``raw * bias`` clipped to [0, 1]."""
    value = np.asarray(raw, dtype=np.float64) * np.asarray(bias, dtype=np.float64)
    # Two ufuncs rather than np.clip: its Python wrapper dominates on the small batches the
    # scheduler judges per placement.
    return np.asarray(np.minimum(np.maximum(value, 0.0), 1.0), dtype=np.float64)


def reaches_sla(product: npt.ArrayLike, sla: float) -> BoolArray:
    """The SLA rule: True where the (corrected) ``product`` reaches ``sla``."""
    return np.asarray(np.asarray(product, dtype=np.float64) >= sla - SLA_EPS, dtype=bool)


def risk_factor(residuals: Sequence[float], target: float, min_samples: int = 20) -> float:
    """The ``1 - target`` empirical quantile of ``residuals`` (observed / predicted of past
    windows), at most 1; 1 with fewer than ``min_samples`` residuals (no spread known).

    ``product * risk_factor(...) >= sla`` holds exactly when at least ``target`` of the past
    windows, replayed around ``product``, would have met ``sla``.
    """
    if not 0 < target < 1:
        raise ValueError("target must be in (0, 1)")
    values = np.asarray(residuals, dtype=np.float64).reshape(-1)
    values = values[np.isfinite(values) & (values >= 0)]
    if values.size < max(1, min_samples):
        return 1.0
    # "lower": a quantile that is one of the residuals, so the bound is never interpolated
    # above a window that actually happened.
    return float(min(1.0, np.quantile(values, 1.0 - target, method="lower")))


def load_scale(ratios: Sequence[float], target: float, min_samples: int = 20) -> float:
    """How much busier than forecast the online load may be in a window, at probability
    ``target``: the ``target`` quantile of past windows' observed / forecast online-busy
    share, at least 1; 1 with fewer than ``min_samples`` windows (no spread known).

    ``ratios`` are forecast / observed (the inverse), so the rule is :func:`risk_factor`'s
    own quantile: a window as busy as ``forecast * load_scale(...)`` is exceeded by at most
    ``1 - target`` of the past windows. ``gleaner.perfmodel.diurnal.worst_hours`` scales
    the busy share of each GPU by it before the model predicts.
    """
    return 1.0 / max(1e-9, risk_factor(ratios, target, min_samples))


class LoadSpread:
    """The spread of past windows' online load around its forecast, learned per node.

    Each node keeps its last ``kept`` busy ratios (forecast / observed busy share of a
    window and GPU, ``gleaner.perfmodel.diurnal.busy_ratios``) and the cluster its last
    ``4 * kept``; a node with fewer than ``min_samples`` of its own is judged by the
    cluster's (:meth:`ratios`). :meth:`scale` is :func:`load_scale` of those ratios: what
    ``worst_hours`` multiplies each GPU's busiest hour by. Memory is bounded by the deques.
    """

    def __init__(self, kept: int = SPREAD_KEPT, min_samples: int = SPREAD_MIN) -> None:
        if kept < 1 or min_samples < 1:
            raise ValueError("kept and min_samples must be >= 1")
        self.kept = kept
        self.min_samples = min_samples
        self._by_node: dict[str, deque[float]] = {}
        self._all: deque[float] = deque(maxlen=kept * 4)
        # scale() per (node, target), kept until the ratios it read change: a scheduling
        # pass asks it for every node, and most nodes report nothing new between passes.
        self._scales: dict[tuple[str, float], tuple[tuple[int, int], float]] = {}
        self._added: dict[str, int] = {}
        self._added_all = 0

    def add(self, node: str, ratios: Iterable[float]) -> None:
        """Record ``node``'s ratios of one past window (and the cluster's)."""
        values = [float(r) for r in ratios]
        own = self._by_node.get(node)
        if own is None:
            own = self._by_node[node] = deque(maxlen=self.kept)
        own.extend(values)
        self._all.extend(values)
        self._added[node] = self._added.get(node, 0) + 1
        self._added_all += 1

    def ratios(self, node: str) -> list[float]:
        """The node's own ratios once it has ``min_samples``, else the cluster's."""
        own = self._by_node.get(node)
        if own is not None and len(own) >= self.min_samples:
            return list(own)
        return list(self._all)

    def scale(self, node: str, target: float | None) -> float:
        """How much busier than forecast ``node``'s load may be at probability ``target``
        (:func:`load_scale`; 1 with ``target`` None or too few windows known)."""
        if target is None:
            return 1.0
        own = self._by_node.get(node)
        if own is not None and len(own) >= self.min_samples:
            version = (self._added.get(node, 0), -1)  # its own ratios only
        else:
            version = (-1, self._added_all)  # the cluster's
        kept = self._scales.get((node, target))
        if kept is not None and kept[0] == version:
            return kept[1]
        scale = load_scale(self.ratios(node), target, self.min_samples)
        self._scales[(node, target)] = (version, scale)
        return scale

    def retain(self, nodes: Iterable[str]) -> None:
        """Forget the own ratios of nodes not in ``nodes`` (the cluster's stay)."""
        keep = set(nodes)
        for name in set(self._by_node) - keep:
            del self._by_node[name]
            self._added.pop(name, None)
        for key in [k for k in self._scales if k[0] not in keep]:
            del self._scales[key]


def meet_probability(product: float, sla: float, residuals: Sequence[float]) -> float | None:
    """The predicted probability that a window meets ``sla`` when the model says
    ``product``: the share of past residuals r with ``product * r >= sla`` (None: none)."""
    values = np.asarray([r for r in residuals if np.isfinite(r) and r >= 0], dtype=np.float64)
    if values.size == 0:
        return None
    return float(np.mean(product * values >= sla - SLA_EPS))


def pairs_admissible(multi: npt.ArrayLike, k: int, threshold: float) -> BoolArray:
    """The pair-overlap rule on P_multi of k-GPU sets: True where every pair is aligned.

    A one-GPU set has no pair and always passes.
    """
    values = np.asarray(multi, dtype=np.float64)
    if k < 2:
        return np.ones(values.shape, dtype=bool)
    return np.asarray(values >= threshold - SLA_EPS, dtype=bool)


def limiting(factors: Mapping[str, float]) -> str:
    """The smallest factor, as ``name value`` (e.g. ``compute 0.35``)."""
    name = min(factors, key=lambda k: factors[k])
    return f"{name} {factors[name]:.2f}"


def sla_reason(product: float, sla: float, factors: Mapping[str, float], bias: float = 1.0) -> str:
    """The SLA verdict of one set, in the one wording (the bias only when it is not 1)."""
    corrected_by = f"bias {bias:.2f}" if bias != 1.0 else ""
    if bool(reaches_sla(product, sla)):
        suffix = f" ({corrected_by})" if corrected_by else ""
        return f"predicted {product:.2f} >= SLA {sla:.2f}{suffix}"
    detail = limiting(factors) + (f", {corrected_by}" if corrected_by else "")
    return f"predicted {product:.2f} < SLA {sla:.2f} ({detail})"


def pair_reasons(
    node: NodeSummary, gpus: Sequence[int], scores: FloatArray, threshold: float
) -> list[str]:
    """One line per GPU pair of ``gpus`` (indices) of ``node`` that fails the pair rule.

    ``scores`` is the node's [G, G] overlap / union matrix (``model.pair_scores``).
    """
    if len(gpus) < 2:
        return []
    out: list[str] = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            pa, pb = node.position(a), node.position(b)
            score = float(scores[pa, pb])
            if bool(pairs_admissible(score, 2, threshold)):
                continue
            if np.isnan(node.pair_union_seconds[pa, pb]):
                out.append(f"GPU pair {a}-{b}: busy overlap not measured")
            else:
                out.append(
                    f"GPU pair {a}-{b}: busy overlap {score:.2f} < {threshold:.2f} (admission)"
                )
    return out


def no_memory_samples(node: NodeSummary) -> str | None:
    """A note (not a rule) when the node's window has no harvestable-memory samples."""
    if node.memory.n_states == 0:
        return f"node {node.node}: no harvestable-memory samples in the window"
    return None
