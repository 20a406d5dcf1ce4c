"""NodeUsable filter: skip nodes that are unavailable (stale trace, not ready, no window).

Passes a node unless the ClusterState marks it unavailable or its summary has an empty
window. Reason: ``node unavailable: <class-level reason>``.
"""

from __future__ import annotations

from gleaner.scheduler.framework import BoolArray, IntArray, JobContext, NodeFilter


class NodeUsable(NodeFilter):
    name = "NodeUsable"

    def mask(self, ctx: JobContext) -> BoolArray:
        return ctx.view.usable

    def reasons(self, ctx: JobContext, nodes: IntArray) -> list[str]:
        return [f"node unavailable: {ctx.view.unavailable[int(i)]}" for i in nodes]

    def passed(self, ctx: JobContext) -> str:
        return "node available"
