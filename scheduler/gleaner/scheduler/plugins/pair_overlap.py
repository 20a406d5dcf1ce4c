"""PairOverlap filter: every GPU pair of a multi-GPU set must overlap >= the threshold.

docs/perfmodel.md's admission rule: a k-GPU job may use a set only if each pair's online busy
overlap / union is at least ``ModelConfig.min_pair_overlap`` (0.95). This filter defines
the alignment graph (``pair_threshold``), so the search only ever proposes its cliques;
nodes where no k free allowed GPUs form one get ``no k aligned free GPUs (pair overlap <
0.95)``.
"""

from __future__ import annotations

import numpy as np

from gleaner.scheduler.config import SchedulerConfig
from gleaner.scheduler.framework import BoolArray, CandidateBatch, JobContext, SetFilter

_EPS = 1e-12


class PairOverlap(SetFilter):
    name = "PairOverlap"

    def __init__(self, config: SchedulerConfig) -> None:
        super().__init__(config)
        self.pair_threshold = config.model.min_pair_overlap

    def check(self, ctx: JobContext, batch: CandidateBatch) -> BoolArray:
        if ctx.k < 2:
            return np.ones(batch.size, dtype=bool)
        threshold = self.config.model.min_pair_overlap
        return np.asarray(batch.multi >= threshold - _EPS, dtype=bool)

    def explain(self, ctx: JobContext, failed: CandidateBatch) -> str:
        return self.no_sets_reason(ctx)

    def no_sets_reason(self, ctx: JobContext) -> str:
        return (
            f"no {ctx.k} aligned free GPUs "
            f"(pair overlap < {self.config.model.min_pair_overlap:.2f})"
        )
