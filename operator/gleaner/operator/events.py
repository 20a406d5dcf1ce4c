"""Posting Kubernetes Events about OfflineJobs (core v1 Events, through ``KubeClient``).

Contract: ``post_event`` creates one ``v1/Event`` involving the job, with the given type
(``Normal``/``Warning``), reason (CamelCase: ``Scheduled``, ``FailedScheduling``,
``InvalidSpec``, ``SLAViolation``, ``PodFailed``...) and message (cut to 1 KiB). It never
raises: an Event is advisory, so a failure is logged and the handler goes on.
``build_event`` is the pure part. ``build_object_event`` / ``post_object_event`` do the same
for any involved object (the NodeTrace or Node of an uninstrumented GPU: cluster-scoped
objects' Events live in the ``default`` namespace, where ``kubectl describe`` finds them).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from gleaner.api import API_VERSION, OfflineJob
from gleaner.clients.kube import KubeClient, KubeError

logger = logging.getLogger(__name__)

COMPONENT = "gleaner-operator"
MAX_MESSAGE = 1024


CLUSTER_EVENTS_NAMESPACE = "default"
"""Where Events about cluster-scoped objects (Nodes, NodeTraces) are written."""


def build_event(
    namespace: str,
    name: str,
    uid: str | None,
    type_: str,
    reason: str,
    message: str,
    now: datetime | None = None,
) -> dict[str, Any]:
    involved = {
        "apiVersion": API_VERSION,
        "kind": OfflineJob.KIND,
        "name": name,
        "namespace": namespace,
        **({"uid": uid} if uid else {}),
    }
    return build_object_event(involved, namespace, type_, reason, message, now)


def build_object_event(
    involved: dict[str, str],
    namespace: str,
    type_: str,
    reason: str,
    message: str,
    now: datetime | None = None,
) -> dict[str, Any]:
    """An Event about ``involved`` (apiVersion, kind, name[, namespace, uid]) in ``namespace``."""
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
        "involvedObject": dict(involved),
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
    }


async def post_event(
    client: KubeClient,
    namespace: str,
    name: str,
    uid: str | None,
    type_: str,
    reason: str,
    message: str,
) -> None:
    body = build_event(namespace, name, uid, type_, reason, message)
    try:
        await client.create(f"/api/v1/namespaces/{namespace}/events", body)
    except KubeError as exc:
        logger.warning("could not post event %s for %s/%s: %s", reason, namespace, name, exc)


async def post_object_event(
    client: KubeClient,
    involved: dict[str, str],
    type_: str,
    reason: str,
    message: str,
) -> None:
    """``post_event`` for any object (cluster-scoped ones: Events in the default namespace)."""
    namespace = involved.get("namespace") or CLUSTER_EVENTS_NAMESPACE
    body = build_object_event(involved, namespace, type_, reason, message)
    try:
        await client.create(f"/api/v1/namespaces/{namespace}/events", body)
    except KubeError as exc:
        logger.warning(
            "could not post event %s for %s %s: %s", reason, involved["kind"], involved["name"], exc
        )
