"""GPUFree filter: at least k allowed GPUs must be free (v1: one offline job per GPU).

Counts GPUs that no offline job holds among those the gpuSelector allows. Reason:
``no free GPU`` (k = 1) or ``fewer than k free GPUs``.
"""

from __future__ import annotations

import numpy as np

from gleaner.scheduler.framework import BoolArray, IntArray, JobContext, NodeFilter


class GPUFree(NodeFilter):
    name = "GPUFree"

    def mask(self, ctx: JobContext) -> BoolArray:
        return np.asarray((ctx.allowed & ctx.view.free).sum(axis=1) >= ctx.k, dtype=bool)

    def reasons(self, ctx: JobContext, nodes: IntArray) -> list[str]:
        text = "no free GPU" if ctx.k == 1 else f"fewer than {ctx.k} free GPUs"
        return [text] * len(nodes)

    def passed(self, ctx: JobContext) -> str:
        return f"at least {ctx.k} free GPU{'s' if ctx.k > 1 else ''}"
