"""Pure: what Gleaner adds to a Pod so that its processes run under the node's shim, for
offline Pods (the operator's builder) and online Pods (the admission webhook) alike.

Contract (docs/operator.md, "Webhook"; docs/api.md, "What the operator adds to the Pod";
every name comes from ``gleaner.api.contract``):

- ``runtime_env(role)``: ``LD_PRELOAD`` = the shim, ``GLEANER_ROLE`` = ``role``,
  ``GLEANER_SOCKET``; ``online_env()`` adds the framework hook's ``GLEANER_SHIM_PATH``.
- ``inject_pod_spec(spec, env)`` returns a copy of a Pod spec where every container and init
  container has ``env`` (ours win; a literal ``LD_PRELOAD`` of theirs is kept after the
  shim) and the two host-path mounts (shim directory read-only, agent socket directory
  read-write), and the spec has the two hostPath volumes. Applying it to its own output
  changes nothing (idempotent).
- ``injection_conflicts(spec, env)`` lists, in words, why a spec cannot be instrumented
  without silently dropping something of the Pod's own (an ``LD_PRELOAD`` or role taken
  from ``valueFrom``, a different role, another volume under one of our names, another
  mount at one of our paths). The webhook refuses such Pods; the offline builder overrides.
- ``online_pod_mutation(pod)``: the webhook's decision for one Pod: a JSON Patch
  (RFC 6902) that instruments it as online and annotates it ``gleaner.dev/injected``, an
  empty patch when it already is instrumented, is an offline Pod or an exempt one, or a
  refusal message.

No I/O: the webhook server (``gleaner.operator.webhook``) and the builders call these.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gleaner.api.contract import (
    ANNOTATION_INJECTED,
    ENV_ROLE,
    ENV_SHIM_PATH,
    ENV_SOCKET,
    LABEL_ROLE,
    ROLE_EXEMPT,
    ROLE_OFFLINE,
    ROLE_ONLINE,
    SHIM_DIR,
    SHIM_PATH,
    SOCKET_DIR,
    SOCKET_PATH,
)

SHIM_VOLUME = "gleaner-shim"
SOCKET_VOLUME = "gleaner-run"
PRELOAD = "LD_PRELOAD"
CONTAINER_KEYS = ("containers", "initContainers")

JsonPatch = list[dict[str, Any]]


def runtime_env(role: str) -> dict[str, str]:
    """The environment every instrumented container gets, for ``role``."""
    return {PRELOAD: SHIM_PATH, ENV_ROLE: role, ENV_SOCKET: SOCKET_PATH}


def online_env() -> dict[str, str]:
    """``runtime_env(online)`` and the vLLM hook's shim path (docs/vllm-hook.md)."""
    return {**runtime_env(ROLE_ONLINE), ENV_SHIM_PATH: SHIM_PATH}


def _preloads(value: str) -> list[str]:
    # ld.so splits LD_PRELOAD on colons and spaces.
    return [part for part in re.split(r"[: ]", value) if part]


def merge_env(env: list[dict[str, Any]], extra: Mapping[str, str]) -> list[dict[str, Any]]:
    """The container's env with ``extra`` set (ours win, LD_PRELOAD keeps theirs after ours;
    one that already starts with ours is kept as it is, so merging twice changes nothing)."""
    out: list[dict[str, Any]] = []
    theirs_preload: str | None = None
    for var in env:
        name = var.get("name")
        if name == PRELOAD and isinstance(var.get("value"), str):
            theirs_preload = var["value"]
            continue
        if name in extra:
            continue
        out.append(var)
    for name, value in extra.items():
        if name == PRELOAD and theirs_preload and theirs_preload != value:
            parts = _preloads(theirs_preload)
            value = theirs_preload if parts[:1] == [value] else f"{value}:{theirs_preload}"
        out.append({"name": name, "value": value})
    return out


def runtime_mounts() -> list[dict[str, Any]]:
    return [
        {"name": SHIM_VOLUME, "mountPath": SHIM_DIR, "readOnly": True},
        {"name": SOCKET_VOLUME, "mountPath": SOCKET_DIR},
    ]


def runtime_volumes() -> list[dict[str, Any]]:
    return [
        {"name": SHIM_VOLUME, "hostPath": {"path": SHIM_DIR, "type": "Directory"}},
        {"name": SOCKET_VOLUME, "hostPath": {"path": SOCKET_DIR, "type": "DirectoryOrCreate"}},
    ]


def inject_container(container: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """A copy of ``container`` with ``env`` and the two runtime mounts."""
    out = copy.deepcopy(dict(container))
    out["env"] = merge_env(list(out.get("env") or []), env)
    mounts = [
        m
        for m in (out.get("volumeMounts") or [])
        if m.get("name") not in (SHIM_VOLUME, SOCKET_VOLUME)
    ]
    out["volumeMounts"] = mounts + runtime_mounts()
    return out


def inject_pod_spec(spec: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """A copy of the Pod ``spec`` instrumented with ``env`` (see the module docstring)."""
    out = copy.deepcopy(dict(spec))
    for key in CONTAINER_KEYS:
        containers = [inject_container(c, env) for c in (out.get(key) or [])]
        if containers:
            out[key] = containers
    volumes = [
        v for v in (out.get("volumes") or []) if v.get("name") not in (SHIM_VOLUME, SOCKET_VOLUME)
    ]
    out["volumes"] = volumes + runtime_volumes()
    return out


def injection_conflicts(spec: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """Why ``spec`` cannot be instrumented with ``env`` without losing something of its own
    (empty: it can). Each entry is a sentence naming the container or volume."""
    problems: list[str] = []
    ours = {v["name"]: v for v in runtime_volumes()}
    for volume in spec.get("volumes") or []:
        name = volume.get("name")
        if name in ours and volume != ours[name]:
            problems.append(f"volume {name!r} is the Pod's own, not Gleaner's hostPath volume")
    our_paths = {m["mountPath"]: m["name"] for m in runtime_mounts()}
    for key in CONTAINER_KEYS:
        for container in spec.get(key) or []:
            where = f"container {container.get('name')!r}"
            for var in container.get("env") or []:
                name = var.get("name")
                if name not in env:
                    continue
                value = var.get("value")
                if not isinstance(value, str):
                    problems.append(
                        f"{where} sets {name} from valueFrom, which Gleaner cannot merge"
                    )
                elif name == ENV_ROLE and value != env[name]:
                    problems.append(f"{where} sets {name}={value}, not {env[name]}")
            for mount in container.get("volumeMounts") or []:
                path = str(mount.get("mountPath") or "").rstrip("/")
                if path in our_paths and mount.get("name") != our_paths[path]:
                    problems.append(f"{where} mounts volume {mount.get('name')!r} at {path}")
    return problems


@dataclass(frozen=True)
class Mutation:
    """The webhook's answer for one Pod: allowed with ``patch`` (maybe empty), or refused."""

    patch: JsonPatch = field(default_factory=list)
    refusal: str | None = None
    reason: str = ""
    """Why the patch is what it is (for the log): injected, already, offline, exempt, refused."""

    @property
    def allowed(self) -> bool:
        return self.refusal is None


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def online_pod_mutation(pod: Mapping[str, Any]) -> Mutation:
    """The JSON Patch that instruments ``pod`` as an online Pod (see the module docstring).

    The webhook's selectors decide which Pods are sent here (a pod label or a namespace
    label); this function only skips the Pods that must never be instrumented as online:
    offline Pods (the operator instruments them itself) and Pods labelled
    ``gleaner.dev/role=exempt``.
    """
    metadata: Mapping[str, Any] = pod.get("metadata") or {}
    labels: Mapping[str, Any] = metadata.get("labels") or {}
    if labels.get(LABEL_ROLE) == ROLE_OFFLINE:
        return Mutation(reason=ROLE_OFFLINE)
    if labels.get(LABEL_ROLE) == ROLE_EXEMPT:
        return Mutation(reason=ROLE_EXEMPT)
    spec: Mapping[str, Any] = pod.get("spec") or {}
    env = online_env()
    problems = injection_conflicts(spec, env)
    if problems:
        return Mutation(
            refusal="Gleaner cannot instrument this online Pod: "
            + "; ".join(problems)
            + f" (fix the Pod, or label it {LABEL_ROLE}={ROLE_EXEMPT} to opt out)",
            reason="refused",
        )
    patch: JsonPatch = []
    injected = inject_pod_spec(spec, env)
    for key in (*CONTAINER_KEYS, "volumes"):
        if key not in injected or injected[key] == spec.get(key):
            continue
        op = "replace" if key in spec else "add"
        patch.append({"op": op, "path": f"/spec/{key}", "value": injected[key]})
    annotations: Mapping[str, Any] = metadata.get("annotations") or {}
    if annotations.get(ANNOTATION_INJECTED) != ROLE_ONLINE:
        if "annotations" in metadata and metadata["annotations"] is not None:
            path = f"/metadata/annotations/{_pointer(ANNOTATION_INJECTED)}"
            patch.append({"op": "add", "path": path, "value": ROLE_ONLINE})
        else:
            patch.append(
                {
                    "op": "add",
                    "path": "/metadata/annotations",
                    "value": {ANNOTATION_INJECTED: ROLE_ONLINE},
                }
            )
    return Mutation(patch=patch, reason="injected" if patch else "already")
