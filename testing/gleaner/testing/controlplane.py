"""A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-controller-manager
and KWOK on loopback, from the upstream sources pinned in e2e/cluster (docs/controlplane.md).

Contract.

- ``find_binary()`` returns the ``glcluster`` binary that ``scripts/controlplane-build.sh``
  builds (``.gl/bin/glcluster``, or ``$GLEANER_CONTROLPLANE_BIN``); it raises
  ``ControlPlaneUnavailableError`` when there is none, saying how to build it.
- ``ControlPlane(workdir).start()`` generates a throw-away PKI with the ``openssl`` CLI (a
  CA; the API server's serving certificate for 127.0.0.1 and localhost; client
  certificates for an admin in ``system:masters``, for ``system:kube-controller-manager`` and
  for ``system:kube-scheduler``;
  a service-account signing key), then starts, each in its own process group with its log
  under ``workdir`` (``apiserver_args`` are appended to kube-apiserver's flags, e.g. an
  audit policy):

  1. etcd on two free loopback ports (fsync off: the data dies with the session);
  2. kube-apiserver on ``https://127.0.0.1:<free port>`` with client-certificate and
     service-account-token authentication, RBAC authorization only, and its default
     admission plugins (ServiceAccount included); ``start`` waits for ``/readyz``, which
     includes the RBAC bootstrap roles;
  3. kube-controller-manager with the controllers in ``CONTROLLERS`` (garbage collector,
     service accounts and their tokens, namespaces, the root CA ConfigMap), each
     controller with its own service-account credentials as kubeadm runs them;
  4. the KWOK controller with KWOK's upstream "fast" stages, managing every Node that
     carries ``KWOK_ANNOTATION``: such Nodes turn Ready, Pods bound to them turn Running,
     and Pods being deleted are finalized (there is no kubelet).

  ``start`` returns once the ``default`` ServiceAccount exists in ``default`` (Pods can be
  created from then on). ``admin_kubeconfig`` is the admin kubeconfig; ``kubectl(...)``
  runs the installed kubectl with it; ``api_client()`` is a ``kubernetes`` client for it.
- ``add_gpu_nodes(GpuNode(...), ...)`` creates KWOK Nodes with GPU capacity
  (``nvidia.com/gpu``), the GPU product label ``GPU_PRODUCT_LABEL`` and any extra labels,
  and waits until they are Ready. ``gpu_node_manifest`` is the pure manifest builder.
- ``stop_apiserver()`` / ``start_apiserver()`` stop kube-apiserver and start it again on
  the same port and the same etcd (``restart_apiserver()`` does both), the way an upgrade
  or a crash of the API server looks to its clients: connections drop, then a fresh watch
  cache answers.
- ``etcd_revision()`` is etcd's current revision; ``bump_etcd_revision(n)`` writes ``n``
  keys outside the API server's prefix (so the revision moves on without any Kubernetes
  object changing); ``compact_etcd()`` compacts etcd's history up to the current revision
  (physically, through etcd's own ``/v3/kv/compaction`` API, as ``etcdctl compact`` does).
  Together with a restarted API server these make a client's next watch from an older
  ``resourceVersion`` end in ``410 Gone`` on demand.
- Helpers for tests that drive the plane through kubectl: ``apply(plane, *docs)`` applies
  documents (one List), ``apply_nodetrace(plane, manifest)`` writes a NodeTrace and then
  its status, ``get_json(plane, *args)`` is ``kubectl get ... -o json`` or None,
  and ``poll(check, what, timeout)`` waits for a truthy value (an exception in ``check``
  is not swallowed: a test that sees its operator exit says so at once).
  ``running_operator_process(kubeconfig, log, *args)`` runs ``gleaner operator`` against the
  plane for the length of a ``with`` block.
- ``Pki(directory).loopback_server()`` makes only a throw-away CA and a serving certificate
  for 127.0.0.1 (``ca.crt``, ``tls.crt``, ``tls.key``): for an admission webhook that the
  API server calls on loopback (the webhook tests and the control-plane benchmark).
- ``chart_webhook_configuration(chart_dir, name, url, ca)`` is the chart's
  MutatingWebhookConfiguration as Helm renders it (every entry, its selectors and failure
  policy unchanged), named ``name``, with each entry's ``clientConfig`` pointed at ``url``
  and trusting the PEM ``ca``: how such a loopback webhook is registered. ``values`` are
  the chart values to render with (default: the chart's own).
- ``chart_finalizer_policy(chart_dir, name)`` is the chart's MutatingAdmissionPolicy and
  MutatingAdmissionPolicyBinding that add the operator's finalizer to each OfflineJob at
  creation (rendered with ``operator.finalizerAtAdmission: policy``), both named ``name``:
  what the chart installs on an API server that serves MutatingAdmissionPolicy.
- ``stop()`` stops every process (SIGTERM to its group, SIGKILL after a grace period;
  reverse start order; safe to call twice). ``diagnostics()`` gives each process's
  command, state, log path and last log lines.

Everything listens on 127.0.0.1 only. Nothing here knows Gleaner's resources.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

import yaml

from gleaner.testing.net import free_port
from gleaner.testing.processes import ManagedProcess, ProcessSet

__all__ = [
    "BINARY_ENV",
    "CONTROLLERS",
    "GPU_PRODUCT_LABEL",
    "GPU_RESOURCE",
    "KWOK_ANNOTATION",
    "ControlPlane",
    "ControlPlaneUnavailableError",
    "GpuNode",
    "KubectlError",
    "Pki",
    "apply",
    "chart_finalizer_policy",
    "chart_webhook_configuration",
    "find_binary",
    "get_json",
    "gpu_node_manifest",
    "kubeconfig_document",
    "poll",
]

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_BINARY = REPO_ROOT / ".gl" / "bin" / "glcluster"
BINARY_ENV = "GLEANER_CONTROLPLANE_BIN"
BUILD_HINT = "scripts/controlplane-build.sh builds it (see docs/controlplane.md)"

KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
"""The annotation that hands a Node to the KWOK controller (KWOK's own convention)."""

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""The label NVIDIA's GPU feature discovery puts on GPU nodes."""

GPU_RESOURCE = "nvidia.com/gpu"

CONTROLLERS = (
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "namespace-controller",
    "root-ca-certificate-publisher-controller",
)
"""The kube-controller-manager controllers the tests need; the rest stay off to save CPU."""

SERVICE_CIDR = "10.96.0.0/16"


class ControlPlaneUnavailableError(RuntimeError):
    """The control plane binary is missing or a component failed to start."""


class KubectlError(subprocess.CalledProcessError):
    """kubectl failed; unlike its base class, ``str()`` includes kubectl's stderr."""

    def __init__(self, result: subprocess.CompletedProcess[str]) -> None:
        super().__init__(result.returncode, result.args, result.stdout, result.stderr)

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr}"


def find_binary() -> Path:
    """The ``glcluster`` binary: ``$GLEANER_CONTROLPLANE_BIN`` or ``.gl/bin/glcluster``."""
    configured = os.environ.get(BINARY_ENV)
    path = Path(configured) if configured else DEFAULT_BINARY
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ControlPlaneUnavailableError(f"no control plane binary at {path}: {BUILD_HINT}")
    return path


@dataclass(frozen=True)
class GpuNode:
    """A KWOK node with ``gpus`` GPUs of one product."""

    name: str
    gpus: int = 8
    product: str = "NVIDIA-H100-80GB-HBM3"
    labels: Mapping[str, str] = field(default_factory=dict)
    cpu: str = "64"
    memory: str = "512Gi"


def gpu_node_manifest(node: GpuNode) -> dict[str, Any]:
    """The Node object for ``node`` as a kubelet with NVIDIA's device plugin would
    register it: GPU capacity, the product label, and KWOK's annotation."""
    resources = {
        "cpu": node.cpu,
        "memory": node.memory,
        "pods": "110",
        GPU_RESOURCE: str(node.gpus),
    }
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        GPU_PRODUCT_LABEL: node.product,
        **node.labels,
    }
    key, value = KWOK_ANNOTATION
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels, "annotations": {key: value}},
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


def kubeconfig_document(
    server: str, ca: Path, cert: Path, key: Path, user: str = "admin"
) -> dict[str, Any]:
    """A one-cluster, one-user kubeconfig authenticating with a client certificate."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gleaner-test",
                "cluster": {"server": server, "certificate-authority": str(ca)},
            }
        ],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
        ],
        "contexts": [{"name": user, "context": {"cluster": "gleaner-test", "user": user}}],
        "current-context": user,
    }


class Pki:
    """The cluster's throw-away keys and certificates, made with the ``openssl`` CLI.

    EC P-256 keys (fast to generate); everything valid for a day."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)

    def path(self, name: str) -> Path:
        return self.dir / name

    def _openssl(self, *args: str) -> None:
        result = subprocess.run(
            ["openssl", *args], capture_output=True, text=True, check=False, cwd=self.dir
        )
        if result.returncode != 0:
            raise ControlPlaneUnavailableError(f"openssl {' '.join(args)}: {result.stderr}")

    def _key(self, name: str) -> None:
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                      "-out", f"{name}.key")  # fmt: skip

    def _signed(self, name: str, subject: str, extensions: str) -> None:
        self._key(name)
        self._openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr")
        (self.dir / f"{name}.ext").write_text(extensions)
        self._openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
        )  # fmt: skip

    def _ca(self) -> None:
        if shutil.which("openssl") is None:
            raise ControlPlaneUnavailableError("the control plane needs the openssl CLI")
        self.dir.mkdir(parents=True, exist_ok=True)
        self._key("ca")
        self._openssl(
            "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=gleaner-test-ca", "-days", "1",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", "ca.crt",
        )  # fmt: skip

    def loopback_server(self) -> Self:
        """Only a CA (``ca.crt``) and a serving certificate for IP 127.0.0.1 signed by it
        (``tls.crt``, ``tls.key``): what a webhook on loopback shows the API server, which
        trusts it through a ``caBundle`` of ``ca.crt``."""
        self._ca()
        self._signed(
            "tls",
            "/CN=127.0.0.1",
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
        )
        return self

    def generate(self) -> Self:
        self._ca()
        client = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        self._signed(
            "apiserver",
            "/CN=kube-apiserver",
            client + "extendedKeyUsage=serverAuth\n"
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1\n",
        )
        self._signed("admin", "/O=system:masters/CN=gleaner-test-admin",
                     client + "extendedKeyUsage=clientAuth\n")  # fmt: skip
        self._signed("controller-manager", "/CN=system:kube-controller-manager",
                     client + "extendedKeyUsage=clientAuth\n")  # fmt: skip
        self._signed("scheduler", "/CN=system:kube-scheduler",
                     client + "extendedKeyUsage=clientAuth\n")  # fmt: skip
        self._key("sa")
        self._openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        return self


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and KWOK (see the module docstring)."""

    def __init__(
        self,
        workdir: Path,
        *,
        binary: Path | None = None,
        startup_timeout: float = 180.0,
        controllers: Sequence[str] = CONTROLLERS,
        apiserver_args: Sequence[str] = (),
    ) -> None:
        self.workdir = Path(workdir)
        self.binary = binary
        self.startup_timeout = startup_timeout
        self.controllers = tuple(controllers)
        self.apiserver_args = tuple(apiserver_args)
        self.pki = Pki(self.workdir / "pki")
        self.processes = ProcessSet()
        self.server = ""
        self.etcd_url = ""
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> Self:
        binary = self.binary or find_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.startup_timeout
        try:
            self.pki.generate()
            self._start_etcd(binary, deadline)
            self._start_apiserver(binary, deadline)
            self._start_controller_manager(binary)
            self._start_kwok(binary)
            self._wait_default_service_account(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.processes.stop_all(grace=10.0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def diagnostics(self, lines: int = 25) -> str:
        return self.processes.diagnostics(lines)

    def _process(self, name: str, argv: Sequence[str]) -> ManagedProcess:
        log = self.workdir / "logs" / f"{name}.log"
        return self.processes.add(ManagedProcess(name, argv, log)).start()

    def _start_etcd(self, binary: Path, deadline: float) -> None:
        client = f"http://127.0.0.1:{free_port()}"
        process = self._process(
            "etcd",
            [
                str(binary), "etcd", f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-url={client}", f"--listen-peer-url=http://127.0.0.1:{free_port()}",
                "--log-level=error",
            ],
        )  # fmt: skip
        self.etcd_url = client
        self._wait_url(f"{client}/health", process, deadline, ssl_context=None)

    def _start_apiserver(self, binary: Path, deadline: float) -> None:
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        p = self.pki.path
        process = self._process(
            "kube-apiserver",
            [
                str(binary), "kube-apiserver",
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1", f"--secure-port={port}",
                "--advertise-address=127.0.0.1",
                # The "kubernetes" Service's endpoints would be 127.0.0.1, which the API
                # rejects for Endpoints; nothing here needs that Service.
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={p('apiserver.crt')}",
                f"--tls-private-key-file={p('apiserver.key')}",
                f"--client-ca-file={p('ca.crt')}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={p('sa.pub')}",
                f"--service-account-signing-key-file={p('sa.key')}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                "--profiling=false",
                "--v=1",
                *self.apiserver_args,
            ],
        )  # fmt: skip
        self._wait_url(f"{self.server}/readyz", process, deadline, ssl_context=self._ssl())
        self.admin_kubeconfig.write_text(
            yaml.safe_dump(
                kubeconfig_document(self.server, p("ca.crt"), p("admin.crt"), p("admin.key"))
            )
        )

    def _start_controller_manager(self, binary: Path) -> None:
        p = self.pki.path
        kubeconfig = self.workdir / "controller-manager.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                kubeconfig_document(
                    self.server, p("ca.crt"), p("controller-manager.crt"),
                    p("controller-manager.key"), user="system:kube-controller-manager",
                )
            )
        )  # fmt: skip
        self._process(
            "kube-controller-manager",
            [
                str(binary), "kube-controller-manager",
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                # The API server has no front proxy: no request-header CA to look up.
                "--authentication-skip-lookup",
                "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
                f"--cert-dir={self.workdir / 'controller-manager-certs'}",
                f"--controllers={','.join(self.controllers)}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={p('sa.key')}",
                f"--root-ca-file={p('ca.crt')}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
        )  # fmt: skip

    def start_scheduler(self, *args: str) -> ManagedProcess:
        """Start upstream kube-scheduler (``args`` appended to its flags) and wait until it
        serves ``/healthz``."""
        binary = self.binary or find_binary()
        p = self.pki.path
        kubeconfig = self.workdir / "scheduler.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                kubeconfig_document(
                    self.server, p("ca.crt"), p("scheduler.crt"), p("scheduler.key"),
                    user="system:kube-scheduler",
                )
            )
        )  # fmt: skip
        port = free_port()
        process = self._process(
            "kube-scheduler",
            [
                str(binary), "scheduler",
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--authentication-skip-lookup",
                "--bind-address=127.0.0.1", f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'scheduler-certs'}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
                *args,
            ],
        )  # fmt: skip
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its serving certificate is self-signed
        self._wait_url(
            f"https://127.0.0.1:{port}/healthz",
            process,
            time.monotonic() + self.startup_timeout,
            ssl_context=insecure,
        )
        return process

    def token_kubeconfig(
        self, account: str, namespace: str, path: Path, duration: str = "2h"
    ) -> Path:
        """Write to ``path`` a kubeconfig authenticating as the ServiceAccount ``account`` of
        ``namespace`` with a token from the TokenRequest API; return ``path``."""
        token = self.kubectl(
            "create", "token", account, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gleaner-test",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.pki.path("ca.crt")),
                    },
                }
            ],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [
                {"name": account, "context": {"cluster": "gleaner-test", "user": account}}
            ],
            "current-context": account,
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def _start_kwok(self, binary: Path) -> None:
        stages = subprocess.run(
            [str(binary), "kwok-default-stages"], capture_output=True, text=True, check=True
        ).stdout
        config = self.workdir / "kwok-stages.yaml"
        config.write_text(stages)
        key, value = KWOK_ANNOTATION
        self._process(
            "kwok",
            [
                str(binary), "kwok",
                f"--config={config}",
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--manage-nodes-with-annotation-selector={key}={value}",
                "--node-ip=127.0.0.1",
                "--cidr=10.244.0.1/16",
            ],
        )  # fmt: skip

    # ---- faults on demand --------------------------------------------------------------

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM, then SIGKILL); etcd and the rest keep running."""
        self.processes.get("kube-apiserver").stop(grace=10.0)

    def start_apiserver(self, timeout: float = 120.0) -> None:
        """Start the stopped kube-apiserver again, same flags, port and etcd; wait for
        ``/readyz``."""
        process = self.processes.get("kube-apiserver").start()
        deadline = time.monotonic() + timeout
        self._wait_url(f"{self.server}/readyz", process, deadline, ssl_context=self._ssl())

    def restart_apiserver(self, timeout: float = 120.0) -> None:
        self.stop_apiserver()
        self.start_apiserver(timeout)

    def _etcd(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST to etcd's JSON gateway (the gRPC API over HTTP) and return its answer."""
        request = urllib.request.Request(
            f"{self.etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30.0) as resp:
            return dict(json.load(resp))

    def etcd_revision(self) -> int:
        """etcd's current revision (every write, of any key, moves it on by one)."""
        return int(self._etcd("/v3/maintenance/status", {})["header"]["revision"])

    def bump_etcd_revision(self, writes: int = 1) -> int:
        """Write ``writes`` keys outside the API server's ``/registry`` prefix; the new
        revision."""
        for i in range(writes):
            key = base64.b64encode(f"/gleaner-test/bump/{i}".encode()).decode()
            self._etcd("/v3/kv/put", {"key": key, "value": base64.b64encode(b"x").decode()})
        return self.etcd_revision()

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (physically: the old
        revisions are gone when this returns); that revision."""
        revision = self.etcd_revision()
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _wait_default_service_account(self, deadline: float) -> None:
        self._wait(
            lambda: self._has_service_account("default"),
            deadline,
            "the default ServiceAccount (kube-controller-manager)",
        )

    def _has_service_account(self, namespace: str) -> bool:
        result = self.kubectl("get", "serviceaccount", "default", "-n", namespace, check=False)
        return result.returncode == 0

    def wait_service_account(self, namespace: str, timeout: float = 60.0) -> None:
        """Wait until ``namespace`` has its ``default`` ServiceAccount (Pods need it)."""
        self._wait(
            lambda: self._has_service_account(namespace),
            time.monotonic() + timeout,
            f"the default ServiceAccount in {namespace}",
        )

    # ---- waiting ---------------------------------------------------------------------

    def _ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.pki.path("ca.crt")))

    def _check_alive(self) -> None:
        for process in self.processes.processes:
            if not process.alive():
                tail = "\n".join(process.log_tail(30))
                raise ControlPlaneUnavailableError(
                    f"{process.name} {process.state()}; log {process.log_path}:\n{tail}"
                )

    def _wait(self, ready: Callable[[], bool], deadline: float, what: str) -> None:
        """Poll ``ready`` until ``deadline`` (monotonic); fail at once if a component died."""
        began = time.monotonic()
        while True:
            self._check_alive()
            if ready():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneUnavailableError(
                    f"{what} not ready after {time.monotonic() - began:.0f} s\n"
                    + self.diagnostics()
                )
            time.sleep(0.25)

    def _wait_url(
        self,
        url: str,
        process: ManagedProcess,
        deadline: float,
        *,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        def answers() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=2.0, context=ssl_context) as resp:
                    return int(resp.status) == 200
            except (urllib.error.URLError, OSError):
                return False

        self._wait(answers, deadline, f"{process.name} ({url})")

    # ---- clients ---------------------------------------------------------------------

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run the installed ``kubectl`` against this cluster as the admin; with ``check``, a
        non-zero exit raises ``KubectlError``."""
        exe = shutil.which("kubectl")
        if exe is None:
            raise ControlPlaneUnavailableError("kubectl is not on PATH")
        result = subprocess.run(
            [exe, f"--kubeconfig={self.admin_kubeconfig}", *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise KubectlError(result)
        return result

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for the admin kubeconfig."""
        import kubernetes

        config = kubernetes.client.Configuration()
        config.host = self.server
        config.ssl_ca_cert = str(self.pki.path("ca.crt"))
        config.cert_file = str(self.pki.path("admin.crt"))
        config.key_file = str(self.pki.path("admin.key"))
        return kubernetes.client.ApiClient(config)

    def add_gpu_nodes(self, *nodes: GpuNode, timeout: float = 60.0) -> None:
        """Create KWOK GPU nodes and wait until KWOK has made every one Ready."""
        manifests = [gpu_node_manifest(node) for node in nodes]
        self.kubectl("create", "-f", "-", input="\n".join(json.dumps(m) for m in manifests))
        deadline = time.monotonic() + timeout

        def ready() -> bool:
            return all(self.node_ready(node.name) for node in nodes)

        self._wait(ready, deadline, "the KWOK nodes " + ", ".join(n.name for n in nodes))

    def node_ready(self, name: str) -> bool:
        result = self.kubectl(
            "get", "node", name, "-o",
            'jsonpath={.status.conditions[?(@.type=="Ready")].status}', check=False,
        )  # fmt: skip
        return result.returncode == 0 and result.stdout.strip() == "True"


_T = TypeVar("_T")


def poll(check: Callable[[], _T | None], what: str | Callable[[], str], timeout: float = 90) -> _T:
    """``check()``'s first truthy value, polled every 0.25 s; AssertionError after
    ``timeout`` seconds, with ``what`` (or what it returns) saying what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            text = what if isinstance(what, str) else what()
            raise AssertionError(f"not within {timeout:.0f} s: {text}")
        time.sleep(0.25)


def apply(plane: ControlPlane, *docs: Mapping[str, Any]) -> None:
    """``kubectl apply`` of ``docs`` as one List (all or the first error)."""
    plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    )


def apply_nodetrace(plane: ControlPlane, manifest: Mapping[str, Any]) -> None:
    """Write a NodeTrace with kubectl: the object (``kubectl apply``), then its status through
    the status subresource, which a write of the object itself leaves out."""
    trace = dict(manifest)
    status = trace.pop("status", None)
    apply(plane, trace)
    if status is not None:
        plane.kubectl(
            "patch", "nt", str(trace["metadata"]["name"]), "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip


@contextlib.contextmanager
def running_operator_process(
    kubeconfig: Path, log: Path, *args: str, http_port: int | None = None
) -> Iterator[ManagedProcess]:
    """``gleaner operator`` with the tests' fast flags (``FAST_OPERATOR_FLAGS``) and ``args``,
    as the user of ``kubeconfig``, its HTTP server on 127.0.0.1 (``http_port``, or a free
    one). Stopped on exit, its log's tail printed (pytest shows it when the test failed)."""
    from gleaner.testing.kube import FAST_OPERATOR_FLAGS

    port = free_port() if http_port is None else http_port
    process = ManagedProcess(
        "gleaner-operator",
        [
            sys.executable, "-m", "gleaner.cli.main", "operator", *FAST_OPERATOR_FLAGS,
            f"--http-port={port}", "--http-host=127.0.0.1", *args,
        ],
        log,
        env={**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"},
    ).start()  # fmt: skip
    try:
        yield process
    finally:
        process.stop(grace=15)
        print(process.log()[-6000:])


def get_json(plane: ControlPlane, *args: str) -> dict[str, Any] | None:
    """``kubectl get ARGS -o json``, or None when kubectl fails (e.g. not found)."""
    result = plane.kubectl("get", *args, "-o", "json", check=False)
    return dict(json.loads(result.stdout)) if result.returncode == 0 else None


def _chart_documents(
    chart_dir: Path, namespace: str, values: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """The chart's manifests as Helm renders them offline for release ``gleaner``."""
    import helm_python as helm  # a development dependency, like this package

    with helm.Chart.load(chart_dir) as chart:
        rendered = chart.render(
            dict(values) if values else None, name="gleaner", namespace=namespace, is_install=True
        )
    return [
        dict(doc)
        for path, text in sorted(rendered.items())
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def chart_webhook_configuration(
    chart_dir: Path,
    name: str,
    url: str,
    ca: bytes,
    namespace: str = "gleaner-system",
    values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration, rendered by Helm with ``values`` for a
    release in ``namespace``, renamed ``name``, every entry's ``clientConfig`` pointed at
    ``url`` and trusting ``ca`` (the module docstring)."""
    for doc in _chart_documents(chart_dir, namespace, values):
        if doc["kind"] == "MutatingWebhookConfiguration":
            config: dict[str, Any] = dict(doc)
            config["metadata"] = {"name": name}
            bundle = base64.b64encode(ca).decode()
            for entry in config["webhooks"]:
                entry["clientConfig"] = {"url": url, "caBundle": bundle}
            return config
    raise ValueError(f"the chart in {chart_dir} renders no MutatingWebhookConfiguration")


def chart_finalizer_policy(
    chart_dir: Path,
    name: str,
    namespace: str = "gleaner-system",
    values: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The chart's MutatingAdmissionPolicy and its binding (OfflineJobs' finalizer at
    creation), rendered by Helm with ``values`` and ``operator.finalizerAtAdmission:
    policy`` for a release in ``namespace``, both renamed ``name`` (the binding names its
    policy so): how the chart registers them on an API server that serves the API."""
    operator = {**dict((values or {}).get("operator") or {}), "finalizerAtAdmission": "policy"}
    docs = _chart_documents(chart_dir, namespace, {**dict(values or {}), "operator": operator})
    found = [
        doc
        for doc in docs
        if doc["kind"] in ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
    ]
    if sorted(doc["kind"] for doc in found) != [
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    ]:
        raise ValueError(f"the chart in {chart_dir} renders no finalizer policy and binding")
    for doc in found:
        doc["metadata"] = {"name": name}
        if doc["kind"] == "MutatingAdmissionPolicyBinding":
            doc["spec"]["policyName"] = name
    return sorted(found, key=lambda doc: str(doc["kind"]))
