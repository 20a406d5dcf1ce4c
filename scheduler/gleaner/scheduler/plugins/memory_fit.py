"""MemoryFit filter: the job must expect enough harvestable memory to make progress.

A set passes when its predicted P_memory (tightest GPU, joint sketch) is above
``SchedulerConfig.min_memory_factor`` (default 0: any progress at all). The single-GPU
P_memory bounds every set containing that GPU from above, so GPUs at or below the
threshold are pruned before the search. Reason: ``insufficient harvestable memory
(best memory 0.00)``.
"""

from __future__ import annotations

import numpy as np

from gleaner.scheduler.framework import BoolArray, CandidateBatch, JobContext, SetFilter


class MemoryFit(SetFilter):
    name = "MemoryFit"

    def slot_mask(self, ctx: JobContext) -> BoolArray:
        return np.asarray(ctx.memory > self.config.min_memory_factor, dtype=bool)

    def check(self, ctx: JobContext, batch: CandidateBatch) -> BoolArray:
        return np.asarray(batch.memory > self.config.min_memory_factor, dtype=bool)

    def judge(self, ctx: JobContext, one: CandidateBatch) -> tuple[bool, str]:
        ok = bool(self.check(ctx, one)[0])
        floor = self.config.min_memory_factor
        memory = float(one.memory[0])
        if ok:
            return True, f"harvestable memory (memory {memory:.2f} > {floor:.2f})"
        return False, f"insufficient harvestable memory (memory {memory:.2f} <= {floor:.2f})"

    def explain(self, ctx: JobContext, failed: CandidateBatch) -> str:
        best = float(failed.memory.max()) if failed.size else 0.0
        floor = self.config.min_memory_factor
        limit = f" <= {floor:.2f}" if floor > 0 else ""
        return f"insufficient harvestable memory (best memory {best:.2f}{limit})"
