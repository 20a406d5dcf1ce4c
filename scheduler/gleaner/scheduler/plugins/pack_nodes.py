"""PackNodes score: prefer nodes that are already busy (most allocated), like bin packing.

score = 100 * (GPUs held by offline jobs after the placement) / (GPUs of the node).
Filling partly used nodes first leaves whole nodes free for 8-GPU jobs.
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
from gleaner.scheduler.gpusets import POPCOUNT


class PackNodes(ScorePlugin):
    name = "PackNodes"

    def score(self, ctx: JobContext, batch: CandidateBatch) -> FloatArray:
        total = ctx.view.n_gpus[batch.node]
        used_after = total - POPCOUNT[ctx.view.free_mask[batch.node]] + ctx.k
        return np.asarray(MAX_SCORE * used_after / np.maximum(total, 1), dtype=np.float64)
