"""Operator load test: 500 OfflineJobs created at once are all bound or explained in 60 s.

Runs the real ``gleaner operator`` process (kopf peering on) against kmock's Kubernetes
emulator (``gleaner.testing.kube``, a real HTTP server on loopback, in this process). The
cluster: ``--nodes`` NodeTraces of 8 GPUs with varied online load. The queue: ``--jobs``
OfflineJobs created as fast as the client can (1/2/4-GPU jobs, SLAs 0.3-0.8, and 5% with an
SLA no node can meet, which must come back Unschedulable with a reason). The clock starts
at the first creation and stops when every job is Scheduled (its Pod exists) or
Unschedulable (with a ``Scheduled=False`` condition). Also reported: per-job latency from
creation to its Scheduled condition (p50/p95/max), pods created, and passes the operator
ran. Exit code 1 when the target (``--target``, 60 s) is missed or a job is unaccounted for.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm

from gleaner.testing.kube import (
    FAST_OPERATOR_FLAGS,
    KubeApi,
    KubeEmulator,
    OperatorProcess,
    nodetrace_manifest,
    offlinejob_manifest,
)

DONE = {"Scheduled", "Running", "Unschedulable"}


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench operator")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--target", type=float, default=60.0, help="seconds")
    parser.add_argument("--timeout", type=float, default=180.0, help="give up after, seconds")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="50 jobs on 10 nodes")
    return parser.parse_args(argv)


def _jobs(n: int, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        gpus = rng.choices([1, 2, 4], weights=[70, 20, 10])[0]
        impossible = i % 20 == 19
        sla = 0.99 if impossible else round(rng.uniform(0.3, 0.8), 2)
        out.append(offlinejob_manifest(f"load-{i:04d}", gpus=gpus, sla=sla))
    return out


def _time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def main(argv: list[str]) -> int:
    args = _parse(argv)
    if args.quick:
        args.jobs, args.nodes = 50, 10
    rng = random.Random(args.seed)
    with (
        tempfile.TemporaryDirectory(prefix="bench-operator-") as workdir,
        KubeEmulator(Path(workdir)) as kube,
    ):
        api = KubeApi(kube)
        for i in range(args.nodes):
            enabled = [round(rng.uniform(0.5, 0.97), 3) for _ in range(8)]
            api.apply_nodetrace(
                nodetrace_manifest(f"gpu-{i:03d}", gpus=8, offline_enabled=enabled, overlap=0.97)
            )
        op = OperatorProcess(
            kube,
            [*FAST_OPERATOR_FLAGS, "--http-port=0", "--unschedulable-backoff=30s"],
            log_name="operator.log",
        ).start()
        try:
            time.sleep(1.0)
            jobs = _jobs(args.jobs, rng)
            start = time.monotonic()
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(api.create_job, jobs))
            created = time.monotonic() - start
            done_at: float | None = None
            bar = tqdm(total=len(jobs), desc="bound or explained", unit="job")
            last = 0
            while time.monotonic() - start < args.timeout:
                items = api.list_jobs()
                n = sum(1 for j in items if (j.get("status") or {}).get("phase") in DONE)
                bar.update(n - last)
                last = n
                if n == len(jobs):
                    done_at = time.monotonic() - start
                    break
                time.sleep(0.25)
            bar.close()
            items = api.list_jobs()
            pods = api.pods()
        finally:
            op.stop()
        log = op.log()

    phases: dict[str, int] = {}
    latencies = []
    for job in items:
        status = job.get("status") or {}
        phase = status.get("phase", "(none)")
        phases[phase] = phases.get(phase, 0) + 1
        for cond in status.get("conditions", []):
            if cond["type"] == "Scheduled":
                created_ts = _time(job["metadata"]["creationTimestamp"])
                latencies.append(max(0.0, _time(cond["lastTransitionTime"]) - created_ts))
    explained = all(
        any(c["type"] == "Scheduled" and c.get("message") for c in j["status"]["conditions"])
        for j in items
        if (j.get("status") or {}).get("phase") == "Unschedulable"
    )
    passes = log.count("pass:")
    ok = done_at is not None and done_at <= args.target and explained
    scheduled = phases.get("Scheduled", 0)
    print(f"jobs {len(items)}, nodes {args.nodes} x 8 GPUs, created in {created:.1f} s")
    print(f"phases: {dict(sorted(phases.items()))}; pods: {len(pods)} (scheduled {scheduled})")
    if latencies:
        q = statistics.quantiles(latencies, n=20)
        print(
            f"creation -> Scheduled condition: p50 {statistics.median(latencies):.1f} s, "
            f"p95 {q[18]:.1f} s, max {max(latencies):.1f} s; {passes} passes logged"
        )
    result = f"{done_at:.1f} s" if done_at is not None else f"not within {args.timeout:.0f} s"
    print(f"all bound or explained: {result} (target {args.target:.0f} s): ", end="")
    print("OK" if ok else "MISSED")
    if len(pods) != scheduled:
        print(f"error: {len(pods)} pods for {scheduled} scheduled jobs")
        return 1
    return 0 if ok else 1
