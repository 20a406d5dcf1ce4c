"""Small objects that many tests build: a placement, a queued job, a container's environment.

Each helper builds through the API's own models and the operator's own types, so a test
sees exactly what the code under test would see. Every value a test asserts on is an
argument: the defaults are only the ones most tests share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gleaner.api import OfflineJob, Placement
from gleaner.operator.placement import QueuedJob
from gleaner.perfmodel import NodeSummary
from gleaner.testing.kube import offlinejob_manifest


def make_placement(
    node: str = "n1",
    gpus: Sequence[int] = (0,),
    *,
    decided_at: datetime,
    uuids: Sequence[str] = (),
    compute: float = 0.9,
    memory: float = 1.0,
    multi_gpu: float = 1.0,
    fraction: float | None = None,
    tokens_per_second: float | None = None,
) -> Placement:
    """A job's placement on ``node``'s ``gpus``, with the model's three factors.

    ``fraction`` (the predicted throughput fraction) defaults to the factors' product;
    give it where a test means a bias-corrected or otherwise different value."""
    return Placement(
        node=node,
        gpu_indices=list(gpus),
        gpu_uuids=list(uuids),
        compute=compute,
        memory=memory,
        multi_gpu=multi_gpu,
        throughput_fraction=compute * memory * multi_gpu if fraction is None else fraction,
        predicted_tokens_per_second=tokens_per_second,
        decided_at=decided_at,
    )


def make_queued_job(name: str, **manifest: Any) -> QueuedJob:
    """The OfflineJob ``offlinejob_manifest(name, **manifest)`` waiting for a placement,
    with its inline profile."""
    job = OfflineJob.model_validate(offlinejob_manifest(name, **manifest))
    assert job.spec.profile is not None, "make_queued_job() needs a job with an inline profile"
    return QueuedJob(job, job.spec.profile)


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    """A Pod container's environment as a dict (a variable without a value reads as "")."""
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def mean_idle(summary: NodeSummary) -> float:
    """A node summary's mean offline compute fraction over its GPUs."""
    return float(summary.compute_fractions().mean())
