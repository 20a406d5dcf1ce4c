"""OfflineJob deletion (behind the ``gleaner.dev/finalizer``): delete the job's Pods.

Contract: lists the job's offline Pods by label and deletes each (already gone is fine),
then the caller (``handlers.jobs``) removes the finalizer. Owner references would
garbage-collect them too on a real cluster; deleting explicitly makes the GPUs free at
once and does not depend on the garbage collector. Eviction-report ConfigMaps are kept
(they have no owner) for ``gleaner report evictions``. The job's per-job metric series are
removed. The scheduling loop is kicked: GPUs were freed.
"""

from __future__ import annotations

from gleaner.api.contract import job_selector
from gleaner.clients.kube import pods_path
from gleaner.operator.context import OperatorContext


async def delete_job_pods(ctx: OperatorContext, namespace: str, name: str) -> int:
    """Delete every Pod of the job; return how many were deleted."""
    pods = await ctx.client.list(pods_path(namespace), label_selector=job_selector(name))
    deleted = 0
    for pod in pods:
        pod_name = str((pod.get("metadata") or {}).get("name"))
        if await ctx.client.delete(pods_path(namespace, pod_name)):
            deleted += 1
    ctx.forget_job(namespace, name)
    ctx.metrics.forget_job(namespace, name)
    ctx.kick(f"job {namespace}/{name} deleted")
    return deleted
