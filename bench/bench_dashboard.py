"""Dashboard benchmark: a 1,000-GPU cluster with 500 jobs, built and served.

Measures (median of ``--repeat`` runs) the pure build of the snapshot from a record, the
rendering of the overview and jobs pages and the jobs API through FastAPI's TestClient, and
the first job page (runner-up nodes over every node). Targets keep the dashboard responsive
on a cluster of that size: build < 2 s, each page or API answer < 1 s, a job page < 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

TARGETS = {
    "build snapshot": 2.0,
    "GET / (overview)": 1.0,
    "GET /jobs": 1.0,
    "GET /api/jobs?sort=observed": 1.0,
    "GET /jobs/{ns}/{name} (runner-ups)": 1.0,
}


def _median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench dashboard")
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from fastapi.testclient import TestClient

    from gleaner.dashboard.app import create_app
    from gleaner.dashboard.build import build_dashboard
    from gleaner.dashboard.sources import StaticSource
    from gleaner.testing.dashboard import scaled_record

    record = scaled_record(args.nodes, args.gpus_per_node, args.jobs)
    results: dict[str, float] = {}
    results["build snapshot"] = _median(lambda: build_dashboard(record), args.repeat)
    data = build_dashboard(record)
    client = TestClient(create_app(StaticSource(data)))

    def get(url: str) -> Callable[[], object]:
        def call() -> object:
            r = client.get(url)
            if r.status_code != 200:
                raise RuntimeError(f"{url}: HTTP {r.status_code}")
            return r

        return call

    results["GET / (overview)"] = _median(get("/"), args.repeat)
    results["GET /jobs"] = _median(get("/jobs"), args.repeat)
    results["GET /api/jobs?sort=observed"] = _median(get("/api/jobs?sort=observed"), args.repeat)
    job = data.snapshot.jobs[0]
    t = time.perf_counter()
    get(f"/jobs/{job.namespace}/{job.name}")()
    results["GET /jobs/{ns}/{name} (runner-ups)"] = time.perf_counter() - t

    gpus = args.nodes * args.gpus_per_node
    print(f"dashboard: {args.nodes} nodes, {gpus} GPUs, {args.jobs} jobs")
    print(f"{'measurement':40} {'seconds':>9} {'target':>8} {'ratio':>7}")
    ok = True
    for name, value in results.items():
        target = TARGETS[name]
        ok &= value <= target
        print(f"{name:40} {value:9.3f} {target:8.1f} {value / target:7.2f}")
    return 0 if ok else 1
