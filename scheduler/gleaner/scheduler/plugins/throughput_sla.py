"""ThroughputSLA filter: the predicted (bias-corrected) product must reach the job's SLA.

A set passes when P_compute * P_memory * P_multi * bias >= throughputSLA (the rule of
``gleaner.perfmodel.admission.reaches_sla``, which ``predict`` applies too). Each GPU's
own compute * memory * bias bounds every set containing it, so GPUs below the SLA are
pruned before the search. Reason, over the rejected nodes' best sets:
``predicted throughput below SLA (best 0.31 < 0.60, compute 0.35)`` naming the best
set's limiting factor, and the learned bias when it corrects the model downwards.
"""

from __future__ import annotations

import numpy as np

from gleaner.perfmodel.admission import reaches_sla, sla_reason
from gleaner.scheduler.framework import BoolArray, CandidateBatch, JobContext, SetFilter


class ThroughputSLA(SetFilter):
    name = "ThroughputSLA"

    def slot_mask(self, ctx: JobContext) -> BoolArray:
        return reaches_sla(ctx.estimate, ctx.job.sla)

    def check(self, ctx: JobContext, batch: CandidateBatch) -> BoolArray:
        return reaches_sla(batch.product, ctx.job.sla)

    def judge(self, ctx: JobContext, one: CandidateBatch) -> tuple[bool, str]:
        ok = bool(self.check(ctx, one)[0])
        factors = {
            "compute": float(one.compute[0]),
            "memory": float(one.memory[0]),
            "multi_gpu": float(one.multi[0]),
        }
        return ok, sla_reason(float(one.product[0]), ctx.job.sla, factors, float(one.bias[0]))

    def explain(self, ctx: JobContext, failed: CandidateBatch) -> str:
        if failed.size == 0:
            return f"predicted throughput below SLA {ctx.job.sla:.2f}"
        i = int(np.argmax(failed.product))
        factors = {
            "compute": float(failed.compute[i]),
            "memory": float(failed.memory[i]),
            "multi_gpu": float(failed.multi[i]),
        }
        limiting = min(factors, key=lambda k: factors[k])
        detail = f"{limiting} {factors[limiting]:.2f}"
        if failed.bias[i] < 1.0:
            detail += f", bias {float(failed.bias[i]):.2f}"
        return (
            f"predicted throughput below SLA (best {float(failed.product[i]):.2f} < "
            f"{ctx.job.sla:.2f}, {detail})"
        )
