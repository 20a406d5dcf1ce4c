"""Scheduling on the real control plane: Gleaner's operator against upstream kube-scheduler.

One real control plane (``gleaner.testing.controlplane``: etcd, kube-apiserver,
kube-controller-manager, KWOK; docs/controlplane.md), ``--n`` KWOK nodes of 8 GPUs, each
with a NodeTrace of varied online load. Two rounds on the same API server:

1. Gleaner: the real ``gleaner operator`` process, authenticated as a ServiceAccount bound
   to exactly ``OPERATOR_RULES``, with the admission configuration the chart installs on
   this API server (Kubernetes 1.36, so ``operator.finalizerAtAdmission: auto`` picks the
   MutatingAdmissionPolicy): the chart's policy and binding, which store each OfflineJob
   with the finalizer, and the chart's MutatingWebhookConfiguration for online Pods
   (rendered by Helm, ``clientConfig`` pointed at the operator's ``--webhook-port`` with a
   throw-away CA), registered for this round only; ``--n`` OfflineJobs
   (1/2/4/8 GPUs; 5% with an SLA no node meets) created at once. The clock runs from the
   first creation until every job is Running (its Pod bound and run by KWOK) or
   Unschedulable with a reason.
2. kube-scheduler (``glcluster scheduler``, upstream defaults): ``--n`` plain Pods
   requesting the same mix of ``nvidia.com/gpu`` created at once. The clock runs until every
   Pod is bound (and, reported too, Running). The operator is stopped by then; Gleaner's
   Pods request no ``nvidia.com/gpu``, so every GPU is free to kube-scheduler.

Each round's outcome is read from a watch on its objects (``Watched``), not from lists.
``--profile DIR`` also takes CPU profiles of kube-apiserver through each round.

The API server audits (metadata only) the requests of the operator's ServiceAccount and of
``system:kube-scheduler``; the rounds' windows give requests per bound job/Pod, also per kind
of request. Reported: jobs and Pods bound per second, their ratio, requests per bound
object, the load average at each Gleaner round's start and end.

``--baseline DIR`` pairs two versions in one run: the operator of another source tree (e.g.
``git archive <commit> | tar -x -C DIR``) runs a Gleaner round with the same jobs first, on the
same control plane; its jobs and Pods are then removed, and this tree's round follows. The
baseline round runs without any admission configuration (an older operator may refuse the
reviews it was not written for), so its operator adds each job's finalizer itself.

Exit 1 when a round does not finish within ``--timeout`` or an Unschedulable job has no
reason; 2 without the control-plane binary. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes.watch
import yaml

from gleaner.api.contract import FINALIZER
from gleaner.operator.rbac import OPERATOR_RULES
from gleaner.operator.webhook import MUTATE_PATH
from gleaner.testing.controlplane import (
    GPU_RESOURCE,
    ControlPlane,
    ControlPlaneUnavailableError,
    GpuNode,
    Pki,
    chart_finalizer_policy,
    chart_webhook_configuration,
    find_binary,
    gpu_node_manifest,
)
from gleaner.testing.kube import FAST_OPERATOR_FLAGS, nodetrace_manifest, offlinejob_manifest
from gleaner.testing.net import free_port
from gleaner.testing.processes import ManagedProcess

OPERATOR_NAMESPACE = "gleaner-bench"
OPERATOR_ACCOUNT = "gleaner-operator"
JOBS_NAMESPACE = "bench-jobs"
PODS_NAMESPACE = "bench-pods"
SCHEDULER_USER = "system:kube-scheduler"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_ACCOUNT}"
GPU_MIX = ((1, 50), (2, 25), (4, 15), (8, 10))
"""GPUs per job or Pod, and weights: 2.4 GPUs on average, 30% of the cluster's GPUs."""

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "users": [SCHEDULER_USER]},
        {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{OPERATOR_NAMESPACE}"]},
        {"level": "None"},
    ],
}


@dataclass(frozen=True)
class Round:
    """One scheduler's round: objects, how many were bound, seconds until all were done (or
    until the round's timeout, when ``finished`` is false: then ``per_second`` is the rate
    within the timeout)."""

    objects: int
    bound: int
    seconds: float
    requests: int
    by_kind: dict[str, int]
    finished: bool = True
    created_seconds: float = 0.0
    """Seconds to create the ``objects`` (part of ``seconds``)."""
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds (user + system) each process spent during the round (``cpu_seconds``)."""

    @property
    def per_second(self) -> float:
        return self.bound / self.seconds if self.seconds > 0 else 0.0

    @property
    def decided_per_second(self) -> float:
        """Objects bound or explained (Unschedulable with a reason) per second: all of them
        over the round's time when it finished."""
        return self.objects / self.seconds if self.finished and self.seconds > 0 else 0.0

    @property
    def requests_per_bound(self) -> float:
        return self.requests / self.bound if self.bound else float("nan")


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench controlplane")
    parser.add_argument("--n", type=int, default=1000, help="nodes, jobs and Pods")
    parser.add_argument("--quick", action="store_true", help="--n 100")
    parser.add_argument("--timeout", type=float, default=600.0, help="per round, seconds")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=8, help="client threads creating")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="source tree of another Gleaner version (e.g. a git worktree at an older "
        "commit): its operator runs a Gleaner round first, on the same control plane",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="DIR",
        help="take CPU profiles of kube-apiserver during each round (pprof files in DIR) and "
        "print where its time went ('go tool pprof' reads them)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the control plane's directory (logs, audit log) after a successful run; "
        "it is always kept after a failed one",
    )
    return parser.parse_args(argv)


def _gpus(rng: random.Random) -> int:
    counts, weights = zip(*GPU_MIX, strict=True)
    return int(rng.choices(counts, weights=weights)[0])


def _stamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def audited_by_kind(log: Path, user: str, start: float, end: float) -> dict[str, int]:
    """Requests of ``user`` that the API server received between ``start`` and ``end``
    (wall-clock seconds), per kind: ``verb resource[/subresource]``, with `` 409`` appended
    for those it refused as conflicts."""
    counts: dict[str, int] = {}
    with log.open() as lines:
        for line in lines:
            if user not in line:
                continue
            event = json.loads(line)
            if event.get("user", {}).get("username") != user:
                continue
            if not start <= _stamp(event["requestReceivedTimestamp"]) <= end:
                continue
            ref = event.get("objectRef") or {}
            kind = f"{event.get('verb')} {ref.get('resource', event.get('requestURI', '?'))}"
            if ref.get("subresource"):
                kind += f"/{ref['subresource']}"
            if (event.get("responseStatus") or {}).get("code") == 409:
                kind += " 409"
            counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


TRANSIENT = frozenset({429, 500, 502, 503, 504})
"""API server answers after which the bench polls again."""
WATCHED_EVERY = 0.05
"""Seconds between checks of a round's watched objects (a check reads the bench's own copy)."""


def _load() -> str:
    """The machine's 1, 5 and 15 minute load averages (other work slows every round)."""
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds (user + system) of the live processes of process group ``pgid`` (each
    plane component and the operator runs in a group of its own), from /proc; 0 where
    /proc is not Linux's."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited meanwhile
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / ticks


def cpu_seconds(processes: list[ManagedProcess]) -> dict[str, float]:
    """CPU seconds so far of each live process (by name; its group's processes summed) and
    of this benchmark's own process, ``bench client`` (its threads create the objects and
    poll for the outcome)."""
    times = os.times()
    seen = {p.name: group_cpu_seconds(p.pid) for p in processes if p.pid and p.alive()}
    return {**seen, "bench client": times.user + times.system}


def cpu_during(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds spent between two ``cpu_seconds`` readings, by process."""
    return {name: round(after[name] - before.get(name, 0.0), 2) for name in after}


class ApiServerProfile:
    """CPU profiles of kube-apiserver while a round runs (``--profile``): taken back to back,
    ``SLICE_SECONDS`` each, from its ``/debug/pprof/profile`` endpoint as the admin, written
    to ``directory`` as ``NAME-NNN.pb.gz``; :meth:`top` merges them with ``go tool pprof``.
    The last slice runs up to ``SLICE_SECONDS`` past the round's end."""

    SLICE_SECONDS = 2

    def __init__(self, plane: ControlPlane, directory: Path, name: str) -> None:
        self.url = f"{plane.server}/debug/pprof/profile?seconds={self.SLICE_SECONDS}"
        self.directory = directory
        self.name = name
        self.files: list[Path] = []
        self.error = ""
        self._context = ssl.create_default_context(cafile=str(plane.pki.path("ca.crt")))
        self._context.load_cert_chain(plane.pki.path("admin.crt"), plane.pki.path("admin.key"))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"profile-{name}", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(
                    self.url, context=self._context, timeout=self.SLICE_SECONDS + 30
                ) as response:
                    data = response.read()
            except OSError as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                return
            path = self.directory / f"{self.name}-{len(self.files):03d}.pb.gz"
            path.write_bytes(data)
            self.files.append(path)

    def __enter__(self) -> ApiServerProfile:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def top(self, lines: int = 25) -> str:
        """``go tool pprof -top`` over every slice: the functions by CPU spent in them (flat)
        and under them (cum), also written to ``NAME-top.txt`` and ``NAME-cum.txt``."""
        if not self.files:
            why = self.error or "the round was too short"
            return f"no profile of kube-apiserver was taken ({why})"
        go = shutil.which("go")
        if go is None:
            return f"profiles in {self.directory}; 'go tool pprof' reads them (go not found here)"
        out = []
        for order, flags in (("top", ["-top"]), ("cum", ["-top", "-cum"])):
            shown = subprocess.run(
                [go, "tool", "pprof", *flags, f"-nodecount={lines}", *map(str, self.files)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            text = shown.stdout or shown.stderr
            (self.directory / f"{self.name}-{order}.txt").write_text(text)
            out.append(text)
        return "\n".join(out)


class Watched:
    """The objects of one list call as a watch keeps them, on a thread of its own, for a
    round's clock: each check reads this copy instead of listing every object again (a list
    of 1,000 objects every half second cost the API server and the bench more CPU than the
    watch, and that CPU was taken from the schedulers being measured). Starts from a list
    (``with``); after a watch error it lists again. Events are parsed as plain JSON."""

    def __init__(self, list_fn: Callable[..., Any], *args: Any) -> None:
        self._list = list_fn
        self._args = args
        self._objects: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._watch: Any = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
        self._stopped = threading.Event()
        self._version = ""
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)

    def _relist(self) -> None:
        response = self._list(*self._args, _preload_content=False)
        listed = json.loads(response.data)
        with self._lock:
            self._objects = {o["metadata"]["name"]: o for o in listed.get("items") or []}
        self._version = str(listed["metadata"]["resourceVersion"])

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                for event in self._watch.stream(
                    self._list, *self._args, resource_version=self._version,
                    allow_watch_bookmarks=True, deserialize=False,
                ):  # fmt: skip
                    obj = event.get("object") or {}
                    meta = obj.get("metadata") or {}
                    if event.get("type") == "ERROR" or not meta.get("resourceVersion"):
                        raise RuntimeError(f"watch error: {obj}")
                    if event["type"] != "BOOKMARK":
                        with self._lock:
                            if event["type"] == "DELETED":
                                self._objects.pop(meta["name"], None)
                            else:
                                self._objects[meta["name"]] = obj
                    self._version = str(meta["resourceVersion"])
            except Exception:  # any failure of the stream: list again
                if self._stopped.is_set():
                    return
                time.sleep(0.2)
                try:
                    self._relist()
                except Exception:  # the API server is busy: try again
                    continue

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._objects.values())

    def __enter__(self) -> Watched:
        self._relist()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # The stream ends at its next event or when the control plane stops (a daemon thread).
        self._stopped.set()
        self._watch.stop()


def _wait(
    done: Callable[[], tuple[int, int]], timeout: float, what: str, every: float = 0.5
) -> float | None:
    """Poll ``done`` (finished, total) every ``every`` seconds until all finished; seconds
    from now, or None. Progress is printed at most once a second."""
    start = time.monotonic()
    last = -1
    printed = -1.0
    while time.monotonic() - start < timeout:
        try:
            finished, total = done()
        except kubernetes.client.ApiException as exc:
            if exc.status not in TRANSIENT:
                raise
            # A loaded API server answers the bench's own list with 504 now and then.
            print(f"  {what}: the API server answered {exc.status}; polling on", flush=True)
            time.sleep(1.0)
            continue
        now = time.monotonic() - start
        if finished != last and (now - printed >= 1.0 or finished == total):
            print(f"  {what}: {finished}/{total} at {now:.1f} s", flush=True)
            last, printed = finished, now
        if finished == total:
            return now
        time.sleep(every)
    return None


class Bench:
    """The control plane, its clients and the two rounds."""

    def __init__(self, plane: ControlPlane, workers: int, repo: Path) -> None:
        self.plane = plane
        self.repo = repo
        self.workers = workers
        self.profile_dir: Path | None = None
        """Where ``--profile`` writes kube-apiserver's CPU profiles (None: not taken)."""
        self.profiles: dict[str, ApiServerProfile] = {}
        self.loads: dict[str, list[float]] = {}
        self.traces_at = 0.0
        client = plane.api_client()
        client.configuration.connection_pool_maxsize = workers * 2
        self.core: Any = kubernetes.client.CoreV1Api(client)
        self.custom: Any = kubernetes.client.CustomObjectsApi(client)

    def profiled(self, name: str) -> contextlib.AbstractContextManager[object]:
        """Profile kube-apiserver inside the block when ``--profile`` asked for it."""
        if self.profile_dir is None:
            return contextlib.nullcontext()
        profile = ApiServerProfile(self.plane, self.profile_dir, name)
        self.profiles[name] = profile
        return profile

    def parallel(self, fn: Callable[[Any], object], items: list[Any]) -> None:
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            list(pool.map(fn, items))

    # ---- the cluster -----------------------------------------------------------------

    def nodes(self, n: int, rng: random.Random) -> None:
        names = [f"gpu-{i:04d}" for i in range(n)]
        self.parallel(lambda name: self.core.create_node(gpu_node_manifest(GpuNode(name))), names)

        def ready() -> tuple[int, int]:
            items = self.core.list_node().items
            ok = sum(
                1
                for node in items
                if any(
                    c.type == "Ready" and c.status == "True" for c in node.status.conditions or []
                )
            )
            return ok, n

        if _wait(ready, 300, "nodes Ready") is None:
            raise SystemExit("error: the KWOK nodes did not turn Ready")
        # The API server taints every new Node not-ready (TaintNodesByCondition); the node
        # lifecycle controller, which lifts it once the Node is Ready, does not run here.
        # kube-scheduler honours the taint (Gleaner's placement does not read taints).
        self.plane.kubectl("taint", "nodes", "--all", "node.kubernetes.io/not-ready:NoSchedule-")
        self.loads = {name: [round(rng.uniform(0.5, 0.97), 3) for _ in range(8)] for name in names}
        traces = [
            nodetrace_manifest(name, gpus=8, offline_enabled=load)
            for name, load in self.loads.items()
        ]
        self.parallel(self.apply_trace, traces)
        self.traces_at = time.monotonic()

    def refresh_traces(self) -> None:
        """Report every node's same load again, as its agent would, so that a later round
        finds no NodeTrace older than the operator's staleness limit (10 minutes)."""
        if time.monotonic() - self.traces_at < 60:
            return

        def report(name: str) -> None:
            manifest = nodetrace_manifest(name, gpus=8, offline_enabled=self.loads[name])
            self.custom.patch_cluster_custom_object_status(
                "gleaner.dev", "v1alpha1", "nodetraces", name, {"status": manifest["status"]}
            )

        self.parallel(report, list(self.loads))
        self.traces_at = time.monotonic()

    def apply_trace(self, manifest: dict[str, Any]) -> None:
        body = {k: v for k, v in manifest.items() if k != "status"}
        name = manifest["metadata"]["name"]
        self.custom.create_cluster_custom_object("gleaner.dev", "v1alpha1", "nodetraces", body)
        self.custom.patch_cluster_custom_object_status(
            "gleaner.dev", "v1alpha1", "nodetraces", name, {"status": manifest["status"]}
        )

    def install(self, repo: Path) -> None:
        """Gleaner's CRDs, kopf's peering CRDs and object, the operator's ServiceAccount bound
        to exactly OPERATOR_RULES, and the rounds' namespaces."""
        files = [*sorted((repo / "crds").glob("*.yaml"))]
        files += sorted((repo / "helm" / "gleaner" / "files" / "kopf").glob("*.yaml"))
        self.plane.kubectl("apply", *(f"--filename={f}" for f in files))
        self.plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}
        docs: list[dict[str, Any]] = [
            {
                "apiVersion": "kopf.dev/v1",
                "kind": "ClusterKopfPeering",
                "metadata": {"name": "gleaner"},
            },
            *(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                for ns in (OPERATOR_NAMESPACE, JOBS_NAMESPACE, PODS_NAMESPACE)
            ),
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": OPERATOR_ACCOUNT, "namespace": OPERATOR_NAMESPACE},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": OPERATOR_ACCOUNT},
                "rules": [dict(rule) for rule in OPERATOR_RULES],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": OPERATOR_ACCOUNT},
                "roleRef": {**role_ref, "name": OPERATOR_ACCOUNT},
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": OPERATOR_ACCOUNT,
                        "namespace": OPERATOR_NAMESPACE,
                    }
                ],
            },
        ]
        self.plane.kubectl("apply", "-f", "-", input="\n".join(json.dumps(d) for d in docs))
        for ns in (OPERATOR_NAMESPACE, JOBS_NAMESPACE, PODS_NAMESPACE):
            self.plane.wait_service_account(ns)

    # ---- round 1: Gleaner ------------------------------------------------------------

    def gleaner(
        self, n: int, rng: random.Random, timeout: float, source: Path | None = None
    ) -> tuple[Round, dict[str, int]]:
        """One Gleaner round; ``source``: run the operator of that source tree instead of
        this one (its component folders go first on ``PYTHONPATH``)."""
        work = self.plane.workdir
        kubeconfig = self.plane.token_kubeconfig(
            OPERATOR_ACCOUNT, OPERATOR_NAMESPACE, work / "operator.kubeconfig"
        )
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
        webhook: list[str] = []
        admission: list[dict[str, Any]] = []
        if source is not None:
            folders = sorted(str(p) for p in source.iterdir() if (p / "gleaner").is_dir())
            env["PYTHONPATH"] = os.pathsep.join([*folders, env.get("PYTHONPATH", "")])
        else:
            tls = Pki(work / "webhook-tls").loopback_server().dir
            port = free_port()
            webhook = [f"--webhook-port={port}", f"--webhook-cert-dir={tls}"]
            url = f"https://127.0.0.1:{port}{MUTATE_PATH}"
            chart = self.repo / "helm" / "gleaner"
            # What "auto" renders on this API server, which serves MutatingAdmissionPolicy.
            values = {"operator": {"finalizerAtAdmission": "policy"}}
            admission = [
                chart_webhook_configuration(
                    chart,
                    "gleaner-bench-webhook",
                    url,
                    (tls / "ca.crt").read_bytes(),
                    OPERATOR_NAMESPACE,
                    values,
                ),
                *chart_finalizer_policy(chart, "gleaner-bench-finalizer", OPERATOR_NAMESPACE),
            ]
        operator = ManagedProcess(
            "gleaner-operator",
            [
                sys.executable, "-m", "gleaner.cli.main", "operator", "--all-namespaces",
                *FAST_OPERATOR_FLAGS, "--unschedulable-backoff=30s",
                f"--http-port={free_port()}", "--http-host=127.0.0.1", *webhook,
            ],
            work / "logs" / ("operator-baseline.log" if source else "operator.log"),
            env=env,
        )  # fmt: skip
        self.refresh_traces()
        # Not one of the plane's processes: it stops before kube-scheduler starts, and the
        # plane treats any of its own processes that exited as a failure.
        operator.start()
        registered: list[str] = []
        try:
            for doc in admission:
                self.plane.kubectl("create", "-f", "-", input=json.dumps(doc))
                registered.append(f"{doc['kind'].lower()}/{doc['metadata']['name']}")
            if admission:
                self.wait_for_finalizer_at_admission(operator)
            label = "gleaner-baseline" if source else "gleaner"
            return self._gleaner_round(operator, n, rng, timeout, label)
        finally:
            if registered:
                self.plane.kubectl("delete", *registered, check=False)
            operator.stop(grace=15)

    def wait_for_finalizer_at_admission(self, operator: ManagedProcess) -> None:
        """Until the API server stores a new OfflineJob with the finalizer (a server-side
        dry run, which runs admission and stores nothing): the API server has loaded the
        policy and its binding."""
        probe = offlinejob_manifest("admission-probe", namespace=JOBS_NAMESPACE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not operator.alive():
                raise SystemExit(f"error: the operator exited:\n{operator.log()[-3000:]}")
            answer = self.custom.create_namespaced_custom_object(
                "gleaner.dev", "v1alpha1", JOBS_NAMESPACE, "offlinejobs", probe, dry_run="All"
            )
            if FINALIZER in (answer.get("metadata", {}).get("finalizers") or []):
                print("  the API server adds the finalizer at creation", flush=True)
                return
            time.sleep(0.5)
        raise SystemExit("error: admission never added the finalizer to a dry-run OfflineJob")

    def _gleaner_round(
        self, operator: ManagedProcess, n: int, rng: random.Random, timeout: float, label: str
    ) -> tuple[Round, dict[str, int]]:
        work = self.plane.workdir
        time.sleep(3.0)  # kopf's start-up: peering, CRD scan, the first listings
        jobs = []
        for i in range(n):
            impossible = i % 20 == 19
            sla = 0.99 if impossible else round(rng.uniform(0.3, 0.8), 2)
            job = offlinejob_manifest(
                f"job-{i:04d}", namespace=JOBS_NAMESPACE, gpus=_gpus(rng), sla=sla
            )
            jobs.append(job)

        def create(job: dict[str, Any]) -> None:
            self.custom.create_namespaced_custom_object(
                "gleaner.dev", "v1alpha1", JOBS_NAMESPACE, "offlinejobs", job
            )

        phases: dict[str, int] = {}
        unexplained = 0
        watched_jobs = Watched(
            self.custom.list_namespaced_custom_object,
            "gleaner.dev", "v1alpha1", JOBS_NAMESPACE, "offlinejobs",
        )  # fmt: skip

        def done() -> tuple[int, int]:
            nonlocal phases, unexplained
            if not operator.alive():
                raise SystemExit(f"error: the operator exited:\n{operator.log()[-3000:]}")
            items = watched_jobs.items()
            phases = {}
            unexplained = 0
            finished = 0
            for job in items:
                status = job.get("status") or {}
                phase = str(status.get("phase", "(none)"))
                phases[phase] = phases.get(phase, 0) + 1
                if phase == "Running":
                    finished += 1
                elif phase == "Unschedulable":
                    finished += 1
                    unexplained += not any(
                        c["type"] == "Scheduled" and c.get("message")
                        for c in status.get("conditions", [])
                    )
            return finished, n

        print(f"  load average at the start: {_load()}", flush=True)
        watched = [*self.plane.processes.processes, operator]
        cpu_before = cpu_seconds(watched)
        began = time.time()
        start = time.monotonic()
        with watched_jobs, self.profiled(label):
            self.parallel(create, jobs)
            created = time.monotonic() - start
            print(f"  {n} OfflineJobs created in {created:.1f} s", flush=True)
            waited = _wait(done, timeout, "jobs Running or Unschedulable", every=WATCHED_EVERY)
            seconds = time.monotonic() - start
        cpu = cpu_during(cpu_before, cpu_seconds(watched))
        print(f"  load average at the end: {_load()}", flush=True)
        ended = time.time()
        kinds = audited_by_kind(work / "audit.log", OPERATOR_USER, began, ended)
        if unexplained:
            phases["Unschedulable without a reason"] = unexplained
        bound = phases.get("Running", 0)
        total = sum(kinds.values())
        return Round(n, bound, seconds, total, kinds, waited is not None, created, cpu), phases

    def clear_jobs(self) -> None:
        """Remove a Gleaner round's jobs and Pods (the operator has stopped), so that the
        next round starts on an empty cluster: force-delete the Pods, drop the jobs'
        finalizer, delete the jobs, and wait until they are gone."""
        self.plane.kubectl(
            "delete", "pods", "--all", "-n", JOBS_NAMESPACE, "--force", "--grace-period=0",
            "--wait=false",
        )  # fmt: skip
        items = self.custom.list_namespaced_custom_object(
            "gleaner.dev", "v1alpha1", JOBS_NAMESPACE, "offlinejobs"
        )["items"]

        def release(job: dict[str, Any]) -> None:
            self.custom.patch_namespaced_custom_object(
                "gleaner.dev", "v1alpha1", JOBS_NAMESPACE, "offlinejobs",
                job["metadata"]["name"], {"metadata": {"finalizers": None}},
            )  # fmt: skip

        self.parallel(release, items)
        self.plane.kubectl("delete", "offlinejobs", "--all", "-n", JOBS_NAMESPACE, "--wait=false")

        def gone() -> tuple[int, int]:
            jobs = self.custom.list_namespaced_custom_object(
                "gleaner.dev", "v1alpha1", JOBS_NAMESPACE, "offlinejobs"
            )["items"]
            pods = self.core.list_namespaced_pod(JOBS_NAMESPACE).items
            return len(items) - max(len(jobs), len(pods)), len(items)

        if _wait(gone, 300, "baseline jobs and Pods removed") is None:
            raise SystemExit("error: the baseline round's jobs and Pods were not removed")

    # ---- round 2: kube-scheduler -----------------------------------------------------

    def kube_scheduler(self, n: int, rng: random.Random, timeout: float) -> tuple[Round, float]:
        self.plane.start_scheduler()
        pods = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{i:04d}", "namespace": PODS_NAMESPACE},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example/offline:1",
                            "resources": {"limits": {GPU_RESOURCE: str(_gpus(rng))}},
                        }
                    ],
                },
            }
            for i in range(n)
        ]

        def create(pod: dict[str, Any]) -> None:
            self.core.create_namespaced_pod(PODS_NAMESPACE, pod)

        watched_pods = Watched(self.core.list_namespaced_pod, PODS_NAMESPACE)

        def count(running: bool) -> Callable[[], tuple[int, int]]:
            def done() -> tuple[int, int]:
                items = watched_pods.items()
                if running:
                    return sum(1 for p in items if p.get("status", {}).get("phase") == "Running"), n
                return sum(1 for p in items if p.get("spec", {}).get("nodeName")), n

            return done

        with watched_pods:
            cpu_before = cpu_seconds(self.plane.processes.processes)
            began = time.time()
            start = time.monotonic()
            with self.profiled("kube-scheduler"):
                self.parallel(create, pods)
                created = time.monotonic() - start
                print(f"  {n} Pods created in {created:.1f} s", flush=True)
                bound = _wait(count(running=False), timeout, "Pods bound", every=WATCHED_EVERY)
                seconds = time.monotonic() - start
            cpu = cpu_during(cpu_before, cpu_seconds(self.plane.processes.processes))
            ended = time.time()
            running = _wait(count(running=True), timeout, "Pods Running", every=WATCHED_EVERY)
            run_seconds = time.monotonic() - start if running is not None else float("inf")
            bound_pods = count(running=False)()[0]
        kinds = audited_by_kind(self.plane.workdir / "audit.log", SCHEDULER_USER, began, ended)
        total = sum(kinds.values())
        done = Round(n, bound_pods, seconds, total, kinds, bound is not None, created, cpu)
        return done, run_seconds


def main(argv: list[str]) -> int:
    args = _parse(argv)
    if args.quick:
        args.n = 100
    try:
        binary = find_binary()
    except ControlPlaneUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="bench-controlplane-"))
    code = 1
    try:
        code = _run(args, binary, workdir)
        return code
    finally:
        if code == 0 and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"control plane files (logs, audit log) kept in {workdir}", flush=True)


def _run(args: argparse.Namespace, binary: Path, workdir: Path) -> int:
    repo = Path(__file__).resolve().parents[1]
    policy = workdir / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    plane = ControlPlane(
        workdir,
        binary=binary,
        apiserver_args=(
            f"--audit-policy-file={policy}",
            f"--audit-log-path={workdir / 'audit.log'}",
            "--audit-log-maxsize=0",
            *(["--profiling=true"] if args.profile is not None else []),
        ),
    )
    rng = random.Random(args.seed)
    print(f"control plane in {workdir}; {args.n} nodes x 8 GPUs", flush=True)
    try:
        t0 = time.monotonic()
        plane.start()
        bench = Bench(plane, args.workers, repo)
        bench.profile_dir = args.profile
        bench.install(repo)
        bench.nodes(args.n, rng)
        print(f"  cluster ready in {time.monotonic() - t0:.1f} s", flush=True)
        baseline: tuple[Round, dict[str, int]] | None = None
        if args.baseline is not None:
            print(f"baseline round: the operator of {args.baseline}", flush=True)
            same = random.Random()
            same.setstate(rng.getstate())  # the same jobs as the round below
            baseline = bench.gleaner(args.n, same, args.timeout, args.baseline)
            bench.clear_jobs()
        gleaner, phases = bench.gleaner(args.n, rng, args.timeout)
        kube, kube_running = bench.kube_scheduler(args.n, rng, args.timeout)
    finally:
        plane.stop()

    ratio = gleaner.per_second / kube.per_second if kube.per_second else float("nan")
    print(f"machine: {platform.machine()}, {platform.node()}, python {platform.python_version()}")
    rounds = [("Gleaner", gleaner, phases)]
    if baseline is not None:
        rounds.insert(0, (f"Gleaner (baseline {args.baseline})", *baseline))
    for name, done, seen in rounds:
        print(f"{name}: {args.n} jobs, phases {dict(sorted(seen.items()))}")
        when = "all Running or explained in" if done.finished else "NOT all done at the timeout,"
        print(
            f"  {when} {done.seconds:.1f} s (created in {done.created_seconds:.1f} s): "
            f"{done.per_second:.1f} jobs bound/s (ratio {done.per_second / kube.per_second:.2f}); "
            f"{done.requests} operator requests, {done.requests_per_bound:.2f} per bound job"
        )
    print(
        f"kube-scheduler: {args.n} Pods, {'all' if kube.finished else 'NOT all'} bound in "
        f"{kube.seconds:.1f} s "
        f"(Running in {kube_running:.1f} s): {kube.per_second:.1f} Pods bound/s; "
        f"{kube.requests} scheduler requests, {kube.requests_per_bound:.2f} per bound Pod"
    )
    for name, done, _ in [*rounds, ("kube-scheduler", kube, {})]:
        per = ", ".join(f"{k} {v / max(done.bound, 1):.2f}" for k, v in done.by_kind.items())
        print(f"{name} requests per bound object: {per}")
    for name, done, _ in [*rounds, ("kube-scheduler", kube, {})]:
        spent = ", ".join(f"{k} {v:.1f}" for k, v in sorted(done.cpu.items(), key=lambda i: -i[1]))
        print(f"{name} CPU seconds during its {done.seconds:.1f} s: {spent}")
    for name, profile in bench.profiles.items():
        print(f"kube-apiserver's CPU profile during the {name} round:")
        print(profile.top())
    print(f"ratio Gleaner jobs bound/s : kube-scheduler Pods bound/s = {ratio:.2f}")
    # Gleaner's clock stops when its jobs are Running (the Pod bound and run by KWOK, the
    # job's status written); kube-scheduler's when its Pods are bound. The same end for both:
    at_running = kube.bound / kube_running if kube_running > 0 else float("nan")
    running_ratio = gleaner.per_second / at_running if at_running else float("nan")
    print(
        f"with both clocks stopped at Running (kube-scheduler's Pods Running in "
        f"{kube_running:.1f} s, {at_running:.1f} Pods/s): ratio {running_ratio:.2f}"
    )
    # Every Gleaner job that is not bound is explained (the round fails otherwise): some ask
    # for an SLA that no node meets, which kube-scheduler's Pods cannot. Time to finish all:
    decided = gleaner.decided_per_second / kube.per_second if kube.per_second else float("nan")
    print(
        f"every job Running or explained: {gleaner.decided_per_second:.1f} jobs/s "
        f"({gleaner.objects} in {gleaner.seconds:.1f} s) : kube-scheduler's "
        f"{kube.per_second:.1f} Pods bound/s = {decided:.2f}"
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "n": args.n,
                    "gleaner": asdict(gleaner) | {"per_second": gleaner.per_second},
                    "phases": phases,
                    "kube_scheduler": asdict(kube) | {"per_second": kube.per_second},
                    "kube_running_seconds": kube_running,
                    "ratio": ratio,
                    "ratio_at_running": running_ratio,
                    "ratio_decided": decided,
                    "baseline": None
                    if baseline is None
                    else {
                        "source": str(args.baseline),
                        "gleaner": asdict(baseline[0]) | {"per_second": baseline[0].per_second},
                        "phases": baseline[1],
                        "ratio": baseline[0].per_second / kube.per_second
                        if kube.per_second
                        else float("nan"),
                    },
                },
                indent=1,
            )
        )
    unexplained = phases.get("Unschedulable without a reason", 0)
    finished = gleaner.finished and kube.finished
    if baseline is not None:
        unexplained += baseline[1].get("Unschedulable without a reason", 0)
    return 0 if finished and not unexplained else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
