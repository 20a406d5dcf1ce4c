"""Node summaries for the operator's scheduling passes: NodeTraces, or Prometheus.

Contract: ``load_node_summaries(config, nodetraces, now)`` returns one ``NodeSummary`` per
node for a scheduling pass. By default they come from the NodeTrace objects the pass just
listed (perfmodel's ``NodeTraceListSource``; a NodeTrace that does not parse is skipped with
a warning so one broken agent cannot stop scheduling). With ``--prometheus-url`` they come
from Prometheus instead (``gleaner.operator.sources.prometheus``, the agent metrics, else
DCGM), read on a worker thread because that client is synchronous.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gleaner.perfmodel import NodeSummary, NodeTraceListSource, TraceFormatError

if TYPE_CHECKING:
    from gleaner.operator.config import OperatorConfig

logger = logging.getLogger(__name__)


def summaries_from_nodetraces(nodetraces: Sequence[dict[str, Any]]) -> dict[str, NodeSummary]:
    out: dict[str, NodeSummary] = {}
    for obj in nodetraces:
        try:
            out.update(NodeTraceListSource([obj]).load())
        except (TraceFormatError, ValueError) as exc:
            name = (obj.get("metadata") or {}).get("name")
            logger.warning("NodeTrace %s skipped: %s", name, str(exc).splitlines()[0])
    return out


async def load_node_summaries(
    config: OperatorConfig, nodetraces: Sequence[dict[str, Any]], now: datetime
) -> dict[str, NodeSummary]:
    if config.prometheus_url:
        from gleaner.operator.sources.prometheus import PrometheusTraceSource

        source = PrometheusTraceSource(
            url=config.prometheus_url, window_seconds=config.prometheus_window, end=now
        )
        return await asyncio.to_thread(source.load)
    return summaries_from_nodetraces(nodetraces)
