"""The agent's Kubernetes I/O: write its node's NodeTrace; learn its node's offline Pods.

Contract.
- :func:`write_nodetrace` creates-or-patches the cluster-scoped NodeTrace named after the
  node (JSON merge patch of ``/status``; a missing object is created first; 409 conflicts
  and 5xx answers are retried with backoff, up to ``attempts``, the create included). It
  raises :class:`ReportError` and nothing else when the write fails (API unreachable, or
  an answer such as 403 that no retry fixes); the caller keeps accumulating and the next
  report covers the gap (:mod:`gleaner.runtime_agent.reporting`).
- :func:`write_nodehistory` creates-or-patches the node's NodeHistory status (the hours
  of the day and the inventory they were recorded on) the same way, with the same retries;
  the agent writes it only when an hour completes, so the 15 s NodeTrace reports, which
  every NodeTrace watcher receives whole, stay small.
- :func:`read_hours` reads the time-of-day profile stored in the node's NodeHistory
  (``status.hours``), so that a restarted agent goes on from it; without a NodeHistory, the
  hours an agent before NodeHistory kept in the NodeTrace's ``status.hours`` (``legacy``
  True: the caller copies them to the NodeHistory); ``None`` when neither holds any. It
  raises :class:`ReportError` when a read fails.
- :func:`offline_jobs_from_pods` (pure) maps Pods labelled ``OFFLINE_SELECTOR`` on the node
  to ``{gpu: "namespace/job"}`` from the label ``LABEL_JOB`` and the annotation
  ``ANNOTATION_GPUS`` (names of ``gleaner.api.contract``); finished Pods are skipped.
- :class:`PodWatcher` lists, then watches those Pods (``spec.nodeName=<node>``) in a thread
  and calls back with the new mapping on every change; errors re-list after a pause.
- :class:`PodNames` answers pod UID → ``namespace/name`` for the node's pods from a cache,
  re-listing them (``spec.nodeName=<node>``) in a thread when asked for an unknown UID, at
  most every 30 s (the uninstrumented-process report).
- :func:`load_client` is the agent's connection: ``gleaner.clients.kube``'s synchronous
  client (in-cluster, else the kubeconfig; :class:`~gleaner.clients.kube.KubeConfigError`
  when there is neither). Both calls above run in threads of their own, never on the
  agent's event loop, so a slow API server cannot delay a gate.

RBAC: ``gleaner.runtime_agent.rbac.AGENT_RULES`` (nodetraces get/create, nodetraces/status
patch, nodehistories get/create, nodehistories/status patch, pods list/watch).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gleaner.api import (
    NodeHistory,
    NodeHistoryStatus,
    NodeTrace,
    NodeTraceSpec,
    NodeTraceStatus,
    ObjectMeta,
)
from gleaner.api.contract import (
    ANNOTATION_GPUS,
    LABEL_JOB,
    LABEL_ROLE,
    OFFLINE_SELECTOR,
    ROLE_OFFLINE,
    parse_gpus_annotation,
)
from gleaner.clients.kube import (
    ConflictError,
    KubeError,
    SyncKubeClient,
    nodehistories_path,
    nodehistory_status_path,
    nodetrace_status_path,
    nodetraces_path,
    pods_path,
)
from gleaner.perfmodel.diurnal import DiurnalProfile
from gleaner.perfmodel.hours import profile_from_nodetrace

log = logging.getLogger("gleaner.runtime_agent.kube")

NULLABLE_STATUS_KEYS = ("window", "memory", "idleFraction", "harvestableMemoryP10GiB")
LEGACY_HOURS_KEY = "hours"
"""Where agents before NodeHistory kept the hours in the NodeTrace status: a report clears
it (``clear_legacy_hours``) once the hours are in the NodeHistory."""
RETRIED_STATUSES = frozenset({0, 409, 429})
"""Worth another try: unreachable (0), a conflict, throttling; 5xx too (see below)."""


class ReportError(RuntimeError):
    """The NodeTrace could not be written."""


def load_client(kubeconfig: str | None = None) -> SyncKubeClient:
    """The agent's API client: in-cluster, else ``kubeconfig`` (else ``KUBECONFIG``, else
    ``~/.kube/config``). Raises :class:`~gleaner.clients.kube.KubeConfigError`."""
    # One retry inside the client (a 401 reloads a rotated token); write_nodetrace retries
    # the rest itself, with its own backoff.
    return SyncKubeClient.from_config(kubeconfig, retries=1)


def status_patch(status: NodeTraceStatus, clear_legacy_hours: bool = True) -> dict[str, Any]:
    """The merge patch body: the status, with absent optional fields cleared explicitly
    (and the hours an older agent kept in the NodeTrace, with ``clear_legacy_hours``)."""
    body = status.to_k8s()
    for key in NULLABLE_STATUS_KEYS:
        body.setdefault(key, None)
    if clear_legacy_hours:
        body[LEGACY_HOURS_KEY] = None
    return {"status": body}


def write_nodetrace(
    client: SyncKubeClient,
    node: str,
    status: NodeTraceStatus,
    *,
    attempts: int = 5,
    backoff_s: float = 0.2,
    timeout_s: float = 10.0,
    clear_legacy_hours: bool = True,
) -> None:
    """Create-or-patch the node's NodeTrace status (see the module docstring)."""
    _write_status(
        client,
        f"NodeTrace {node}",
        nodetrace_status_path(node),
        lambda: _create(client, nodetraces_path(), _bare(NodeTrace, node), timeout_s),
        status_patch(status, clear_legacy_hours),
        attempts=attempts,
        backoff_s=backoff_s,
        timeout_s=timeout_s,
    )


def write_nodehistory(
    client: SyncKubeClient,
    node: str,
    status: NodeHistoryStatus,
    *,
    attempts: int = 5,
    backoff_s: float = 0.2,
    timeout_s: float = 10.0,
) -> None:
    """Create-or-patch the node's NodeHistory status (see the module docstring)."""
    _write_status(
        client,
        f"NodeHistory {node}",
        nodehistory_status_path(node),
        lambda: _create(client, nodehistories_path(), _bare(NodeHistory, node), timeout_s),
        {"status": status.to_k8s()},
        attempts=attempts,
        backoff_s=backoff_s,
        timeout_s=timeout_s,
    )


def _write_status(
    client: SyncKubeClient,
    what: str,
    status_path: str,
    create: Callable[[], None],
    body: dict[str, Any],
    *,
    attempts: int,
    backoff_s: float,
    timeout_s: float,
) -> None:
    last: Exception | None = None
    missing = False
    for attempt in range(attempts):
        try:
            if missing:
                create()
                missing = False
            client.patch(status_path, body, request_timeout=timeout_s)
            return
        except KubeError as exc:
            last = exc
            if exc.status == 404 and not missing:
                missing = True  # create it first, at once
                continue
            if exc.status not in RETRIED_STATUSES and not 500 <= exc.status < 600:
                raise ReportError(f"{what}: HTTP {exc.status} {exc.message}") from exc
        except Exception as exc:  # timeouts: the API is down or stuck
            last = exc
        time.sleep(backoff_s * (2**attempt))
    raise ReportError(f"{what}: giving up after {attempts} attempts: {last}")


def read_hours(
    client: SyncKubeClient, node: str, *, timeout_s: float = 10.0
) -> tuple[DiurnalProfile | None, bool]:
    """(the stored profile, whether it came from the NodeTrace: ``legacy``); see the module
    docstring."""
    history = _get(client, nodehistories_path(node), f"NodeHistory {node}", timeout_s)
    if history is not None:
        return _profile(history, f"NodeHistory {node}"), False
    trace = _get(client, nodetraces_path(node), f"NodeTrace {node}", timeout_s)
    profile = None if trace is None else _profile(trace, f"NodeTrace {node}")
    return profile, profile is not None


def _get(client: SyncKubeClient, path: str, what: str, timeout_s: float) -> Any:
    try:
        return client.get(path, request_timeout=timeout_s)
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise ReportError(f"{what}: HTTP {exc.status} {exc.message}") from exc
    except Exception as exc:  # timeouts: the API is down or stuck
        raise ReportError(f"{what}: {exc}") from exc


def _profile(obj: Mapping[str, Any], what: str) -> DiurnalProfile | None:
    try:
        return profile_from_nodetrace(obj)
    except ValueError as exc:  # a stored status this agent cannot read: start afresh
        log.warning("%s: stored hours unreadable, starting afresh: %s", what, exc)
        return None


def _bare(kind: type[NodeTrace] | type[NodeHistory], node: str) -> dict[str, Any]:
    """The object named after ``node``, without a status (the status is patched)."""
    obj = kind(metadata=ObjectMeta(name=node), spec=NodeTraceSpec(node_name=node)).to_k8s()
    obj.pop("status", None)
    return obj


def _create(client: SyncKubeClient, path: str, obj: dict[str, Any], timeout_s: float) -> None:
    """Create the object (no status); one that exists already is fine."""
    with contextlib.suppress(ConflictError):  # created meanwhile, fine
        client.create(path, obj, request_timeout=timeout_s)


def offline_jobs_from_pods(pods: Sequence[Mapping[str, Any]], node: str) -> dict[int, str]:
    """``{gpu: "namespace/job"}`` of the node's running or pending offline Pods."""
    out: dict[int, str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        labels = meta.get("labels") or {}
        if labels.get(LABEL_ROLE) != ROLE_OFFLINE or spec.get("nodeName") != node:
            continue
        if phase in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
            continue
        job = labels.get(LABEL_JOB)
        if not job:
            continue
        annotation = (meta.get("annotations") or {}).get(ANNOTATION_GPUS)
        for gpu in parse_gpus_annotation(annotation) or ():
            out[gpu] = f"{meta.get('namespace', 'default')}/{job}"
    return out


class PodWatcher:
    """List+watch the node's offline Pods in a daemon thread (see the module docstring)."""

    def __init__(
        self,
        client: SyncKubeClient,
        node: str,
        on_change: Callable[[dict[int, str]], None],
        *,
        watch_timeout_s: int = 60,
        retry_s: float = 2.0,
    ) -> None:
        self.client = client
        self.node = node
        self.on_change = on_change
        self.watch_timeout_s = watch_timeout_s
        self.retry_s = retry_s
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-watcher", daemon=True)
        self._pods: dict[str, dict[str, Any]] = {}
        self._last: dict[int, str] | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        selectors = {
            "label_selector": OFFLINE_SELECTOR,
            "field_selector": f"spec.nodeName={self.node}",
        }
        while not self._stop.is_set():
            try:
                items, version = self.client.list_versioned(pods_path(), **selectors)
                self._pods = {_key(p): p for p in items}
                self._publish()
                events = self.client.watch(
                    pods_path(),
                    resource_version=version,
                    timeout_seconds=self.watch_timeout_s,
                    **selectors,
                )
                try:
                    for event in events:
                        if self._stop.is_set():
                            break
                        if event.type == "DELETED":
                            self._pods.pop(_key(event.object), None)
                        elif event.type in ("ADDED", "MODIFIED"):
                            self._pods[_key(event.object)] = event.object
                        self._publish()
                finally:
                    events.close()
            except Exception as exc:
                self.errors += 1
                log.warning("pod watch on %s failed: %s; re-listing", self.node, exc)
                self._stop.wait(self.retry_s)

    def _publish(self) -> None:
        jobs = offline_jobs_from_pods(list(self._pods.values()), self.node)
        if jobs != self._last:
            self._last = jobs
            self.on_change(jobs)


class PodNames:
    """Pod UID → ``namespace/name`` of the pods on this node, for the uninstrumented-process
    report (docs/agent.md). Answers from a cache at once (the agent's loop asks); an unknown
    UID starts one re-list of the node's pods in a daemon thread, at most every
    ``refresh_s``, and is answered None until it is known."""

    def __init__(
        self,
        client: SyncKubeClient,
        node: str,
        *,
        refresh_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.node = node
        self.refresh_s = refresh_s
        self.clock = clock
        self.errors = 0
        self._names: dict[str, str] = {}
        self._listed_at: float | None = None
        self._lock = threading.Lock()

    def __call__(self, uid: str) -> str | None:
        name = self._names.get(uid)
        if name is None:
            self._maybe_refresh()
        return name

    def refresh(self) -> None:
        """List the node's pods now (blocking)."""
        try:
            pods = self.client.list(pods_path(), field_selector=f"spec.nodeName={self.node}")
        except Exception as exc:  # a failed list leaves the names as they were
            self.errors += 1
            log.warning("pod list on %s failed: %s", self.node, exc)
            return
        names: dict[str, str] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            if meta.get("uid"):
                names[str(meta["uid"])] = _key(pod)
        self._names = names

    def _maybe_refresh(self) -> None:
        now = self.clock()
        with self._lock:
            if self._listed_at is not None and now - self._listed_at < self.refresh_s:
                return
            self._listed_at = now
        threading.Thread(target=self.refresh, name="pod-names", daemon=True).start()


def _key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
