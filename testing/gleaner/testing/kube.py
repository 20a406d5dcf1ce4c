"""A Kubernetes API server for tests: kmock's emulator on a loopback port, plus a kubeconfig.

Contract: ``KubeEmulator`` starts kmock's ``KubernetesEmulator`` (the API mock server by
kopf's author) as a real HTTP server on ``127.0.0.1:<free port>`` in a background thread,
registers the resources Gleaner's processes use (OfflineJob and NodeTrace from the generated
CRDs in ``crds/``, or from the pydantic models when the manifests are not there; Pods,
ConfigMaps, Events, Namespaces, Nodes (with a status subresource, like the kubelet's),
Leases, and kopf's peering resources with a peering object named ``gleaner``) and writes a
kubeconfig that points at it. Processes under test (the real
``gleaner operator``) talk to it over HTTP exactly as they would to a cluster; nothing is
monkey-patched.

kmock stores objects as plain JSON and merges patches, which is what kopf needs. A real API
server does a little more, and the operator relies on some of it, so ``ApiServerEmulator``
(a subclass, as kmock's docs invite) adds, honestly and minimally:

- ``metadata.uid``, ``creationTimestamp``, ``generation`` and ``namespace`` on create, and a
  name from ``generateName`` (kopf posts Events with ``generateName``); ``generation`` + 1
  on a merge patch of the object's ``spec`` (the operator judges a spec by its generation);
- a cluster-wide, increasing ``metadata.resourceVersion`` on every create and patch, merge
  or JSON patch (kopf waits for the patched version to come back through its watch, and
  guards finalizer patches with a JSON-patch ``test`` of the version, which fails with 422
  as on a real API server);
- the ``status`` subresource rule: a patch to ``.../status`` changes only ``status``, a patch
  to the object itself never changes ``status``;
- a merge patch that names a ``metadata.resourceVersion`` other than the stored one is
  refused with 409 (the precondition of the operator's status writes on a held copy);
- equality-based ``labelSelector`` filtering of lists and watches (``k=v``, ``k==v``,
  ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``);
- watches that lose nothing: kmock's own watch snapshots the objects and subscribes to its
  event bus only afterwards, so a change in between was lost; here both happen under one
  lock. Plus ``timeoutSeconds`` (kmock streams forever otherwise) and ``resourceVersion``:
  objects not changed since the given version are not replayed, as on a real watch
  (kopf would otherwise act on a stale copy and fail its optimistic-concurrency test).

It serves the Namespace list and watch itself (kmock's URL parser cannot route
``/api/v1/namespaces``; namespaces are static in tests), and it forgets requests once
served (kmock keeps them all for assertions and scans them on every new request, which
made long runs quadratic); tests assert on objects instead. What it does keep is the set of
API accesses (``Access``: client, API group, resource, RBAC verb) that ``KubeEmulator.accesses``
returns, so that a test can hold a process's calls against its declared RBAC rules
(``ungranted(accesses, rules)`` lists those no rule grants).

What it still does not do (and the tests do not rely on): no kubelet (tests move Pods
through their phases by patching ``status.phase``), no garbage collection through
ownerReferences (the operator deletes its Pods itself), no admission or schema validation,
no optimistic-concurrency conflicts on writes without a version, no server-side apply or
JSON-patch.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, Self, TypeVar, cast

import attrs
import kmock
import yaml

from gleaner.clients.kube import Credentials, SyncKubeClient

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[3]
CRD_DIR = REPO_ROOT / "crds"
PEERING_NAME = "gleaner"

# ---------------------------------------------------------------------------------------
# Label selectors (pure)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """One requirement of a label selector."""

    key: str
    op: str  # "=", "!=", "exists", "!exists", "in", "notin"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.op:
            case "=":
                return present and value == self.values[0]
            case "!=":
                return not present or value != self.values[0]
            case "exists":
                return present
            case "!exists":
                return not present
            case "in":
                return present and value in self.values
            case "notin":
                return not present or value not in self.values
        raise ValueError(f"unknown operator {self.op!r}")


_SET_RE = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(selector: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(selector: str | None) -> list[Requirement]:
    """Parse a Kubernetes label selector string into requirements (empty: match all)."""
    reqs: list[Requirement] = []
    for part in _split_selector(selector or ""):
        if m := _SET_RE.match(part):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(Requirement(m.group(1), m.group(2), values))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            reqs.append(Requirement(key.strip(), "!=", (value.strip(),)))
        elif "==" in part:
            key, value = part.split("==", 1)
            reqs.append(Requirement(key.strip(), "=", (value.strip(),)))
        elif "=" in part:
            key, value = part.split("=", 1)
            reqs.append(Requirement(key.strip(), "=", (value.strip(),)))
        elif part.startswith("!"):
            reqs.append(Requirement(part[1:].strip(), "!exists"))
        else:
            reqs.append(Requirement(part, "exists"))
    return reqs


def selector_matches(reqs: Sequence[Requirement], obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


# ---------------------------------------------------------------------------------------
# The emulator
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Access:
    """One kind of API access a client made: what an RBAC rule must grant for it."""

    client: str
    """The product of the request's User-Agent (``kopf``, ``Python``, ``OpenAPI-Generator``)."""
    api_group: str
    """``""`` for the core API."""
    resource: str
    """The plural, with ``/subresource`` when one was addressed (``offlinejobs/status``)."""
    verb: str
    """The RBAC verb: get, list, watch, create, update, patch or delete."""


_VERBS = {
    kmock.action.FETCH: "get",
    kmock.action.LIST: "list",
    kmock.action.WATCH: "watch",
    kmock.action.CREATE: "create",
    kmock.action.UPDATE: "patch",
    kmock.action.DELETE: "delete",
}


def ungranted(accesses: Iterable[Access], rules: Iterable[Mapping[str, Any]]) -> list[Access]:
    """The accesses that no RBAC rule grants (group, resource and verb all in one rule)."""
    granted = {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    return [a for a in accesses if (a.api_group, a.resource, a.verb) not in granted]


def _client_of(headers: Mapping[str, str]) -> str:
    agent = next((v for k, v in headers.items() if k.lower() == "user-agent"), "")
    return agent.split("/", 1)[0].strip() or "unknown"


@attrs.define(kw_only=True)
class ApiServerEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with the few API-server behaviours listed in the module docstring."""

    _resource_version: int = attrs.field(default=0, init=False)
    # Appended from the server's loop, copied by tests from theirs: a list (not a set) so the
    # copy never races a resize. Each kind of access is kept once.
    accesses: list[Access] = attrs.field(factory=list, init=False)
    _access_keys: set[Access] = attrs.field(factory=set, init=False)

    def _record(self, headers: Mapping[str, str], group: str, resource: str, verb: str) -> None:
        access = Access(_client_of(headers), group, resource, verb)
        if access not in self._access_keys:
            self._access_keys.add(access)
            self.accesses.append(access)

    def _record_request(self, request: Any) -> None:
        resource = request.resource
        if resource is None or not resource.plural:
            return  # discovery (/api, /apis) and non-Kubernetes paths need no RBAC rule
        verb = _VERBS.get(request.action) if request.action is not None else None
        if verb is None:
            method = str(getattr(request.method, "value", request.method)).upper()
            verb = {"PUT": "update", "POST": "create"}.get(method, f"?{method}")
        plural = resource.plural + (f"/{request.subresource}" if request.subresource else "")
        self._record(request.headers, resource.group or "", plural, verb)

    def _next_resource_version(self) -> str:
        self._resource_version += 1
        return str(self._resource_version)

    def _has_status_subresource(self, resource: Any) -> bool:
        if resource not in self.resources:
            return False
        return "status" in self.resources[resource].subresources

    async def _handle(self, request: Any) -> Any:
        self._record_request(request)
        data = request.data
        if request.resource is not None and isinstance(data, dict):
            if request.action == kmock.action.CREATE:
                self._stamp_create(request, data)
            elif request.action == kmock.action.UPDATE:
                self._stamp_patch(request, data)
        elif request.action == kmock.action.UPDATE and isinstance(data, list):
            # A JSON patch (kopf adds finalizers with one, guarded by a 'test' of the version).
            self._check_json_patch_tests(request, data)
            data.append(
                {
                    "op": "add",
                    "path": "/metadata/resourceVersion",
                    "value": self._next_resource_version(),
                }
            )
        try:
            return await super()._handle(request)
        finally:
            self._forget(request)

    def _forget(self, request: Any) -> None:
        # kmock keeps every request for assertions and matches each new request by scanning
        # that history (O(n) per request, O(n^2) per run): a few thousand requests made the
        # emulator slower than the operator under test. Served requests are dropped.
        for requests in [self._requests, *(p._requests for p in self._payloads)]:
            with contextlib.suppress(ValueError):
                requests.remove(request)

    async def __call__(self, raw_request: Any) -> Any:
        # kmock's URL parser reads ``/api/v1/namespaces`` as "a namespace segment without a
        # name" and fails, so the Namespace list and watch (kopf reads them when it serves
        # named namespaces) are served here, from the same stored objects.
        if raw_request.method == "GET" and raw_request.path.rstrip("/") == "/api/v1/namespaces":
            return await self._serve_namespaces(raw_request)
        return await super().__call__(raw_request)

    async def _serve_namespaces(self, raw_request: Any) -> Any:
        import json as _json

        from aiohttp import web

        verb = "watch" if raw_request.query.get("watch") == "true" else "list"
        self._record(raw_request.headers, "", "namespaces", verb)

        async with self._lock:
            items = [
                dict(obj.last.raw)
                for (res, _ns, _name), obj in list(self.objects.items())
                if res == kmock.resource("v1/namespaces") and not obj.deleted
            ]
        if raw_request.query.get("watch") != "true":
            return web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "NamespaceList",
                    "metadata": {"resourceVersion": str(self._resource_version)},
                    "items": items,
                }
            )
        since = _int_or_none(raw_request.query.get("resourceVersion"))
        response = web.StreamResponse()
        await response.prepare(raw_request)
        for item in items:
            version = _int_or_none((item.get("metadata") or {}).get("resourceVersion"))
            if since is None or version is None or version > since:
                event = {"type": "ADDED", "object": item}
                await response.write(_json.dumps(event).encode() + b"\n")
        # Namespaces do not change in these tests: hold the watch open until it times out.
        await asyncio.sleep(float(raw_request.query.get("timeoutSeconds") or 3600))
        await response.write_eof()
        return response

    def _check_precondition(self, request: Any, data: dict[str, Any]) -> None:
        """A merge patch naming a ``metadata.resourceVersion`` other than the stored one is
        a 409 Conflict, as on a real API server (the operator's status writes on a held
        copy of a job rely on it)."""
        wanted = (data.get("metadata") or {}).get("resourceVersion")
        key = (request.resource, request.namespace, request.name)
        if not wanted or key not in self.objects or self.objects[key].deleted:
            return
        stored = (self.objects[key].last.raw.get("metadata") or {}).get("resourceVersion")
        if str(wanted) != str(stored):
            raise kmock.KubernetesError(
                status=409,
                reason="Conflict",
                message=f"the object has been modified (version {wanted}, now {stored})",
            )

    def _check_json_patch_tests(self, request: Any, ops: list[Any]) -> None:
        """A failed ``test`` op is a 422, as on a real API server (kopf then re-reads)."""
        import jsonpatch

        tests = [op for op in ops if isinstance(op, dict) and op.get("op") == "test"]
        key = (request.resource, request.namespace, request.name)
        if not tests or key not in self.objects or self.objects[key].deleted:
            return
        try:
            jsonpatch.apply_patch(dict(self.objects[key].last.raw), tests)
        except jsonpatch.JsonPatchException as exc:
            raise kmock.KubernetesError(status=422, reason="Invalid", message=str(exc)) from exc

    def _stamp_create(self, request: Any, data: dict[str, Any]) -> None:
        meta = data.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{secrets.token_hex(3)}"
        if request.namespace and not meta.get("namespace"):
            meta["namespace"] = request.namespace
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["generation"] = 1
        meta["resourceVersion"] = self._next_resource_version()
        if self._has_status_subresource(request.resource):
            data.pop("status", None)

    def _stamp_patch(self, request: Any, data: dict[str, Any]) -> None:
        self._check_precondition(request, data)
        if self._has_status_subresource(request.resource):
            if request.subresource == "status":
                for key in [k for k in data if k not in ("status", "metadata")]:
                    del data[key]
                meta = data.get("metadata") or {}
                data["metadata"] = {k: v for k, v in meta.items() if k == "resourceVersion"}
            else:
                data.pop("status", None)
        data.setdefault("metadata", {})
        if data["metadata"] is None:
            data["metadata"] = {}
        ref = (request.resource, request.namespace, request.name)
        if request.subresource is None and "spec" in data and ref in self.objects:
            stored = self.objects[ref].last.raw.get("metadata") or {}
            data["metadata"]["generation"] = int(stored.get("generation") or 0) + 1
        data["metadata"]["resourceVersion"] = self._next_resource_version()

    async def _serve_list(self, request: Any) -> Any:
        result = await super()._serve_list(request)
        reqs = parse_label_selector(request.params.get("labelSelector"))
        if reqs and isinstance(result, dict):
            result["items"] = [o for o in result["items"] if selector_matches(reqs, o)]
        if isinstance(result, dict):
            result["metadata"] = {"resourceVersion": str(self._resource_version)}
        return result

    async def _serve_watch(self, request: Any) -> AsyncIterator[Any]:
        # Replaces kmock's watch: it snapshots the objects first and subscribes to its event
        # bus only afterwards, so a change made in between was lost (kopf then waited forever
        # for the version it had just patched). Here the bus mark is taken under the same
        # lock as the snapshot: nothing is lost (a duplicate is harmless).
        yield b""
        reqs = parse_label_selector(request.params.get("labelSelector"))
        since = _int_or_none(request.params.get("resourceVersion"))
        timeout_param = request.params.get("timeoutSeconds")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(timeout_param) if timeout_param else None
        bus = self._buses[request.resource]

        def wanted(event: dict[str, Any], replay: bool) -> bool:
            obj = event.get("object") or {}
            meta = obj.get("metadata") or {}
            if request.namespace is not None and meta.get("namespace") != request.namespace:
                return False
            if request.name is not None and meta.get("name") != request.name:
                return False
            if reqs and not selector_matches(reqs, obj):
                return False
            version = _int_or_none(meta.get("resourceVersion"))
            stale = since is not None and version is not None and version <= since
            # A watch from a version shows only what changed after it (deletions always).
            return not (stale and (replay or event.get("type") != "DELETED"))

        async with self._lock:
            marker = await bus.mark()
            snapshot = [
                {"type": "ADDED", "object": obj.raw}
                for (res, _ns, _name), obj in list(self.objects.items())
                if res == request.resource and not obj.deleted
            ]
        try:
            for event in snapshot:
                if wanted(event, replay=True):
                    yield event
            stream = bus.stream(since=marker)
            while True:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    return
                try:
                    event = await asyncio.wait_for(anext(stream), remaining)
                except (StopAsyncIteration, TimeoutError):
                    return
                if isinstance(event, dict) and wanted(event, replay=False):
                    yield event
        finally:
            await bus.unmark(marker)


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------------------
# Resources Gleaner's processes use
# ---------------------------------------------------------------------------------------

ALL_VERBS = {"create", "delete", "get", "list", "patch", "update", "watch", "deletecollection"}


@dataclass(frozen=True)
class ResourceSpec:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    shortnames: tuple[str, ...] = ()
    status_subresource: bool = False

    @property
    def key(self) -> str:
        if self.group:
            return f"{self.group}/{self.version}/{self.plural}"
        return f"{self.version}/{self.plural}"


BUILTIN_RESOURCES: tuple[ResourceSpec, ...] = (
    ResourceSpec("", "v1", "pods", "Pod", True, ("po",), status_subresource=True),
    ResourceSpec("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    ResourceSpec("", "v1", "events", "Event", True, ("ev",)),
    ResourceSpec("", "v1", "namespaces", "Namespace", False, ("ns",), status_subresource=True),
    ResourceSpec("", "v1", "nodes", "Node", False, ("no",), status_subresource=True),
    ResourceSpec("events.k8s.io", "v1", "events", "Event", True, ("ev",)),
    ResourceSpec("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceSpec("kopf.dev", "v1", "clusterkopfpeerings", "ClusterKopfPeering", False),
    ResourceSpec("kopf.dev", "v1", "kopfpeerings", "KopfPeering", True),
)


def gleaner_resources(crd_dir: Path = CRD_DIR) -> list[ResourceSpec]:
    """OfflineJob and NodeTrace, from the generated CRD manifests when present, else models."""
    specs: list[ResourceSpec] = []
    manifests = sorted(crd_dir.glob("*.gleaner.dev.yaml")) if crd_dir.is_dir() else []
    for path in manifests:
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                if not version.get("served", True):
                    continue
                specs.append(
                    ResourceSpec(
                        group=spec["group"],
                        version=version["name"],
                        plural=spec["names"]["plural"],
                        kind=spec["names"]["kind"],
                        namespaced=spec["scope"] == "Namespaced",
                        shortnames=tuple(spec["names"].get("shortNames", ())),
                        status_subresource="status" in (version.get("subresources") or {}),
                    )
                )
    if specs:
        return specs
    from gleaner.api import GROUP, VERSION, NodeTrace, OfflineJob

    return [
        ResourceSpec(GROUP, VERSION, OfflineJob.PLURAL, OfflineJob.KIND, True, ("oj",), True),
        ResourceSpec(GROUP, VERSION, NodeTrace.PLURAL, NodeTrace.KIND, False, (), True),
    ]


def register_resources(emulator: kmock.KubernetesEmulator, specs: Sequence[ResourceSpec]) -> None:
    for spec in specs:
        emulator.resources[spec.key] = kmock.ResourceInfo(
            kind=spec.kind,
            singular=spec.kind.lower(),
            namespaced=spec.namespaced,
            verbs=ALL_VERBS,
            shortnames=set(spec.shortnames),
            subresources={"status"} if spec.status_subresource else set(),
        )


def seed_objects(emulator: kmock.KubernetesEmulator, namespaces: Sequence[str]) -> None:
    """Namespaces and the kopf peering objects named ``gleaner`` (as the Helm chart makes)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for ns in namespaces:
        emulator.objects["v1/namespaces", None, ns] = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "uid": str(uuid.uuid4()), "creationTimestamp": now},
        }
        emulator.objects["kopf.dev/v1/kopfpeerings", ns, PEERING_NAME] = {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfPeering",
            "metadata": {"name": PEERING_NAME, "namespace": ns, "uid": str(uuid.uuid4())},
            "status": {},
        }
    emulator.objects["kopf.dev/v1/clusterkopfpeerings", None, PEERING_NAME] = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": PEERING_NAME, "uid": str(uuid.uuid4())},
        "status": {},
    }


# ---------------------------------------------------------------------------------------
# Running it on a port, in a thread
# ---------------------------------------------------------------------------------------


class KubeEmulator:
    """The emulator served on loopback from a background thread; a context manager.

    ``with KubeEmulator(tmp_path) as kube:`` gives ``kube.url``, ``kube.kubeconfig`` (a file
    path to export as ``KUBECONFIG``), ``kube.api_client()`` (a ``kubernetes`` client bound
    to it: the tests' own client) and ``kube.client()`` (Gleaner's own client,
    ``gleaner.clients.kube``, bound to it). ``kube.objects()`` peeks at stored objects and
    ``kube.accesses()`` lists the kinds of API access clients made (both for assertions
    only).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        namespaces: Sequence[str] = ("default",),
        default_namespace: str = "default",
    ) -> None:
        self.workdir = Path(workdir)
        self.namespaces = tuple(namespaces)
        self.default_namespace = default_namespace
        self.emulator = ApiServerEmulator()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._port: int | None = None
        self.kubeconfig = self.workdir / "kubeconfig.yaml"

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("the emulator is not running")
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> Self:
        register_resources(self.emulator, [*BUILTIN_RESOURCES, *gleaner_resources()])
        seed_objects(self.emulator, self.namespaces)
        self._thread = threading.Thread(target=self._run, name="kube-emulator", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("the Kubernetes emulator did not start within 30 s")
        if self._error is not None:
            raise RuntimeError(f"the Kubernetes emulator failed: {self._error}")
        self.write_kubeconfig(self.kubeconfig)
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to start() or stop()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self.emulator, kmock.Server(self.emulator, host="127.0.0.1") as server:
            self._port = int(server.port)
            self._ready.set()
            await self._stop.wait()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)
        self._loop = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def accesses(self, *clients: str) -> list[Access]:
        """Each kind of API access made so far (by ``clients``, User-Agent products; all if
        none are named), in first-seen order."""
        seen = list(self.emulator.accesses)
        return [a for a in seen if not clients or a.client in clients]

    def write_kubeconfig(self, path: Path) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kmock", "cluster": {"server": self.url}}],
            "users": [{"name": "kmock", "user": {"token": "kmock-test-token"}}],
            "contexts": [
                {
                    "name": "kmock",
                    "context": {
                        "cluster": "kmock",
                        "user": "kmock",
                        "namespace": self.default_namespace,
                    },
                }
            ],
            "current-context": "kmock",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        return path

    def call(self, fn: Callable[[], Coroutine[Any, Any, T]], timeout: float = 30) -> T:
        """Run a coroutine on the emulator's loop (e.g. to peek at objects safely)."""
        if self._loop is None:
            raise RuntimeError("the emulator is not running")
        return asyncio.run_coroutine_threadsafe(fn(), self._loop).result(timeout)

    def objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Live objects of a resource (``'v1/pods'``, ``'gleaner.dev/v1alpha1/offlinejobs'``)."""

        async def _peek() -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for key in list(self.emulator.objects):
                res, ns, _name = key
                if res != kmock.resource(resource):
                    continue
                if namespace is not None and ns != namespace:
                    continue
                obj = self.emulator.objects[key]
                if not obj.deleted:
                    out.append(dict(obj.last.raw))
            return out

        return self.call(_peek)

    def credentials(self) -> Credentials:
        """Credentials of this emulator (what the written kubeconfig says)."""
        return Credentials(server=self.url, token="kmock-test-token")

    def client(self, **kwargs: Any) -> SyncKubeClient:
        """Gleaner's own client (``gleaner.clients.kube``) bound to this emulator."""
        return SyncKubeClient(self.credentials(), **kwargs)

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` talking to this emulator over HTTP (the tests'
        own client: its User-Agent product, ``OpenAPI-Generator``, is not Gleaner's)."""
        import kubernetes

        config = kubernetes.client.Configuration()
        config.host = self.url
        config.api_key = {"BearerToken": "kmock-test-token"}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        return kubernetes.client.ApiClient(config)


# ---------------------------------------------------------------------------------------
# The real operator process, against the emulator
# ---------------------------------------------------------------------------------------


class KubeTarget(Protocol):
    """Where a process under test finds its API server: the emulator, or one test's share
    of the real control plane (``gleaner.testing.tenant.Tenant``)."""

    @property
    def kubeconfig(self) -> Path: ...

    @property
    def workdir(self) -> Path: ...


class ApiClientSource(Protocol):
    """Anything that makes a ``kubernetes.client.ApiClient`` (the emulator, the control
    plane)."""

    def api_client(self) -> Any: ...


def refused_lines(log: str) -> list[str]:
    """The lines of a process log that tell of a request the API server refused
    (RBAC's "forbidden"): a test running a component as the chart's ServiceAccount expects
    none."""
    return [line for line in log.splitlines() if "forbidden" in line.lower()]


class OperatorProcess:
    """``gleaner operator`` as a subprocess with ``KUBECONFIG`` pointing at an emulator (or
    at the real control plane: any ``KubeTarget``).

    Output goes to ``log_path`` (read it with ``log()`` when a test fails). ``kill()`` sends
    SIGKILL (a crash), ``stop()`` SIGTERM (a graceful exit).
    """

    def __init__(
        self,
        kube: KubeTarget,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        log_name: str = "operator.log",
    ) -> None:
        self.kube = kube
        self.args = list(args)
        self.env = dict(env or {})
        self.log_path = kube.workdir / log_name
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        env = {**os.environ, "KUBECONFIG": str(self.kube.kubeconfig), **self.env}
        env.setdefault("PYTHONUNBUFFERED", "1")
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gleaner.cli.main", "operator", *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def refused(self) -> list[str]:
        """The requests the API server refused it, from its log (``refused_lines``)."""
        return refused_lines(self.log())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 15) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_refusing_nothing(op: OperatorProcess) -> Iterator[OperatorProcess]:
    """A fixture's body for an operator process: started, yielded, stopped, and then no
    request of it refused by the API server (``OperatorProcess.refused``)."""
    with op:
        yield op
    refused = op.refused()
    assert refused == [], "\n".join(refused)


FAST_OPERATOR_FLAGS: tuple[str, ...] = (
    "--requeue-interval=1s",
    "--min-pass-interval=0.1s",
    "--unschedulable-backoff=1s",
    "--sla-window=1s",
    "--max-sla-window=1s",  # judge each 1 s sample, not the jobs' 30 min slaWindow
    "--sla-grace=0s",
    "--sla-violations=1/1",
    "--eviction-backoff=1s",
    "--peering-lifetime=5s",
    "--watch-timeout=60s",
)
"""Operator flags that make every loop of the operator turn in about a second (tests)."""


def wait_for(
    predicate: Callable[[], T | None],
    *,
    timeout: float = 20,
    interval: float = 0.1,
    message: str | Callable[[], str] = "condition not met",
) -> T:
    """Poll ``predicate`` until it returns something truthy; raise ``TimeoutError`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            result = predicate()
            if result:
                return result
        if time.monotonic() > deadline:
            text = message() if callable(message) else message
            raise TimeoutError(f"after {timeout:.0f} s: {text}")
        time.sleep(interval)


@contextlib.contextmanager
def running_operator(
    kube: KubeEmulator, args: Sequence[str] = (), **kwargs: Any
) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(kube, args, **kwargs).start()
    try:
        yield proc
    finally:
        proc.stop()


# ---------------------------------------------------------------------------------------
# Manifests the tests apply (what agents and users would write)
# ---------------------------------------------------------------------------------------


def nodetrace_manifest(
    node: str,
    *,
    gpus: int = 2,
    offline_enabled: float | Sequence[float] = 0.9,
    online_busy: float | Sequence[float] | None = None,
    free_gib: float = 60.0,
    memory_gib: float = 80.0,
    window_seconds: float = 60.0,
    end: datetime | None = None,
    overlap: float = 1.0,
) -> dict[str, Any]:
    """A NodeTrace as an agent would publish it: per-GPU offline-enabled fractions (one
    value or one per GPU), online busy = 1 - enabled unless given, constant harvestable
    memory, and pair overlap/union with the given ratio."""
    from datetime import timedelta

    from gleaner.api import (
        GpuInfo,
        GpuPair,
        GpuTrace,
        MemorySketch,
        MemoryState,
        NodeTrace,
        NodeTraceSpec,
        NodeTraceStatus,
        ObjectMeta,
        TraceWindow,
    )
    from gleaner.api.nodetrace import gpu_uuid

    def per(value: float | Sequence[float]) -> list[float]:
        return [float(value)] * gpus if isinstance(value, int | float) else list(value)

    enabled = per(offline_enabled)
    busy = per(online_busy) if online_busy is not None else [1.0 - e for e in enabled]
    end = end or datetime.now(UTC)
    start = end - timedelta(seconds=window_seconds)
    pairs = []
    for a in range(gpus):
        for b in range(a + 1, gpus):
            union = max(busy[a], busy[b]) * window_seconds
            pairs.append(
                GpuPair(gpu_a=a, gpu_b=b, overlap_seconds=union * overlap, union_seconds=union)
            )
    trace = NodeTrace(
        metadata=ObjectMeta(name=node),
        spec=NodeTraceSpec(node_name=node),
        status=NodeTraceStatus(
            last_report_time=end,
            gpus=[
                GpuInfo(
                    index=i, uuid=gpu_uuid(node, i), product="NVIDIA H100", memory_gi_b=memory_gib
                )
                for i in range(gpus)
            ],
            window=TraceWindow(start=start, end=end, seconds=window_seconds),
            per_gpu=[
                GpuTrace(
                    index=i,
                    offline_enabled_seconds=enabled[i] * window_seconds,
                    online_busy_seconds=busy[i] * window_seconds,
                )
                for i in range(gpus)
            ],
            pairs=pairs,
            memory=MemorySketch(
                step_gi_b=1.0,
                states=[MemoryState(free_gi_b=[free_gib] * gpus, seconds=window_seconds)],
            ),
            idle_fraction=sum(enabled) / gpus,
        ),
    )
    return trace.to_k8s()


def offlinejob_manifest(
    name: str,
    *,
    namespace: str = "default",
    gpus: int = 1,
    sla: float = 0.5,
    standalone: float = 1000.0,
    required_gib: float = 40.0,
    max_evictions: int = 3,
    profile_from: str | None = None,
    memory_curve: Sequence[tuple[float, float]] | None = None,
    image: str = "vllm/vllm-openai:latest",
) -> dict[str, Any]:
    """An OfflineJob as a user would apply it (inline profile unless ``profile_from``)."""
    curve = memory_curve or [(10.0, standalone * 0.5), (required_gib, standalone)]
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {
                "containers": [
                    {
                        "name": "worker",
                        "image": image,
                        "env": [{"name": "MODEL", "value": "test"}],
                        "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "16Gi"}},
                    }
                ]
            },
        },
        "gpus": gpus,
        "throughputSLA": sla,
        "maxEvictions": max_evictions,
    }
    if profile_from:
        spec["profileFrom"] = {"name": profile_from}
    else:
        spec["profile"] = {
            "standaloneTokensPerSecond": standalone,
            "requiredMemoryGiB": required_gib,
            "memoryCurve": [{"memoryGiB": m, "tokensPerSecond": t} for m, t in curve],
        }
    return {
        "apiVersion": "gleaner.dev/v1alpha1",
        "kind": "OfflineJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


class KubeApi:
    """Thin synchronous helpers over the ``kubernetes`` client for tests and benchmarks."""

    def __init__(self, kube: ApiClientSource, namespace: str = "default") -> None:
        import kubernetes

        self.namespace = namespace
        """The namespace of every call that names none."""
        # Typed Any on purpose: tests pass plain dicts, which the client accepts at run time.
        self.client: Any = kube.api_client()
        self.core: Any = kubernetes.client.CoreV1Api(self.client)
        self.custom: Any = kubernetes.client.CustomObjectsApi(self.client)

    def apply_nodetrace(self, manifest: dict[str, Any]) -> None:
        """Create or update a NodeTrace, status through the status subresource (as agents do)."""
        import kubernetes

        name = manifest["metadata"]["name"]
        body = {k: v for k, v in manifest.items() if k != "status"}
        try:
            self.custom.create_cluster_custom_object("gleaner.dev", "v1alpha1", "nodetraces", body)
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise
        self.custom.patch_cluster_custom_object_status(
            "gleaner.dev", "v1alpha1", "nodetraces", name, {"status": manifest["status"]}
        )

    def create_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        ns = manifest["metadata"].get("namespace") or self.namespace
        result = self.custom.create_namespaced_custom_object(
            "gleaner.dev", "v1alpha1", ns, "offlinejobs", manifest
        )
        return cast(dict[str, Any], result)

    def get_job(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        import kubernetes

        try:
            result = self.custom.get_namespaced_custom_object(
                "gleaner.dev", "v1alpha1", namespace or self.namespace, "offlinejobs", name
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return cast(dict[str, Any], result)

    def delete_job(self, name: str, namespace: str | None = None) -> None:
        self.custom.delete_namespaced_custom_object(
            "gleaner.dev", "v1alpha1", namespace or self.namespace, "offlinejobs", name
        )

    def list_jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        result = self.custom.list_namespaced_custom_object(
            "gleaner.dev", "v1alpha1", namespace or self.namespace, "offlinejobs"
        )
        return list(cast(dict[str, Any], result).get("items", []))

    def pods(self, namespace: str | None = None, selector: str | None = None) -> list[Any]:
        return list(
            self.core.list_namespaced_pod(
                namespace or self.namespace, label_selector=selector
            ).items
        )

    def set_pod_phase(self, name: str, phase: str, namespace: str | None = None) -> None:
        """What the kubelet would do: move a Pod to ``phase``."""
        self.core.patch_namespaced_pod_status(
            name, namespace or self.namespace, {"status": {"phase": phase}}
        )

    def events(self, namespace: str | None = None) -> list[Any]:
        return list(self.core.list_namespaced_event(namespace or self.namespace).items)

    def apply_node(
        self,
        name: str,
        labels: Mapping[str, str] | None = None,
        *,
        unschedulable: bool = False,
        ready: bool = True,
    ) -> None:
        """Create or update a Node (as the kubelet registers it and as kubectl labels and
        cordons it): ``labels`` replace the Node's labels."""
        import kubernetes

        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {"unschedulable": unschedulable},
        }
        try:
            self.core.create_node(body)
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise
            current = self.core.read_node(name).metadata.labels or {}
            gone = {k: None for k in current if k not in (labels or {})}
            patch = {**body, "metadata": {"labels": {**gone, **dict(labels or {})}}}
            self.core.patch_node(name, patch)
        condition = {"type": "Ready", "status": "True" if ready else "False"}
        self.core.patch_node_status(name, {"status": {"conditions": [condition]}})

    def delete_node(self, name: str) -> None:
        self.core.delete_node(name)

    def configmaps(self, namespace: str | None = None, selector: str | None = None) -> list[Any]:
        return list(
            self.core.list_namespaced_config_map(
                namespace or self.namespace, label_selector=selector
            ).items
        )
