"""What the finalizer at admission costs a creation: OfflineJobs created on the real control
plane with no admission, with the chart's MutatingAdmissionPolicy, and through the chart's
webhook entry.

One real control plane (``gleaner.testing.controlplane``; docs/controlplane.md) with the
CRDs and nothing else running: no operator, no node. Per repetition, three rounds in turn,
each creating ``--n`` OfflineJobs with 8 client threads (the control-plane benchmark's
client) and timing it:

1. ``webhook``: the chart's MutatingWebhookConfiguration rendered with
   ``operator.finalizerAtAdmission: webhook`` (every entry as shipped), pointed at the
   operator's webhook server (``WebhookServer``, a throw-away CA) running alone in a process
   of its own: the webhook's best case, since in the operator the same server shares its
   process with the scheduler;
2. ``none``: no admission configuration;
3. ``policy``: the chart's MutatingAdmissionPolicy and binding (``chart_finalizer_policy``).

Each configuration is in force (a server-side dry run shows the finalizer) before its round
and gone before the next. Reported per round: seconds, jobs per second, kube-apiserver CPU
seconds (user + system, from /proc) per job, the webhook server's CPU, and how many jobs
were stored with the finalizer. The jobs are then removed. Exit 1 when a round with
admission stored a job without the finalizer, or one without admission stored one with it;
2 without the control-plane binary. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes

from bench.bench_controlplane import group_cpu_seconds
from gleaner.api.contract import FINALIZER
from gleaner.operator.webhook import MUTATE_PATH
from gleaner.testing.controlplane import (
    ControlPlane,
    ControlPlaneUnavailableError,
    Pki,
    chart_finalizer_policy,
    chart_webhook_configuration,
    find_binary,
)
from gleaner.testing.kube import offlinejob_manifest
from gleaner.testing.net import free_port

NAMESPACE = "bench-admission"
WORKERS = 8
REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "helm" / "gleaner"
GROUP, VERSION, PLURAL = "gleaner.dev", "v1alpha1", "offlinejobs"
WEBHOOK_SERVER = """
import sys, time
from gleaner.operator.webhook import WebhookServer
WebhookServer(sys.argv[1], sys.argv[2], "127.0.0.1", int(sys.argv[3])).start()
while True:
    time.sleep(60)
"""


@dataclass(frozen=True)
class Creation:
    """One round: ``jobs`` created in ``seconds``; CPU seconds of kube-apiserver and of the
    webhook server meanwhile; how many jobs were stored with the finalizer."""

    admission: str
    jobs: int
    seconds: float
    apiserver_cpu: float
    webhook_cpu: float
    finalized: int

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench admission", description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="OfflineJobs per round")
    parser.add_argument("--reps", type=int, default=2, help="repetitions of the three rounds")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--quick", action="store_true", help="--n 200 --reps 1")
    return parser.parse_args(argv)


class Bench:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        client = plane.api_client()
        client.configuration.connection_pool_maxsize = WORKERS
        self.custom: Any = kubernetes.client.CustomObjectsApi(client)

    def probe(self) -> list[str] | None:
        """The finalizers a new job would be stored with (a server-side dry run), or None
        while the API server cannot create one yet (the CRD a moment after it was
        Established)."""
        job = offlinejob_manifest("probe", namespace=NAMESPACE)
        try:
            answer = self.custom.create_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, PLURAL, job, dry_run="All"
            )
        except kubernetes.client.ApiException:
            return None
        return list(answer.get("metadata", {}).get("finalizers") or [])

    def until(self, what: str, ready: Callable[[list[str]], bool]) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = self.probe()
            if found is not None and ready(found):
                return
            time.sleep(0.3)
        raise SystemExit(f"error: timed out waiting for {what}")

    def register(self, docs: list[dict[str, Any]]) -> list[str]:
        for doc in docs:
            self.plane.kubectl("create", "-f", "-", input=json.dumps(doc))
        self.until("the admission configuration", lambda found: FINALIZER in found)
        return [f"{d['kind'].lower()}/{d['metadata']['name']}" for d in docs]

    def unregister(self, names: list[str]) -> None:
        self.plane.kubectl("delete", *names)
        self.until("the admission configuration to be gone", lambda found: found == [])

    def create(self, admission: str, n: int, tag: str, webhook_pid: int | None) -> Creation:
        jobs = [offlinejob_manifest(f"{tag}-{i:04d}", namespace=NAMESPACE) for i in range(n)]
        apiserver = self.plane.processes.get("kube-apiserver").pid
        assert apiserver is not None

        def cpu() -> tuple[float, float]:
            hook = group_cpu_seconds(webhook_pid) if webhook_pid else 0.0
            return group_cpu_seconds(apiserver), hook

        def one(job: dict[str, Any]) -> None:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, job)

        before = cpu()
        start = time.monotonic()
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(one, jobs))
        seconds = time.monotonic() - start
        after = cpu()
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)
        finalized = sum(
            FINALIZER in (item["metadata"].get("finalizers") or []) for item in items["items"]
        )
        self.clear(items["items"])
        return Creation(
            admission,
            n,
            seconds,
            after[0] - before[0],
            after[1] - before[1],
            finalized,
        )

    def clear(self, items: list[dict[str, Any]]) -> None:
        """Delete every job, dropping the finalizers (no operator runs to remove them)."""
        self.plane.kubectl("delete", PLURAL, "--all", "-n", NAMESPACE, "--wait=false")
        for item in items:
            if item["metadata"].get("finalizers"):
                self.custom.patch_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, PLURAL, item["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )  # fmt: skip
        deadline = time.monotonic() + 120
        while self.custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)["items"]:
            if time.monotonic() > deadline:
                raise SystemExit("error: the jobs were not removed")
            time.sleep(0.5)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    if args.quick:
        args.n, args.reps = 200, 1
    try:
        binary = find_binary()
    except ControlPlaneUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="bench-admission-"))
    try:
        return _run(args, binary, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(args: argparse.Namespace, binary: Path, workdir: Path) -> int:
    plane = ControlPlane(workdir, binary=binary)
    tls = Pki(workdir / "webhook-tls").loopback_server().dir
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", WEBHOOK_SERVER, str(tls / "tls.crt"), str(tls / "tls.key"),
         str(port)],
        start_new_session=True,
    )  # fmt: skip
    rounds: list[Creation] = []
    try:
        plane.start()
        crds = sorted((REPO / "crds").glob("*.yaml"))
        plane.kubectl("apply", *(f"--filename={path}" for path in crds))
        plane.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", f"crd/{PLURAL}.{GROUP}"
        )
        plane.kubectl("create", "namespace", NAMESPACE)
        bench = Bench(plane)
        bench.until("the OfflineJob API", lambda found: found == [])
        url = f"https://127.0.0.1:{port}{MUTATE_PATH}"
        webhook = chart_webhook_configuration(
            CHART,
            "bench-admission-webhook",
            url,
            (tls / "ca.crt").read_bytes(),
            values={"operator": {"finalizerAtAdmission": "webhook"}},
        )
        policy = chart_finalizer_policy(CHART, "bench-admission-finalizer")
        print(f"{args.n} OfflineJobs per round, {WORKERS} client threads", flush=True)
        for rep in range(args.reps):
            for admission, docs in (("webhook", [webhook]), ("none", []), ("policy", policy)):
                names = bench.register(docs) if docs else []
                hook = server.pid if admission == "webhook" else None
                done = bench.create(admission, args.n, f"r{rep}-{admission}", hook)
                if names:
                    bench.unregister(names)
                rounds.append(done)
                load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
                print(
                    f"  {admission:8s} {done.seconds:5.2f} s ({done.per_second:5.1f} jobs/s); "
                    f"kube-apiserver CPU {1000 * done.apiserver_cpu / args.n:.1f} ms per job"
                    + (f", webhook server CPU {done.webhook_cpu:.2f} s" if hook else "")
                    + f"; {done.finalized} stored with the finalizer; load average {load}",
                    flush=True,
                )
    finally:
        server.kill()
        server.wait()
        plane.stop()
    if args.json is not None:
        args.json.write_text(
            json.dumps([r.__dict__ | {"per_second": r.per_second} for r in rounds], indent=1)
        )
    wrong = [r for r in rounds if r.finalized != (r.jobs if r.admission != "none" else 0)]
    for r in wrong:
        print(f"error: {r.admission}: {r.finalized} of {r.jobs} stored with the finalizer")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
