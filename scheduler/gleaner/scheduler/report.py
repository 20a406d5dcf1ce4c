"""The SLA eviction report: one record per eviction decision (pure data, JSON round-trip).

Contract. :class:`EvictionReport` holds everything a user needs to understand one
eviction: the job and where it ran (node, GPU indices), its SLA, what the model
predicted there (the three factors and their product), a summary of what was observed
(mean / min / last throughput fraction, windows considered and missed), the monitor's
reason, when it happened, and what happens next (requeued with a backoff deadline and
the nodes now excluded, or given up as Failed).

``to_json()`` returns a JSON-ready dict with camelCase keys (times as RFC 3339 UTC
strings); ``from_json()`` accepts that dict or its serialized string and returns an
equal record. The operator stores ``json.dumps(report.to_json())`` under the key
``report.json`` of a ConfigMap labelled ``gleaner.dev/report=sla-eviction``;
``gleaner report evictions`` reads them back with ``from_json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gleaner.scheduler.monitor import (
    EvictionPlan,
    SLADecision,
    SLAHistory,
    SLAMonitorConfig,
    summarize,
    window_missed,
)

REPORT_VERSION = 1


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat().replace("+00:00", "Z")


def _epoch(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    raise ValueError(f"not a time: {value!r}")


@dataclass(frozen=True)
class PredictedFactors:
    """What the model predicted for the placement (the three factors of docs/perfmodel.md)."""

    compute: float
    memory: float
    multi_gpu: float
    throughput_fraction: float


@dataclass(frozen=True)
class ObservedSummary:
    """Summary of the observed throughput fractions the decision looked at."""

    mean: float
    min: float
    last: float
    windows: int
    """Windows considered (after grace, at most n)."""
    windows_missed: int
    window_seconds: float


@dataclass(frozen=True)
class EvictionReport:
    """One SLA eviction (see the module docstring)."""

    job: str
    node: str
    gpus: tuple[int, ...]
    sla: float
    predicted: PredictedFactors
    observed: ObservedSummary
    reason: str
    time: float
    """When the eviction was decided, seconds since the epoch."""
    eviction_count: int
    failed: bool
    """True: the job gave up as Failed; False: it was requeued."""
    next_attempt_after: float | None
    excluded_nodes: tuple[str, ...] = field(default_factory=tuple)
    gpu_uuids: tuple[str, ...] = field(default_factory=tuple)

    @property
    def next_placement(self) -> str:
        """Human-readable: what happens to the job next."""
        if self.failed:
            return f"none: gave up as Failed after {self.eviction_count} eviction(s)"
        assert self.next_attempt_after is not None
        away = ", ".join(self.excluded_nodes) or "-"
        return f"requeued; not before {_iso(self.next_attempt_after)}, not on {away}"

    def to_json(self) -> dict[str, Any]:
        return {
            "version": REPORT_VERSION,
            "job": self.job,
            "node": self.node,
            "gpus": list(self.gpus),
            "gpuUUIDs": list(self.gpu_uuids),
            "sla": self.sla,
            "predicted": {
                "compute": self.predicted.compute,
                "memory": self.predicted.memory,
                "multiGPU": self.predicted.multi_gpu,
                "throughputFraction": self.predicted.throughput_fraction,
            },
            "observed": {
                "mean": self.observed.mean,
                "min": self.observed.min,
                "last": self.observed.last,
                "windows": self.observed.windows,
                "windowsMissed": self.observed.windows_missed,
                "windowSeconds": self.observed.window_seconds,
            },
            "reason": self.reason,
            "time": _iso(self.time),
            "evictionCount": self.eviction_count,
            "outcome": "failed" if self.failed else "requeued",
            "nextAttemptAfter": (
                None if self.next_attempt_after is None else _iso(self.next_attempt_after)
            ),
            "excludedNodes": list(self.excluded_nodes),
            "nextPlacement": self.next_placement,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str | bytes) -> EvictionReport:
        """Parse ``to_json()``'s output (or its string); raise ValueError on bad input."""
        raw: Any = json.loads(data) if isinstance(data, str | bytes) else data
        if not isinstance(raw, Mapping):
            raise ValueError("an eviction report must be a JSON object")
        try:
            pred, obs = raw["predicted"], raw["observed"]
            nxt = raw.get("nextAttemptAfter")
            return cls(
                job=str(raw["job"]),
                node=str(raw["node"]),
                gpus=tuple(int(g) for g in raw["gpus"]),
                gpu_uuids=tuple(str(u) for u in raw.get("gpuUUIDs", ())),
                sla=float(raw["sla"]),
                predicted=PredictedFactors(
                    compute=float(pred["compute"]),
                    memory=float(pred["memory"]),
                    multi_gpu=float(pred["multiGPU"]),
                    throughput_fraction=float(pred["throughputFraction"]),
                ),
                observed=ObservedSummary(
                    mean=float(obs["mean"]),
                    min=float(obs["min"]),
                    last=float(obs["last"]),
                    windows=int(obs["windows"]),
                    windows_missed=int(obs["windowsMissed"]),
                    window_seconds=float(obs["windowSeconds"]),
                ),
                reason=str(raw["reason"]),
                time=_epoch(raw["time"]),
                eviction_count=int(raw["evictionCount"]),
                failed=raw["outcome"] == "failed",
                next_attempt_after=None if nxt is None else _epoch(nxt),
                excluded_nodes=tuple(str(n) for n in raw.get("excludedNodes", ())),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed eviction report: missing or bad field {exc}") from exc


def build_eviction_report(
    history: SLAHistory,
    decision: SLADecision,
    plan: EvictionPlan,
    predicted: PredictedFactors,
    now: float,
    config: SLAMonitorConfig,
    gpu_uuids: tuple[str, ...] = (),
) -> EvictionReport:
    """The report of an eviction decided by :func:`decide_sla` and planned by
    :func:`plan_after_eviction`; the observed summary covers the windows it considered."""
    considered = history.after_grace(config.grace_seconds)[-config.history_windows :]
    mean, low, last = summarize(considered)
    missed = sum(1 for w in considered if window_missed(w.throughput_fraction, history.sla, config))
    return EvictionReport(
        job=history.job,
        node=history.node,
        gpus=history.gpus,
        gpu_uuids=gpu_uuids,
        sla=history.sla,
        predicted=predicted,
        observed=ObservedSummary(
            mean=mean,
            min=low,
            last=last,
            windows=len(considered),
            windows_missed=missed,
            window_seconds=config.window_seconds,
        ),
        reason=decision.reason,
        time=now,
        eviction_count=plan.eviction_count,
        failed=plan.failed,
        next_attempt_after=plan.next_attempt_after,
        excluded_nodes=plan.excluded_nodes,
    )
