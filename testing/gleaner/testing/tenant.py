"""One test's share of a real control plane that many tests use in turn (docs/controlplane.md).

Starting a control plane costs seconds, so one serves every test of a pytest(-xdist)
worker, one test after another. A ``Tenant`` is what a test gets of it, and what keeps the
tests apart.

Contract.

- ``Tenant(plane, workdir).open()`` first removes what an earlier test on the plane left
  behind that a cluster-wide operator would act on: every OfflineJob (its finalizers
  stripped first: the operator that put them there is gone), every NodeTrace and every
  NodeHistory (an agent writes its node's hours there: a test that ran across the hour
  would hand them to the next test's node of the same name). Then it
  creates its own namespace (``namespace``, waiting for its default ServiceAccount), its
  own kopf peering objects (``peering``: a ClusterKopfPeering and a KopfPeering in each of
  its namespaces, so that no replica of an earlier test, SIGKILLed with a fresh peering
  record, pauses this test's operator), and ``kubeconfig``: the admin's, with
  ``namespace`` as its default namespace.
- ``node(name)`` gives a node name unique to the tenant (cluster-scoped names must not
  collide with other tests' Nodes and Pods).
- ``apply_nodetrace(manifest, kwok=True)`` publishes a NodeTrace as an agent does; with
  ``kwok`` it first registers a KWOK Node of the same name, so Pods bound there turn
  Running and deleted ones go away as with a kubelet. Without, the Node does not exist and
  bound Pods stay Pending (a node whose kubelet has not started them yet).
- ``add_namespace(suffix)`` creates a further namespace of the tenant (with its peering).
- ``Tenant(..., namespaces=("default", "batch"))`` uses those fixed namespaces instead (the
  e2e scenarios name theirs): made when missing, and emptied on ``close()`` instead of
  deleted (a namespace takes a while to go, and the next test needs the same name): its
  OfflineJobs, Pods, Events and ConfigMaps (but the cluster's ``kube-root-ca.crt``).
- ``api`` is ``gleaner.testing.kube.KubeApi`` with ``namespace`` as its default.
- ``operator_account(rules)`` makes a ServiceAccount ``gleaner-operator`` in ``namespace``
  bound to exactly ``rules`` (by default the chart's ``OPERATOR_RULES``) through a
  ClusterRole of its own, and returns a ``KubeTarget`` (kubeconfig with its token, and the
  tenant's workdir) to start ``gleaner operator`` with, so every call it makes is one the
  chart grants; ``close()`` deletes the ClusterRole and its binding.
- ``operator_args(*flags)`` is the command line of an operator of this tenant: the tests'
  fast intervals (``FAST_OPERATOR_FLAGS``), its peering and state namespace, HTTP on a free
  loopback port, then ``flags``.
- ``write_hours(node, trace, gpus, busy_at, day)`` writes ``node``'s NodeHistory as its
  agent would: every hour of the day measured on day ``day``, its first ``gpus`` GPUs (those
  of the NodeTrace ``trace``) busy together at ``busy_at(hour)``.
- ``close()`` deletes what the tenant made: its jobs' finalizers and its namespaces, its
  Pods at once (no kubelet finalizes Pods on a node that does not exist), its NodeTraces,
  Nodes and peering objects. It does not wait for the namespaces to go.

Nothing here knows the operator's behaviour; the test says what to expect.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import numpy as np
import yaml

from gleaner.api import GROUP, VERSION, NodeHistoryStatus, NodeTraceStatus
from gleaner.api.nodetrace import gpu_uuid
from gleaner.perfmodel.diurnal import HOURS, DiurnalProfile
from gleaner.perfmodel.hours import profile_to_hours
from gleaner.perfmodel.summary import GpuSpec, NodeSummary
from gleaner.runtime_agent.kube import load_client, write_nodehistory
from gleaner.testing.controlplane import ControlPlane, GpuNode, gpu_node_manifest
from gleaner.testing.kube import (
    FAST_OPERATOR_FLAGS,
    PEERING_NAME,
    KubeApi,
    OperatorProcess,
    refused_lines,
)
from gleaner.testing.net import free_port

__all__ = ["KOPF_GROUP", "OperatorAccount", "Tenant"]

KOPF_GROUP = ("kopf.dev", "v1")
OPERATOR_ACCOUNT = "gleaner-operator"


def _api_exception() -> type[Exception]:
    import kubernetes

    return kubernetes.client.ApiException


@dataclass(frozen=True)
class OperatorAccount:
    """Where an operator process finds the API server: as its own ServiceAccount."""

    kubeconfig: Path
    workdir: Path
    plane: ControlPlane

    def api_client(self) -> Any:
        return self.plane.api_client()


class Tenant:
    """One test's namespace, node names and peering on a shared ``ControlPlane``."""

    def __init__(
        self,
        plane: ControlPlane,
        workdir: Path,
        *,
        gpus_per_node: int = 8,
        namespaces: Sequence[str] = (),
    ) -> None:
        self.plane = plane
        self.workdir = Path(workdir)
        self.id = uuid.uuid4().hex[:8]
        self.fixed_namespaces = tuple(namespaces)
        self.namespace = self.fixed_namespaces[0] if namespaces else f"t-{self.id}"
        self.peering = f"{PEERING_NAME}-{self.id}"
        self.kubeconfig = self.workdir / "kubeconfig.yaml"
        self.gpus_per_node = gpus_per_node
        self.namespaces: list[str] = []
        self.nodes: list[str] = []
        self.nodetraces: list[str] = []
        self.roles: list[str] = []
        self.api = KubeApi(plane, namespace=self.namespace)

    # ---- lifecycle -------------------------------------------------------------------

    def open(self) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._clear_leftovers()
        peering: dict[str, Any] = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering"}
        peering["metadata"] = {"name": self.peering}
        self.api.custom.create_cluster_custom_object(*KOPF_GROUP, "clusterkopfpeerings", peering)
        if self.fixed_namespaces:
            for name in self.fixed_namespaces:
                self._use_namespace(name)
        else:
            self.add_namespace(None)
        config = yaml.safe_load(self.plane.admin_kubeconfig.read_text())
        for context in config["contexts"]:
            context["context"]["namespace"] = self.namespace
        self.kubeconfig.write_text(yaml.safe_dump(config))
        return self

    def add_namespace(self, suffix: str | None) -> str:
        """Create the tenant's namespace (``suffix`` None) or a further one; its name."""
        name = self.namespace if suffix is None else f"{self.namespace}-{suffix}"
        self.api.core.create_namespace({"metadata": {"name": name}})
        self.namespaces.append(name)
        self._add_peering(name)
        return name

    def _use_namespace(self, name: str) -> None:
        """Use the fixed namespace ``name``, making it when missing."""
        with contextlib.suppress(_api_exception()):  # 409: it is there already
            self.api.core.create_namespace({"metadata": {"name": name}})
        self._add_peering(name)

    def _add_peering(self, name: str) -> None:
        peering: dict[str, Any] = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering"}
        peering["metadata"] = {"name": self.peering}
        self.api.custom.create_namespaced_custom_object(*KOPF_GROUP, name, "kopfpeerings", peering)
        self.plane.wait_service_account(name)

    def close(self) -> None:
        for ns in self.fixed_namespaces:
            self._empty_namespace(ns)
        for ns in self.namespaces:
            self._release_jobs(ns)
            with contextlib.suppress(Exception):
                self.api.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            with contextlib.suppress(Exception):
                self.api.core.delete_namespace(ns)
        for name in self.nodetraces:
            with contextlib.suppress(Exception):
                self.api.custom.delete_cluster_custom_object(GROUP, VERSION, "nodetraces", name)
        for name in self.nodes:
            with contextlib.suppress(Exception):
                self.api.core.delete_node(name)
        with contextlib.suppress(Exception):
            self.api.custom.delete_cluster_custom_object(
                *KOPF_GROUP, "clusterkopfpeerings", self.peering
            )
        for role in self.roles:
            for kind in ("clusterrolebinding", "clusterrole"):
                self.plane.kubectl("delete", kind, role, "--wait=false", check=False)

    def operator_account(self, rules: Sequence[Mapping[str, Any]] | None = None) -> OperatorAccount:
        """A ServiceAccount bound to exactly ``rules`` (default: the chart's operator rules);
        where an operator process authenticates as it (module docstring)."""
        if rules is None:
            from gleaner.operator.rbac import OPERATOR_RULES

            rules = OPERATOR_RULES
        name = f"{OPERATOR_ACCOUNT}-{self.id}"
        docs: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": OPERATOR_ACCOUNT, "namespace": self.namespace}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": name}, "rules": [dict(r) for r in rules]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": name},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": name},
             "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_ACCOUNT,
                           "namespace": self.namespace}]},
        ]  # fmt: skip
        self.plane.kubectl("apply", "-f", "-", input="\n".join(json.dumps(d) for d in docs))
        self.roles.append(name)
        path = self.plane.token_kubeconfig(
            OPERATOR_ACCOUNT, self.namespace, self.workdir / "operator.kubeconfig"
        )
        return OperatorAccount(path, self.workdir, self.plane)

    def _empty_namespace(self, ns: str) -> None:
        self._release_jobs(ns)
        core = self.api.core
        with contextlib.suppress(Exception):
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        with contextlib.suppress(Exception):
            core.delete_collection_namespaced_event(ns)
        with contextlib.suppress(Exception):
            for cm in core.list_namespaced_config_map(ns).items:
                if cm.metadata.name != "kube-root-ca.crt":
                    core.delete_namespaced_config_map(cm.metadata.name, ns)
        with contextlib.suppress(Exception):
            self.api.custom.delete_namespaced_custom_object(
                *KOPF_GROUP, ns, "kopfpeerings", self.peering
            )

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _release_jobs(self, namespace: str | None) -> None:
        """Strip the finalizers of the OfflineJobs in ``namespace`` (all if None) and
        delete them: no operator is left to finalize them."""
        custom = self.api.custom
        if namespace is None:
            listed = custom.list_cluster_custom_object(GROUP, VERSION, "offlinejobs")
        else:
            listed = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "offlinejobs")
        for job in listed.get("items", []):
            meta = job["metadata"]
            args = (GROUP, VERSION, meta["namespace"], "offlinejobs", meta["name"])
            with contextlib.suppress(_api_exception()):
                custom.patch_namespaced_custom_object(*args, {"metadata": {"finalizers": None}})
                custom.delete_namespaced_custom_object(*args)

    def _clear_leftovers(self) -> None:
        self._release_jobs(None)
        for plural in ("nodetraces", "nodehistories"):
            for obj in self.api.custom.list_cluster_custom_object(GROUP, VERSION, plural).get(
                "items", []
            ):
                with contextlib.suppress(_api_exception()):
                    self.api.custom.delete_cluster_custom_object(
                        GROUP, VERSION, plural, obj["metadata"]["name"]
                    )

    # ---- nodes -----------------------------------------------------------------------

    def node(self, name: str) -> str:
        """``name`` made unique to this tenant (Nodes and NodeTraces are cluster-scoped)."""
        return f"{self.namespace}-{name}"

    def add_kwok_node(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Register a KWOK Node called ``name`` (no wait: KWOK makes it Ready in a moment,
        and runs Pods bound to it whether or not it is Ready yet)."""
        if name in self.nodes:
            return
        manifest = gpu_node_manifest(
            GpuNode(name, gpus=self.gpus_per_node, labels=dict(labels or {}))
        )
        self.api.core.create_node(manifest)
        self.nodes.append(name)

    def apply_nodetrace(self, manifest: dict[str, Any], *, kwok: bool = True) -> None:
        name = str(manifest["metadata"]["name"])
        if kwok:
            self.add_kwok_node(name)
        self.api.apply_nodetrace(manifest)
        if name not in self.nodetraces:
            self.nodetraces.append(name)

    def apply_node(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create or relabel a Node that no kubelet (and no KWOK) runs; deleted on close."""
        self.api.apply_node(name, labels)
        if name not in self.nodes:
            self.nodes.append(name)

    def write_hours(
        self,
        node: str,
        trace: Mapping[str, Any],
        gpus: int,
        busy_at: Callable[[int], float],
        day: int = 1,
    ) -> None:
        """``node``'s NodeHistory: its first ``gpus`` GPUs busy together at
        ``busy_at(hour)``, every hour measured on day ``day`` (a later day for a later
        write, as an agent's would be); the GPUs' specs from the NodeTrace ``trace``."""
        specs = [
            GpuSpec(i, uuid=gpu_uuid(node, i), product="H100", memory_gib=80.0) for i in range(gpus)
        ]
        profile = DiurnalProfile(node)
        for hour in range(HOURS):
            t = day * 86400.0 + hour * 3600 + np.arange(0, 3600, 60.0)
            busy = np.full((t.size, gpus), busy_at(hour))
            summary = NodeSummary.from_samples(
                node, specs, t, busy, np.full((t.size, gpus), 60.0), 1.0 - busy
            )
            profile = profile.fold(hour, summary)
        status = NodeTraceStatus.model_validate(trace["status"])
        write_nodehistory(
            load_client(str(self.plane.admin_kubeconfig)),
            node,
            NodeHistoryStatus(gpus=status.gpus, hours=profile_to_hours(profile)),
        )

    def wait_nodes_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for name in self.nodes:
            while not self.plane.node_ready(name):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {name} not Ready after {timeout:.0f} s")
                time.sleep(0.25)

    # ---- operators -------------------------------------------------------------------

    @contextlib.contextmanager
    def operator_processes(self, *histories: str) -> Iterator[list[OperatorProcess]]:
        """A list for a test's operator processes. On exit each one is stopped, the
        NodeHistories of the nodes ``histories`` are deleted, and no operator's log may
        hold a request the API server refused (a verb missing from the RBAC)."""
        started: list[OperatorProcess] = []
        try:
            yield started
        finally:
            for op in started:
                op.stop()
            for node in histories:
                self.plane.kubectl("delete", "nh", node, "--wait=false", check=False)
            refused = refused_lines("\n".join(op.log() for op in started))
            assert refused == [], "\n".join(refused)

    def operator_args(self, *flags: str) -> list[str]:
        """An operator's command line for this tenant (the module docstring), then ``flags``."""
        return [
            *FAST_OPERATOR_FLAGS,
            f"--peering={self.peering}",
            f"--state-namespace={self.namespace}",
            f"--http-port={free_port()}",
            "--http-host=127.0.0.1",
            *flags,
        ]
