"""Node summaries for the operator's scheduling passes: NodeTraces, or Prometheus.

Contract: ``load_node_summaries(config, nodetraces, now)`` returns one ``NodeSummary`` per
node for a scheduling pass. By default they come from the NodeTrace objects the pass just
listed (perfmodel's ``NodeTraceListSource``; a NodeTrace that does not parse is skipped with
a warning so one broken agent cannot stop scheduling). A NodeTrace with ``status.hours`` (the
node's history by hour of the day, which the agent keeps in the node's NodeHistory: the pass
joins them first, ``with_histories``) gives instead what the simulator's ``gleaner`` policy
admits by: each GPU at its busiest hour of the next ``FORECAST_HORIZON_S`` from ``now``
(perfmodel's ``ADMISSION_HORIZON_H``), blended with its latest window, its load scaled by
the spread of past windows at the risk target (the scheduler's ``AdmissionRisk``, over
perfmodel's ``node_admission``, ``worst_hours`` and ``LoadSpread``: the simulator's rule): a
job placed in the morning is judged on the day ahead, not on the night behind it, and a job
placed at night by the day's peak it will run into. The spread is learned in memory from
each new report window against what the node's hours forecast for that hour
(``HourProfiles.learn``; a restart relearns it). Unreadable hours are ignored with a warning
(the latest window is used).
Parsing 24 hours is most of the cost of reading a NodeTrace, and they change once an hour
while the rest of the status changes every report: ``HourProfiles`` keeps each node's parsed
profile until its hours change (each entry's hour, window end and seconds), so a pass parses
only the hours that moved; the profile keeps what its forecasts read from the hours ahead
(perfmodel's ``HourStack``, per hour of the pass), so a pass only blends in the latest window.
With ``--prometheus-url`` they come from Prometheus instead
(``gleaner.operator.sources.prometheus``, the agent metrics, else DCGM), read on a worker
thread because that client is synchronous; agent metrics carry no GPU inventory, so each
Prometheus summary takes its GPUs' UUIDs, products and memory from the node's NodeTrace when
there is one (``with_inventory``: the load from Prometheus, the inventory from the agent's
NodeTrace).

``uninstrumented_gpus(nodetraces, parsed)`` lists, per node, the GPUs whose agent reports a
process no shim accounts for (``perGPU[].uninstrumentedProcesses``; none for a node that opted
out): the scheduler's Instrumented filter keeps offline work off them. With ``parsed`` (the
operator's ``HourProfiles``) each NodeTrace is read once per ``resourceVersion``, not once per
pass.

``unbindable_nodes(summaries)`` names the nodes a Pod cannot be bound to because a GPU's
UUID is unknown (``NVIDIA_VISIBLE_DEVICES`` needs them): the scheduling pass treats them as
unavailable, with the reason ``GPU UUIDs unknown``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from gleaner.api import NodeTraceStatus
from gleaner.api.nodetrace import without_hours
from gleaner.perfmodel import GpuSpec, NodeSummary, NodeTraceListSource, TraceFormatError
from gleaner.perfmodel.admission import ADMISSION_HORIZON_H, DEFAULT_RISK_TARGET, LoadSpread
from gleaner.perfmodel.diurnal import DiurnalProfile, report_ratios
from gleaner.perfmodel.hours import profile_from_nodetrace
from gleaner.scheduler.risk import AdmissionRisk

if TYPE_CHECKING:
    from gleaner.operator.config import OperatorConfig
    from gleaner.operator.tracecache import HistoryCache

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

UNKNOWN_UUIDS_REASON = "GPU UUIDs unknown"
FORECAST_HORIZON_S = timedelta(hours=ADMISSION_HORIZON_H).total_seconds()
"""How far ahead a placement's time-of-day forecast looks (the SLA is judged over it): the
simulator's default ``forecast_horizon_h``."""


class HourProfiles:
    """Each node's time-of-day profile, parsed once per change of its ``status.hours``, each
    NodeTrace's summaries, parsed once per ``resourceVersion``, and the load spread learned
    from the nodes' report windows (in memory, bounded by the NodeTraces that exist)."""

    def __init__(self) -> None:
        self._by_node: dict[str, tuple[tuple[Any, ...], DiurnalProfile | None]] = {}
        self._parsed: dict[str, tuple[str, dict[str, NodeSummary]]] = {}
        self._uninstrumented: dict[str, tuple[str, dict[int, str]]] = {}
        self.spread = LoadSpread()
        self._learned: dict[str, tuple[datetime | None, float]] = {}

    def learn(self, profile: DiurnalProfile, report: NodeSummary) -> None:
        """Add the busy ratios of ``report``'s window against ``profile``'s forecast for its
        hour to the spread, once per window (a report seen before adds nothing)."""
        key = (report.window_end, report.window_seconds)
        if self._learned.get(report.node) == key:
            return
        self._learned[report.node] = key
        ratios = report_ratios(profile, report)
        if ratios:
            self.spread.add(report.node, ratios)

    def profile(self, obj: Mapping[str, Any]) -> DiurnalProfile | None:
        """The profile of NodeTrace ``obj`` (None without hours); ValueError when its hours
        do not parse (then None until they change)."""
        name = str((obj.get("metadata") or {}).get("name"))
        status = obj.get("status") or {}
        hours = [*(status.get("hours") or []), *(status.get("weekendHours") or [])]
        key = (
            tuple(g.get("index") for g in status.get("gpus") or []),
            tuple(
                (h.get("hour"), (h.get("window") or {}).get("end"),
                 (h.get("window") or {}).get("seconds"), h.get("days"))
                for h in hours
            ),
        )  # fmt: skip
        cached = self._by_node.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            profile = profile_from_nodetrace(obj)
        except ValueError:
            self._by_node[name] = (key, None)  # warned once, ignored until they change
            raise
        self._by_node[name] = (key, profile)
        return profile

    def summaries(self, obj: Mapping[str, Any]) -> dict[str, NodeSummary]:
        """NodeTrace ``obj``'s latest window, summarized (``TraceFormatError`` or
        ``ValueError`` when it does not parse); kept while its ``resourceVersion`` is the same
        (summaries are immutable, so every pass may share them; each caller gets its own
        dict)."""
        kept = _per_version(self._parsed, obj, lambda o: NodeTraceListSource([o]).load())
        return dict(kept)

    def uninstrumented(self, obj: Mapping[str, Any]) -> dict[int, str]:
        """``uninstrumented_of(obj)``, kept while its ``resourceVersion`` is the same (every
        scheduling and move pass asks it of every NodeTrace)."""
        return _per_version(self._uninstrumented, obj, uninstrumented_of)

    def retain(self, names: set[str]) -> None:
        """Forget the nodes not in ``names`` (their NodeTraces are gone)."""
        for name in set(self._by_node) - names:
            del self._by_node[name]
        for name in set(self._parsed) - names:
            del self._parsed[name]
        for name in set(self._uninstrumented) - names:
            del self._uninstrumented[name]
        for node in set(self._learned) - names:
            del self._learned[node]
        self.spread.retain(names)

    def __len__(self) -> int:
        return len(self._by_node)


def _per_version(
    cache: dict[str, tuple[str, _T]],
    obj: Mapping[str, Any],
    compute: Callable[[Mapping[str, Any]], _T],
) -> _T:
    """``compute(obj)``, kept in ``cache`` by the object's name while its ``resourceVersion``
    is the same (an object without one is computed every time)."""
    meta = obj.get("metadata") or {}
    name, version = str(meta.get("name")), str(meta.get("resourceVersion") or "")
    cached = cache.get(name)
    if version and cached is not None and cached[0] == version:
        return cached[1]
    value = compute(obj)
    if version:
        cache[name] = (version, value)
    return value


def with_histories(
    nodetraces: Sequence[dict[str, Any]], histories: HistoryCache
) -> list[dict[str, Any]]:
    """The NodeTraces with ``status.hours`` (and ``weekendHours``) from each node's
    NodeHistory (by node name) where it has one; a NodeTrace without a NodeHistory is left
    as it is (an older agent may still keep its hours in it)."""
    out: list[dict[str, Any]] = []
    for obj in nodetraces:
        name = (obj.get("spec") or {}).get("nodeName") or (obj.get("metadata") or {}).get("name")
        history = histories.get(str(name)) if name else None
        if history is None or not history.get("hours"):
            out.append(obj)
            continue
        hours = {k: history[k] for k in ("hours", "weekendHours") if history.get(k)}
        out.append({**obj, "status": {**(obj.get("status") or {}), **hours}})
    return out


def summaries_from_nodetraces(
    nodetraces: Sequence[dict[str, Any]],
    now: datetime | None = None,
    hours: HourProfiles | None = None,
    risk_target: float | None = DEFAULT_RISK_TARGET,
    horizon_s: float = FORECAST_HORIZON_S,
) -> dict[str, NodeSummary]:
    """One summary per parsable NodeTrace: its latest window, or with ``now`` and
    ``status.hours`` what admission judges from ``now`` over the next ``horizon_s`` seconds
    (module docstring), its load spread at ``risk_target`` (None: none). ``hours`` keeps
    parsed profiles and the learned spread from one call to the next (None: parsed afresh,
    nothing learned before)."""
    profiles = hours if hours is not None else HourProfiles()
    rule = AdmissionRisk(risk_target, horizon_s)
    out: dict[str, NodeSummary] = {}
    for obj in nodetraces:
        name = (obj.get("metadata") or {}).get("name")
        try:
            loaded = profiles.summaries(obj)
        except (TraceFormatError, ValueError) as exc:
            logger.warning("NodeTrace %s skipped: %s", name, str(exc).splitlines()[0])
            continue
        if now is not None and (obj.get("status") or {}).get("hours"):
            try:
                profile = profiles.profile(obj)
            except ValueError as exc:
                logger.warning("NodeTrace %s: hours ignored: %s", name, str(exc).splitlines()[0])
                profile = None
            if profile is not None:
                for summary in loaded.values():
                    profiles.learn(profile, summary)
                loaded = {
                    node: rule.node_summary(summary, profile, now, profiles.spread)
                    for node, summary in loaded.items()
                }
        out.update(loaded)
    # Profiles are kept by NodeTrace name, the learned spread by node name (spec.nodeName).
    profiles.retain({str((o.get("metadata") or {}).get("name")) for o in nodetraces} | set(out))
    return out


def with_inventory(
    summaries: Mapping[str, NodeSummary], inventory: Mapping[str, NodeSummary]
) -> dict[str, NodeSummary]:
    """``summaries`` with each GPU's unknown UUID, product and memory filled in from the
    same node's and index's GPU in ``inventory`` (and the inventory's node labels under
    the summary's own)."""
    out: dict[str, NodeSummary] = {}
    for name, summary in summaries.items():
        known = inventory.get(name)
        if known is None:
            out[name] = summary
            continue
        by_index = {g.index: g for g in known.gpus}

        def fill(gpu: GpuSpec, by_index: dict[int, GpuSpec] = by_index) -> GpuSpec:
            other = by_index.get(gpu.index)
            if other is None:
                return gpu
            return replace(
                gpu,
                uuid=gpu.uuid or other.uuid,
                product=gpu.product or other.product,
                memory_gib=gpu.memory_gib or other.memory_gib,
            )

        out[name] = replace(
            summary,
            gpus=tuple(fill(g) for g in summary.gpus),
            labels={**known.labels, **summary.labels},
        )
    return out


def uninstrumented_of(obj: Mapping[str, Any]) -> dict[int, str]:
    """One NodeTrace's GPUs with an uninstrumented process: {GPU index: ``pod ns/name`` or
    ``pid N``} (empty when its status does not parse: summaries_from_nodetraces warns)."""
    try:
        status = NodeTraceStatus.model_validate(without_hours(obj).get("status") or {})
    except ValueError:
        return {}
    return {gpu: proc.describe() for gpu, proc in status.uninstrumented_gpus().items()}


def uninstrumented_gpus(
    nodetraces: Sequence[dict[str, Any]], parsed: HourProfiles | None = None
) -> dict[str, dict[int, str]]:
    """node -> {GPU index: ``pod ns/name`` or ``pid N``} from the NodeTraces' status;
    ``parsed`` keeps each NodeTrace's answer while its ``resourceVersion`` is the same."""
    out: dict[str, dict[int, str]] = {}
    for obj in nodetraces:
        name = (obj.get("metadata") or {}).get("name")
        found = uninstrumented_of(obj) if parsed is None else parsed.uninstrumented(obj)
        if name and found:
            out[str(name)] = dict(found)
    return out


def unbindable_nodes(summaries: Mapping[str, NodeSummary]) -> dict[str, str]:
    """Nodes with a GPU whose UUID is unknown -> reason (a Pod could not name its GPUs)."""
    return {
        name: UNKNOWN_UUIDS_REASON
        for name, summary in summaries.items()
        if any(not g.uuid for g in summary.gpus)
    }


async def load_node_summaries(
    config: OperatorConfig,
    nodetraces: Sequence[dict[str, Any]],
    now: datetime,
    hours: HourProfiles | None = None,
    horizon_s: float = FORECAST_HORIZON_S,
) -> dict[str, NodeSummary]:
    """What placement judges each node by (``horizon_s``: how far ahead a node's hours of
    the day are looked at; Prometheus summaries have no hours)."""
    if config.prometheus_url:
        from gleaner.operator.sources.prometheus import PrometheusTraceSource

        source = PrometheusTraceSource(
            url=config.prometheus_url, window_seconds=config.prometheus_window, end=now
        )
        loaded = await asyncio.to_thread(source.load)
        return with_inventory(loaded, summaries_from_nodetraces(nodetraces))
    return summaries_from_nodetraces(nodetraces, now, hours, config.risk_target, horizon_s)
