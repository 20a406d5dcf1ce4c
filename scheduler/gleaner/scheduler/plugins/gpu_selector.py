"""GPUSelector filter: the node's labels and GPU products must match the job's gpuSelector.

Passes a node when every ``nodeSelector`` label matches and the node has at least k GPUs
whose product is in ``products`` (any product when the list is empty). Reasons:
``didn't match gpuSelector node labels``, ``fewer than k GPUs of product <list>`` (with
``(GPU product not reported)`` where some of the node's GPUs have no known product, as in
trace files, so that the user knows the selector, not the hardware, ruled the node out) or
``fewer than k GPUs on the node``.
"""

from __future__ import annotations

import numpy as np

from gleaner.scheduler.framework import BoolArray, IntArray, JobContext, NodeFilter


class GPUSelector(NodeFilter):
    name = "GPUSelector"

    def mask(self, ctx: JobContext) -> BoolArray:
        labels_ok = ctx.view.label_mask(ctx.job.node_selector)
        enough = ctx.allowed.sum(axis=1) >= ctx.k
        return np.asarray(labels_ok & enough, dtype=bool)

    def passed(self, ctx: JobContext) -> str:
        return "matches the gpuSelector"

    def reasons(self, ctx: JobContext, nodes: IntArray) -> list[str]:
        labels_ok = ctx.view.label_mask(ctx.job.node_selector)
        plural = "GPU" if ctx.k == 1 else "GPUs"
        if ctx.job.products:
            short = f"fewer than {ctx.k} {plural} of product {', '.join(sorted(ctx.job.products))}"
        else:
            short = f"fewer than {ctx.k} {plural} on the node"
        unknown: BoolArray = np.asarray(ctx.view.unknown_product.any(axis=1), dtype=bool)
        out = []
        for i in nodes:
            if not labels_ok[i]:
                out.append("didn't match gpuSelector node labels")
            elif ctx.job.products and unknown[i]:
                out.append(f"{short} (GPU product not reported)")
            else:
                out.append(short)
        return out
