"""SLAFit score: least surplus over the SLA (best fit), keeping the best GPUs for hard jobs.

score = 100 * (1 - (product - sla) / (1 - sla)), clipped to [0, 100]; 100 when sla = 1.
A set that just meets the SLA scores 100; one far above it scores low, so a lenient job
takes the weakest GPUs that still serve it and leaves the strong ones to the jobs that
need them (which the queue order places first anyway).
"""

from __future__ import annotations

import numpy as np

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
        surplus = np.clip((batch.product - ctx.job.sla) / headroom, 0.0, 1.0)
        return np.asarray(MAX_SCORE * (1.0 - surplus), dtype=np.float64)
