"""SLAFit score: least surplus over the SLA (best fit), keeping the best GPUs for hard jobs.

score = 100 * (1 - (product - sla) / (1 - sla)), clipped to [0, 100]; 100 when sla = 1.
A set that just meets the SLA scores 100; one far above it scores low, so a lenient job
takes the weakest GPUs that still serve it and leaves the strong ones to the jobs that
need them (which the queue order places first anyway).

With ``SchedulerConfig.sla_margin`` m > 0, a set predicted less than m above the SLA
scores 0: among the admitted sets, one with that much margin wins over a best fit at the
edge (a placement admitted at the edge of its SLA misses its windows far more often), and
among those with the margin the best fit still wins. An edge set is still placed when no
set has the margin.
"""

from __future__ import annotations

import numpy as np

from gleaner.perfmodel.admission import SLA_EPS
from gleaner.scheduler.framework import (
    MAX_SCORE,
    CandidateBatch,
    FloatArray,
    JobContext,
    ScorePlugin,
)


class SLAFit(ScorePlugin):
    name = "SLAFit"

    def score(self, ctx: JobContext, batch: CandidateBatch) -> FloatArray:
        headroom = 1.0 - ctx.job.sla
        if headroom <= 0:
            return np.full(batch.size, MAX_SCORE)
        margin = batch.product - ctx.job.sla
        surplus = np.clip(margin / headroom, 0.0, 1.0)
        score = MAX_SCORE * (1.0 - surplus)
        if self.config.sla_margin > 0:
            score = np.where(margin < self.config.sla_margin - SLA_EPS, 0.0, score)
        return np.asarray(score, dtype=np.float64)
