"""The operator's closed loop: what the SLA monitor feeds the bias table, and how it is kept (pure).

Contract. The scheduler corrects every prediction by a learned observed/predicted ratio per
node and job class (``gleaner.scheduler.bias.BiasTable``). In the operator:

- **Feed** (:func:`feed`, the scheduler's, which the simulator feeds its table with too):
  each window the SLA monitor records for a Running job is fed as ``observed`` against the
  placement's *raw* prediction (:func:`raw_prediction`: ``compute * memory * multiGPU`` as
  recorded in ``status.placement``, never the corrected ``throughputFraction``, or the
  correction would chase itself), under the job's class (label ``gleaner.dev/job-class``;
  none: the node-level entry only).
- **Storage** (:func:`to_configmap`, and the scheduler's :func:`from_configmap`, which the
  dashboard and ``gleaner place`` read it back with too): the table lives in one ConfigMap,
  ``gleaner-bias`` in the operator's namespace, key ``bias.json`` (the table's own
  ``to_json``). Its only writer is the active operator replica. Bounded: per node at most
  :data:`PERSISTED_RESIDUALS` residuals are kept (the newest), and when the document would
  still exceed :data:`MAX_BYTES` the per-node residuals are dropped (the ratios and the
  table-wide residuals stay), so it always fits a ConfigMap.
- **Write rate** (:class:`PersistClock`): the table is written when it changed and at
  least ``interval`` seconds after the last write (``--bias-persist-interval``), so a
  thousand running jobs cost one write per interval, not one per window.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gleaner.api.contract import BIAS_CONFIGMAP, BIAS_KEY, LABEL_JOB_CLASS
from gleaner.scheduler.bias import (
    NODE_LEVEL,
    BiasTable,
    feed,
    from_configmap,
    raw_prediction,
)

PERSISTED_RESIDUALS = 64
"""Residuals kept per node in the ConfigMap (the table-wide pool keeps all it holds)."""
MAX_BYTES = 900 * 1024
"""Largest document written (a ConfigMap holds at most 1 MiB)."""


def job_class(labels: Mapping[str, str] | None) -> str:
    """The job class the table learns under (the node-level entry when unlabelled)."""
    return str((labels or {}).get(LABEL_JOB_CLASS) or NODE_LEVEL)


def document(table: BiasTable, max_bytes: int = MAX_BYTES) -> str:
    """The stored form of ``table``: its JSON, bounded (module docstring)."""
    data = table.to_json()
    residuals: dict[str, list[float]] = data.get("residuals") or {}
    data["residuals"] = {
        node: values if node == "" else values[-PERSISTED_RESIDUALS:]
        for node, values in residuals.items()
    }
    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    if len(text.encode()) > max_bytes:
        data["residuals"] = {n: v for n, v in data["residuals"].items() if n == ""}
        text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    return text


def to_configmap(table: BiasTable, namespace: str) -> dict[str, Any]:
    """The ConfigMap that stores ``table``."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": BIAS_CONFIGMAP,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/component": "operator"},
        },
        "data": {BIAS_KEY: document(table)},
    }


@dataclass
class PersistClock:
    """When the table is due for a write: changed since the last one, and ``interval``
    seconds after it (times are the caller's clock, e.g. ``time.monotonic()``)."""

    interval: float
    dirty: bool = False
    last_write: float | None = None

    def changed(self) -> None:
        self.dirty = True

    def due(self, now: float, *, final: bool = False) -> bool:
        """Whether to write now (``final``: the operator is stopping, the interval is moot)."""
        if not self.dirty:
            return False
        return final or self.last_write is None or now - self.last_write >= self.interval

    def written(self, now: float) -> None:
        self.dirty = False
        self.last_write = now

    def failed(self, now: float) -> None:
        """A write failed: still changed, tried again one interval later."""
        self.last_write = now


__all__ = [
    "BIAS_CONFIGMAP",
    "BIAS_KEY",
    "MAX_BYTES",
    "PERSISTED_RESIDUALS",
    "PersistClock",
    "document",
    "feed",
    "from_configmap",
    "job_class",
    "raw_prediction",
    "to_configmap",
]
