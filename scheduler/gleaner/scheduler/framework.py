"""The plugin framework, in the shape of kube-scheduler's: filters with reasons, scores 0..100.

Contract. A scheduling cycle asks three kinds of small plugins about one job at a time
(each gets a :class:`JobContext`: the job, the cluster view, and per-job arrays shared
by all plugins):

- :class:`NodeFilter` — a node-level predicate, vectorized over all nodes (``mask``),
  with a human-readable reason for each node it rejects (``reasons``);
- :class:`SetFilter` — a predicate on a candidate GPU set on a node (``check`` over a
  :class:`CandidateBatch`), with ``explain`` summarizing, for the nodes whose best set
  it rejected, why (e.g. "predicted throughput below SLA (best 0.31 < 0.60, compute
  0.35)"). ``slot_mask`` may state a *necessary* per-GPU condition (a GPU that fails
  it cannot be in any passing set), which prunes the search; the one filter that
  defines the alignment graph sets ``pair_threshold`` and says ``no_sets_reason``;
- :class:`ScorePlugin` — a pure numeric preference over candidates, normalized to
  [0, 100] (higher is better); the cycle takes the weighted mean of enabled scores.

Every filter also judges one set on its own (``NodeFilter.passed``/``reasons``,
``SetFilter.judge``): ``gleaner.scheduler.explain`` collects those lines into the one
explanation of why a job goes to a node, or not. Filters never score and scores never
reject. A node's reason in an unschedulable
message comes from the first filter (in configured order) that rejects it, or, for set
filters, that rejects the node's most promising set. Plugins are registered by name in
``gleaner.scheduler.registry``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel.admission import corrected
from gleaner.scheduler.job import JobRequest

if TYPE_CHECKING:
    from gleaner.scheduler.config import SchedulerConfig
    from gleaner.scheduler.view import ClusterView

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class CandidateBatch:
    """GPU sets of one size on nodes of the view, as parallel arrays (one row per set).

    ``memory`` (and therefore ``product``) is an *upper bound* (the minimum of the
    single-GPU memory factors) unless ``exact``: the tightest-GPU joint memory can only
    be lower. For one GPU the bound is exact.
    """

    row: IntArray
    """[n] row of each set in the view's ``SetTable`` for size k (-1: found outside it)."""
    node: IntArray
    """[n] node row in the view."""
    mask: IntArray
    """[n] bitmask of GPU positions."""
    slots: IntArray
    """[n, k] GPU positions."""
    compute: FloatArray
    """[n] P_compute."""
    memory: FloatArray
    """[n] P_memory (an upper bound unless ``exact``)."""
    multi: FloatArray
    """[n] P_multi."""
    bias: FloatArray
    """[n] bias-correction multiplier of the node (and job class)."""
    neighbours: IntArray
    """[n] bitmask of the node's GPUs outside the set aligned with one of its members."""
    exact: bool

    @property
    def size(self) -> int:
        return int(self.node.size)

    @property
    def raw_product(self) -> FloatArray:
        """compute * memory * multi (the model's own prediction)."""
        return np.asarray(self.compute * self.memory * self.multi, dtype=np.float64)

    @property
    def product(self) -> FloatArray:
        """The bias-corrected predicted throughput fraction, clipped to [0, 1]."""
        return corrected(self.raw_product, self.bias)

    def take(self, idx: IntArray | BoolArray | Sequence[int]) -> CandidateBatch:
        sel = np.asarray(idx)
        return CandidateBatch(
            self.row[sel],
            self.node[sel],
            self.mask[sel],
            self.slots[sel],
            self.compute[sel],
            self.memory[sel],
            self.multi[sel],
            self.bias[sel],
            self.neighbours[sel],
            self.exact,
        )


@dataclass(eq=False)
class JobContext:
    """One job and the per-job arrays every plugin reads (computed once per job)."""

    job: JobRequest
    view: ClusterView
    config: SchedulerConfig
    allowed: BoolArray
    """[N, W] GPUs that exist and whose product the gpuSelector allows."""
    bias: FloatArray
    """[N] bias multiplier per node for this job's class."""
    memory: FloatArray
    """[N, W] single-GPU P_memory of this job's profile."""
    estimate: FloatArray
    """[N, W] compute * memory * bias per GPU: an upper bound of any set containing it."""

    @property
    def k(self) -> int:
        return self.job.gpus


class NodeFilter(ABC):
    """A node-level filter (kube-scheduler's Filter extension point)."""

    name: ClassVar[str]

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config

    @abstractmethod
    def mask(self, ctx: JobContext) -> BoolArray:
        """[N] True where the node passes."""

    @abstractmethod
    def reasons(self, ctx: JobContext, nodes: IntArray) -> list[str]:
        """A class-level reason for each rejected node in ``nodes`` (grouped by text)."""

    def passed(self, ctx: JobContext) -> str:
        """What a node that passes has shown (one line of a placement's explanation)."""
        return f"{self.name}: passed"


class SetFilter(ABC):
    """A filter on candidate GPU sets (size k) on a node."""

    name: ClassVar[str]
    pair_threshold: float | None = None
    """Set by the filter that defines the alignment graph: sets are its cliques."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config

    def slot_mask(self, ctx: JobContext) -> BoolArray | None:
        """[N, W] a necessary per-GPU condition, or None (no pruning)."""
        return None

    @abstractmethod
    def check(self, ctx: JobContext, batch: CandidateBatch) -> BoolArray:
        """[n] True where the set passes."""

    @abstractmethod
    def explain(self, ctx: JobContext, failed: CandidateBatch) -> str:
        """Why ``failed`` (the best set of each node this filter rejected) was rejected."""

    def no_sets_reason(self, ctx: JobContext) -> str:
        """Reason for nodes where the search found no set at all (graph-defining filter)."""
        return f"no {ctx.k} free GPUs form an admissible set"

    def judge(self, ctx: JobContext, one: CandidateBatch) -> tuple[bool, str]:
        """This rule's verdict on the single (exact) set ``one``, and its line of text.

        The default words a failure as ``explain`` does and a pass by the filter's name;
        filters whose rule has a per-set wording (``gleaner.perfmodel.admission``)
        override it.
        """
        ok = bool(self.check(ctx, one)[0])
        return ok, (f"{self.name}: passed" if ok else self.explain(ctx, one))


class ScorePlugin(ABC):
    """A score (kube-scheduler's Score extension point), normalized to [0, 100]."""

    name: ClassVar[str]

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config

    @abstractmethod
    def score(self, ctx: JobContext, batch: CandidateBatch) -> FloatArray:
        """[n] in [0, 100], higher is better."""


MAX_SCORE = 100.0
