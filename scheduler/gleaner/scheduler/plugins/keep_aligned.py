"""KeepAligned score: do not break up aligned GPU groups other jobs will need.

For a set S on a node whose free GPUs after the placement are F, let B be the GPUs of
F aligned (pair overlap >= threshold) with some member of S. score = 100 * (1 - |B|/|F|)
(100 when F is empty). A 1-GPU job thus prefers a GPU nobody is aligned with, and a
2-GPU job an isolated aligned pair over two GPUs of an 8-GPU aligned group.
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


class KeepAligned(ScorePlugin):
    name = "KeepAligned"

    def score(self, ctx: JobContext, batch: CandidateBatch) -> FloatArray:
        free_after = ctx.view.free_mask[batch.node] & ~batch.mask
        broken = POPCOUNT[batch.neighbours & free_after]
        remaining = POPCOUNT[free_after]
        frac = np.where(remaining > 0, broken / np.maximum(remaining, 1), 0.0)
        return np.asarray(MAX_SCORE * (1.0 - frac), dtype=np.float64)
