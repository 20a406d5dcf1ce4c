"""The bias table's I/O: load it from, and write it back to, the ConfigMap ``gleaner-bias``.

Contract (the rules are ``gleaner.operator.bias``'s). ``load_bias`` replaces ``ctx.bias``
with the stored table: at start, and when a standby replica becomes the active one (the
previous active replica kept learning meanwhile). A missing ConfigMap is an empty table; an
unreadable one is logged and the current table kept. ``flush_bias`` writes the table when
``ctx.bias_clock`` says it is due (changed, and the interval passed; ``final`` at shutdown
ignores the interval): a merge patch of the ConfigMap, created on the first write. A write
that fails is logged and tried again one interval later (the table stays marked changed).
Observations fed since the last write are lost if the process dies before the next one:
the bound of that loss is one ``--bias-persist-interval`` of windows.
"""

from __future__ import annotations

import logging
import time

from gleaner.clients.kube import ConflictError, KubeError, NotFoundError, configmaps_path
from gleaner.operator.bias import BIAS_CONFIGMAP, from_configmap, to_configmap
from gleaner.operator.context import OperatorContext

logger = logging.getLogger(__name__)


async def load_bias(ctx: OperatorContext) -> bool:
    """Replace ``ctx.bias`` with the stored table; False when it could not be read."""
    namespace = ctx.config.state_namespace
    async with ctx.bias_lock:
        try:
            body = await ctx.client.get(configmaps_path(namespace, BIAS_CONFIGMAP))
            table = from_configmap(body, ctx.config.bias)
        except (KubeError, ValueError) as exc:
            logger.warning("bias table %s/%s not loaded: %s", namespace, BIAS_CONFIGMAP, exc)
            return False
        ctx.bias = table
        ctx.bias_clock.dirty = False
        if len(table):
            logger.info("bias table loaded: %d entries on %d nodes", len(table), len(table.nodes()))
        return True


async def flush_bias(ctx: OperatorContext, *, final: bool = False) -> bool:
    """Write ``ctx.bias`` if due; True when it was written."""
    now = time.monotonic()
    if not ctx.bias_clock.due(now, final=final):
        return False
    namespace = ctx.config.state_namespace
    async with ctx.bias_lock:
        body = to_configmap(ctx.bias, namespace)
        try:
            try:
                await ctx.client.patch(configmaps_path(namespace, BIAS_CONFIGMAP), body)
            except NotFoundError:
                try:
                    await ctx.client.create(configmaps_path(namespace), body)
                except ConflictError:  # created meanwhile: patch it
                    await ctx.client.patch(configmaps_path(namespace, BIAS_CONFIGMAP), body)
        except KubeError as exc:
            logger.warning("bias table not written to %s/%s: %s", namespace, BIAS_CONFIGMAP, exc)
            ctx.bias_clock.failed(now)
            return False
        ctx.bias_clock.written(now)
        return True
