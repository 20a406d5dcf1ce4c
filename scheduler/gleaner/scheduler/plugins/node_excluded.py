"""NodeExcluded filter: a job is not placed again on a node where it missed its SLA.

Passes a node unless it is in the job's ``excluded_nodes`` (filled by the SLA monitor on
eviction). Reason: ``job missed its SLA there before``.
"""

from __future__ import annotations

import numpy as np

from gleaner.scheduler.framework import BoolArray, IntArray, JobContext, NodeFilter


class NodeExcluded(NodeFilter):
    name = "NodeExcluded"

    def mask(self, ctx: JobContext) -> BoolArray:
        out = np.ones(ctx.view.n_nodes, dtype=bool)
        for node in ctx.job.excluded_nodes:
            row = ctx.view.row.get(node)
            if row is not None:
                out[row] = False
        return out

    def reasons(self, ctx: JobContext, nodes: IntArray) -> list[str]:
        return ["job missed its SLA there before"] * len(nodes)

    def passed(self, ctx: JobContext) -> str:
        return "job has not missed its SLA there"
