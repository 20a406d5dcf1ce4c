"""Pure: the admission webhook's answer for an OfflineJob being created: add the finalizer.

Contract (docs/operator.md, "Webhook"):

- ``is_offline_job(kind, resource)`` says whether an AdmissionReview's ``request.kind`` or
  ``request.resource`` names Gleaner's OfflineJob (group ``gleaner.dev``).
- ``offline_job_mutation(job, operation)`` is the decision for one such review: always
  allowed (an OfflineJob is never refused here: validation is the operator's, reported in
  the job's status conditions), with a JSON Patch (RFC 6902) that appends
  ``gleaner.dev/finalizer`` to ``metadata.finalizers`` when the request is a ``CREATE`` of
  an object that lacks it and is not being deleted. Other finalizers are kept, in order;
  a missing or null list is created. Anything else (another operation, no object, metadata
  that is not an object, the finalizer already there, a ``deletionTimestamp``) gets an
  empty patch.

Why at admission: the operator adds the finalizer itself when a job arrives without it
(``handlers.jobs``), one metadata patch per job; the webhook puts it on the stored object
instead, so that patch and its echo never happen. The operator's patch stays the fallback
for jobs created while the webhook is unreachable (the chart registers it with
failurePolicy Ignore).

No I/O: the webhook server (``gleaner.operator.webhook``) calls these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gleaner.api import OfflineJob
from gleaner.api.common import GROUP
from gleaner.api.contract import FINALIZER
from gleaner.operator.injection import JsonPatch, Mutation

__all__ = ["is_offline_job", "offline_job_mutation"]


def is_offline_job(kind: Mapping[str, Any], resource: Mapping[str, Any]) -> bool:
    """Whether a review's ``request.kind`` (group, version, kind) or ``request.resource``
    (group, version, resource) is Gleaner's OfflineJob."""
    if kind.get("group") == GROUP and kind.get("kind") == OfflineJob.KIND:
        return True
    return resource.get("group") == GROUP and resource.get("resource") == OfflineJob.PLURAL


def offline_job_mutation(job: object, operation: str) -> Mutation:
    """The finalizer patch for ``job`` (see the module docstring); never a refusal."""
    if operation != "CREATE":
        return Mutation(reason=f"not a creation ({operation or 'no operation'})")
    if not isinstance(job, Mapping):
        return Mutation(reason="no object")
    metadata = job.get("metadata")
    if metadata is None:
        metadata = {}
    elif not isinstance(metadata, Mapping):
        return Mutation(reason="unreadable metadata")
    if metadata.get("deletionTimestamp"):
        return Mutation(reason="being deleted")
    finalizers = metadata.get("finalizers")
    if isinstance(finalizers, list) and FINALIZER in finalizers:
        return Mutation(reason="already")
    patch: JsonPatch
    if isinstance(finalizers, list):
        # "-" appends: the other finalizers keep their places.
        patch = [{"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}]
    elif job.get("metadata") is not None:
        # "add" on a member that exists (null) replaces it, so one op covers both.
        patch = [{"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]
    else:
        patch = [{"op": "add", "path": "/metadata", "value": {"finalizers": [FINALIZER]}}]
    return Mutation(patch=patch, reason="finalizer added")
