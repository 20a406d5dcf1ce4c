"""PairOverlap filter: every GPU pair of a multi-GPU set must overlap >= the threshold.

docs/perfmodel.md's admission rule: a k-GPU job may use a set only if each pair's online busy
overlap / union is at least ``ModelConfig.min_pair_overlap`` (0.95). This filter defines
the alignment graph (``pair_threshold``), so the search only ever proposes its cliques;
nodes where no k free allowed GPUs form one get ``no k aligned free GPUs (pair overlap <
0.95)``.

The rule itself is ``gleaner.perfmodel.admission.pairs_admissible``, which ``predict`` and
the alignment graph apply too; ``judge`` words one set's failing pairs as ``predict`` does.
"""

from __future__ import annotations

from gleaner.perfmodel.admission import pair_reasons, pairs_admissible
from gleaner.perfmodel.model import pair_scores
from gleaner.scheduler.config import SchedulerConfig
from gleaner.scheduler.framework import BoolArray, CandidateBatch, JobContext, SetFilter


class PairOverlap(SetFilter):
    name = "PairOverlap"

    def __init__(self, config: SchedulerConfig) -> None:
        super().__init__(config)
        self.pair_threshold = config.model.min_pair_overlap

    def check(self, ctx: JobContext, batch: CandidateBatch) -> BoolArray:
        return pairs_admissible(batch.multi, ctx.k, self.config.model.min_pair_overlap)

    def judge(self, ctx: JobContext, one: CandidateBatch) -> tuple[bool, str]:
        threshold = self.config.model.min_pair_overlap
        if bool(self.check(ctx, one)[0]):
            if ctx.k < 2:
                return True, "one GPU: no pair to align"
            return True, f"every GPU pair aligned (busy overlap >= {threshold:.2f})"
        row = int(one.node[0])
        summary = ctx.view.summaries[row]
        gpus = ctx.view.gpu_indices(row, one.slots[0])
        return False, "; ".join(pair_reasons(summary, gpus, pair_scores(summary), threshold))

    def explain(self, ctx: JobContext, failed: CandidateBatch) -> str:
        return self.no_sets_reason(ctx)

    def no_sets_reason(self, ctx: JobContext) -> str:
        return (
            f"no {ctx.k} aligned free GPUs "
            f"(pair overlap < {self.config.model.min_pair_overlap:.2f})"
        )
