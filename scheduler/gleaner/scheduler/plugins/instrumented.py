"""Instrumented filter: no offline work on a GPU that runs a process Gleaner cannot account for.

A node's agent reports, per GPU, the processes no connected shim accounts for (NodeTrace
``perGPU[].uninstrumentedProcesses``; docs/agent.md, "Uninstrumented processes"); the
agent holds such a GPU's offline gate closed, so a job placed there would never run. This
set filter prunes those GPUs (``slot_mask``) and rejects any set holding one. Reason:
``GPU N runs an uninstrumented process (pod ns/name)`` (``pid N`` when the pod is not
known). A node that opted out (``uninstrumentedGuard: OptedOut``) lists nothing here.
"""

from __future__ import annotations

import numpy as np

from gleaner.scheduler.framework import BoolArray, CandidateBatch, IntArray, JobContext, SetFilter
from gleaner.scheduler.view import ClusterView


def uninstrumented_reason(gpu: int, who: str) -> str:
    """The words for GPU ``gpu`` running ``who`` uninstrumented (the filter's reason, and the
    operator's Events about it)."""
    return f"GPU {gpu} runs an uninstrumented process ({who})"


class Instrumented(SetFilter):
    name = "Instrumented"

    _view: ClusterView | None = None
    _bits: IntArray
    _why: dict[tuple[int, int], str]

    def _index(self, view: ClusterView) -> tuple[IntArray, dict[tuple[int, int], str]]:
        """[N] bitmask of uninstrumented GPU positions, and (row, position) -> reason;
        computed once per view (one scheduling cycle)."""
        if self._view is not view:
            bits = np.zeros(view.n_nodes, dtype=np.int64)
            why: dict[tuple[int, int], str] = {}
            for node, gpus in view.cluster.uninstrumented.items():
                row = view.row.get(node)
                if row is None:
                    continue
                summary = view.summaries[row]
                for gpu, who in gpus.items():
                    if gpu not in summary.gpu_indices:
                        continue
                    pos = summary.position(gpu)
                    bits[row] |= np.int64(1) << np.int64(pos)
                    why[(row, pos)] = uninstrumented_reason(gpu, who)
            self._view, self._bits, self._why = view, bits, why
        return self._bits, self._why

    def slot_mask(self, ctx: JobContext) -> BoolArray:
        bits, _ = self._index(ctx.view)
        positions = np.arange(ctx.view.width, dtype=np.int64)
        return np.asarray(((bits[:, None] >> positions[None, :]) & 1) == 0, dtype=bool)

    def check(self, ctx: JobContext, batch: CandidateBatch) -> BoolArray:
        bits, _ = self._index(ctx.view)
        return np.asarray((batch.mask & bits[batch.node]) == 0, dtype=bool)

    def explain(self, ctx: JobContext, failed: CandidateBatch) -> str:
        _, why = self._index(ctx.view)
        row = int(failed.node[0])
        for pos in sorted(int(p) for p in failed.slots[0]):
            reason = why.get((row, pos))
            if reason is not None:
                return reason
        return "a GPU runs an uninstrumented process"
