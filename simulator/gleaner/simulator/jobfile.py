"""The simulated cluster's offline queue as OfflineJob manifests (pure except the writer).

Contract. :func:`job_manifests` turns the queue a scenario cluster draws for a seed
(``gleaner.simulator.cluster.make_jobs``: sizes, throughput SLAs and profiles from the
engine model, the same draws the cluster simulation makes) into OfflineJob documents that
``gleaner place --jobs`` and ``gleaner backtest --jobs`` read: ``spec.gpus``,
``spec.throughputSLA``, ``spec.slaWindow`` (the scenario's, when it sets one) and an inline
``spec.profile``; the Pod template is a placeholder (nothing runs it). Every document
validates as the API's ``OfflineJob``. :func:`write_job_manifests` writes them as one
multi-document YAML file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gleaner.api import API_VERSION
from gleaner.simulator.cluster import make_jobs
from gleaner.simulator.cluster_scenario import ClusterScenario

NAMESPACE = "batch"


def _duration(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes:g}m" if minutes == int(minutes) else f"{seconds:g}s"


def job_manifests(
    cfg: ClusterScenario, seed: int, count: int | None = None
) -> list[dict[str, Any]]:
    """The first ``count`` jobs (None: all) of ``cfg``'s queue for ``seed``, as manifests."""
    jobs = make_jobs(cfg, np.random.default_rng(seed))
    out: list[dict[str, Any]] = []
    for job in jobs if count is None else jobs[:count]:
        p = job.profile
        spec: dict[str, Any] = {
            "gpus": job.gpus,
            "throughputSLA": job.sla,
            "template": {"spec": {"containers": [{"name": "worker", "image": "busybox"}]}},
            "profile": {
                "standaloneTokensPerSecond": p.standalone_tokens_per_second,
                "requiredMemoryGiB": p.required_memory_gib,
                "memoryCurve": [
                    {"memoryGiB": m, "tokensPerSecond": t}
                    for m, t in zip(p.curve_memory_gib, p.curve_tokens_per_second, strict=True)
                ],
                "memoryDeficitCoefficient": p.memory_deficit_coefficient,
            },
        }
        if job.sla_window_s is not None:
            spec["slaWindow"] = _duration(job.sla_window_s)
        namespace, _, name = job.key.rpartition("/")
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "OfflineJob",
                "metadata": {"name": name, "namespace": namespace or NAMESPACE},
                "spec": spec,
            }
        )
    return out


def write_job_manifests(manifests: list[dict[str, Any]], path: Path) -> None:
    """Write ``manifests`` to ``path`` as one multi-document YAML file."""
    import yaml

    path.write_text(yaml.safe_dump_all(manifests, sort_keys=False))


__all__ = ["job_manifests", "write_job_manifests"]
