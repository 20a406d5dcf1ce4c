"""The operator's decide stage on the inputs of the control-plane benchmark, offline.

Builds what a scheduling pass of ``gleaner operator`` builds at ``--n`` nodes in ``python -m
bench controlplane`` (docs/benchmarks.md), without a control plane: the same NodeTraces
(8 GPUs each, per-GPU online load drawn as that benchmark draws it) turned into node
summaries by ``gleaner.operator.traces``, the same Node labels, the same OfflineJobs (1/2/4/8
GPUs; 5% with an SLA no node meets) validated into queued jobs, and the occupied GPUs that
the earlier passes' placements leave. It then times ``plan_placements``, the call the
operator makes on a worker thread, for:

- one queue of 10, 100, 400 and 1,000 jobs on a free cluster (a pass of at most 16 jobs
  also explains its first placements: "why not" every other node);
- a burst of 1,000 jobs decided in passes of 100, 400, 400 and 100 jobs, each on the GPUs
  the passes before it left (what the operator does while the jobs arrive).

The time is the process CPU time of the call, pinned to one CPU, the best of ``--repeats``
(the wall time is printed too; on a shared machine it is longer). Each scenario also prints
a digest of every decision (placements with their predictions, reasons, explanations and
runner-up reasons), so two versions can be checked to decide the same.

``--baseline DIR`` runs the same scenarios with the ``gleaner`` packages of another source
tree (e.g. ``git archive <commit> | tar -x -C DIR``) in a child process first, and prints
both side by side with their speed-up and whether the digests agree.

The CPU time is reported without a target of its own (``python -m bench scheduler`` decides
1,000 jobs on 1,250 nodes in about 0.8 s, for comparison); what users wait for is measured
by ``python -m bench controlplane``. Exit 1 when the baseline decides differently.

Run: ``python -m bench pass`` (``--quick``: one repeat; ``--n``, ``--seed``).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
"""The pass's clock, and the end of every NodeTrace's window (fixed: runs compare)."""
GPU_MIX = ((1, 50), (2, 25), (4, 15), (8, 10))
QUEUES = (10, 100, 400, 1000)
BURST = (100, 400, 400, 100)
NAMESPACE = "bench-jobs"


@dataclass(frozen=True)
class Timing:
    scenario: str
    jobs: int
    cpu_seconds: float
    wall_seconds: float
    placed: int
    unschedulable: int
    digest: str


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench pass")
    parser.add_argument("--n", type=int, default=1000, help="nodes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one repeat")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="source tree of another Gleaner version: its packages decide the same "
        "scenarios first, in a child process",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    return parser.parse_args(argv)


def _pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned (no sched_setaffinity)"


class Inputs:
    """What the operator's pass reads at ``n`` nodes, built as it builds it."""

    def __init__(self, n: int, seed: int) -> None:
        from gleaner.operator.traces import (
            summaries_from_nodetraces,
            unbindable_nodes,
            uninstrumented_gpus,
        )
        from gleaner.testing.controlplane import GpuNode, gpu_node_manifest
        from gleaner.testing.kube import nodetrace_manifest

        rng = random.Random(seed)
        names = [f"gpu-{i:04d}" for i in range(n)]
        loads = {name: [round(rng.uniform(0.5, 0.97), 3) for _ in range(8)] for name in names}
        traces = []
        for version, (name, load) in enumerate(loads.items(), start=1):
            trace = nodetrace_manifest(name, gpus=8, offline_enabled=load, end=NOW)
            trace["metadata"]["resourceVersion"] = str(version)
            traces.append(trace)
        self.labels = {
            name: gpu_node_manifest(GpuNode(name))["metadata"]["labels"] for name in names
        }
        self.nodes = summaries_from_nodetraces(traces, NOW)
        self.unavailable = unbindable_nodes(self.nodes)
        self.uninstrumented = uninstrumented_gpus(traces)
        self.rng = rng

    def jobs(self, count: int, first: int = 0) -> list[Any]:
        """``count`` queued jobs as the operator's queue holds them (validated, Pending)."""
        from gleaner.api.contract import FINALIZER
        from gleaner.operator.jobs import parse_status
        from gleaner.operator.placement import QueuedJob
        from gleaner.operator.validation import ValidJob, validate_job
        from gleaner.testing.kube import offlinejob_manifest

        out = []
        for i in range(first, first + count):
            impossible = i % 20 == 19
            sla = 0.99 if impossible else round(self.rng.uniform(0.3, 0.8), 2)
            gpus = self.rng.choices([g for g, _ in GPU_MIX], [w for _, w in GPU_MIX])[0]
            body = offlinejob_manifest(f"job-{i:04d}", namespace=NAMESPACE, gpus=gpus, sla=sla)
            body["metadata"].update(
                uid=str(uuid.UUID(int=i + 1)),
                creationTimestamp=NOW.isoformat(),
                generation=1,
                resourceVersion=str(10_000 + i),
                finalizers=[FINALIZER],
            )
            verdict = validate_job(body)
            assert isinstance(verdict, ValidJob), verdict
            job = verdict.job.model_copy(update={"status": parse_status(body)})
            out.append(QueuedJob(job, verdict.profile))
        return out


def _decide(inputs: Inputs, queue: Sequence[Any], occupied: Mapping[str, Mapping[int, str]]) -> Any:
    from gleaner.operator.placement import explained_placements, plan_placements
    from gleaner.scheduler import BiasTable

    return plan_placements(
        queue,
        inputs.nodes,
        occupied,
        NOW,
        stale_after_seconds=600.0,
        node_labels=inputs.labels,
        unavailable=inputs.unavailable,
        uninstrumented=inputs.uninstrumented,
        bias=BiasTable(),
        explained=explained_placements(len(queue)),
    )


def _digest(plan: Any) -> str:
    """Every decision of ``plan``, hashed: placements (node, GPUs, prediction), reasons,
    explanations and runner-up reasons."""
    parts = [
        [[q.key, p.model_dump(mode="json")] for q, p in plan.placements],
        [[q.key, reason] for q, reason in plan.unschedulable],
        sorted((key, repr(ex)) for key, ex in plan.explanations.items()),
        sorted((key, list(lines)) for key, lines in plan.runner_ups.items()),
    ]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _occupy(occupied: dict[str, dict[int, str]], plan: Any) -> None:
    for q, placement in plan.placements:
        for gpu in placement.gpu_indices:
            occupied.setdefault(placement.node, {})[gpu] = q.key


def _time(
    name: str, inputs: Inputs, queue: list[Any], occupied: dict[str, dict[int, str]], repeats: int
) -> tuple[Timing, Any]:
    best: Timing | None = None
    plan: Any = None
    for _ in range(repeats):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        plan = _decide(inputs, queue, occupied)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        run = Timing(
            name,
            len(queue),
            cpu,
            wall,
            len(plan.placements),
            len(plan.unschedulable),
            _digest(plan),
        )
        if best is not None and run.digest != best.digest:
            raise SystemExit(f"error: {name}: two repeats decided differently")
        if best is None or run.cpu_seconds < best.cpu_seconds:
            best = run
    assert best is not None
    return best, plan


def measure(n: int, seed: int, repeats: int) -> list[Timing]:
    out: list[Timing] = []
    for size in QUEUES:
        inputs = Inputs(n, seed)
        out.append(_time(f"queue of {size}", inputs, inputs.jobs(size), {}, repeats)[0])
    inputs = Inputs(n, seed)
    occupied: dict[str, dict[int, str]] = {}
    first = 0
    for i, size in enumerate(BURST, start=1):
        queue = inputs.jobs(size, first)
        first += size
        timing, plan = _time(f"burst pass {i}/{len(BURST)}", inputs, queue, occupied, repeats)
        out.append(timing)
        _occupy(occupied, plan)
    return out


def _baseline(source: Path, argv: list[str]) -> list[Timing]:
    """The same scenarios, decided by ``source``'s packages in a child process."""
    folders = sorted(str(p) for p in source.iterdir() if (p / "gleaner").is_dir())
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*folders, os.environ.get("PYTHONPATH", "")]),
    }
    here = Path(__file__).resolve()
    done = subprocess.run(
        [sys.executable, str(here), "--child", *argv],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"error: the baseline run failed:\n{done.stderr[-3000:]}")
    return [Timing(**row) for row in json.loads(done.stdout.splitlines()[-1])]


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str]) -> int:
    args = _parse([a for a in argv if a != "--child"])
    repeats = 1 if args.quick else args.repeats
    pinned = _pin_one_core()
    if "--child" in argv:
        print(json.dumps([asdict(t) for t in measure(args.n, args.seed, repeats)]))
        return 0
    print(
        f"pass: plan_placements at {args.n} nodes of 8 GPUs, best of {repeats}, {pinned}; "
        f"load average {_load()}",
        flush=True,
    )
    child = [f"--n={args.n}", f"--seed={args.seed}", f"--repeats={repeats}"]
    base = _baseline(args.baseline, child) if args.baseline is not None else None
    runs = measure(args.n, args.seed, repeats)
    header = f"{'scenario':<18} {'jobs':>5} {'placed':>7} {'unsched':>8} {'cpu s':>7} {'wall s':>7}"
    if base is not None:
        header += f" {'baseline cpu s':>15} {'speed-up':>9} {'decisions':>10}"
    print(header)
    differ = 0
    for i, r in enumerate(runs):
        line = (
            f"{r.scenario:<18} {r.jobs:>5} {r.placed:>7} {r.unschedulable:>8} "
            f"{r.cpu_seconds:>7.3f} {r.wall_seconds:>7.3f}"
        )
        if base is not None:
            b = base[i]
            same = b.digest == r.digest
            differ += not same
            line += (
                f" {b.cpu_seconds:>15.3f} {b.cpu_seconds / max(r.cpu_seconds, 1e-9):>8.1f}x "
                f"{'same' if same else 'DIFFERENT':>10}"
            )
        print(line)
    print(f"load average at the end: {_load()}")
    largest = next(r for r in runs if r.scenario == f"queue of {max(QUEUES)}")
    print(f"{largest.jobs} jobs on {args.n} nodes: {largest.cpu_seconds:.3f} s CPU")
    if base is not None:
        print(
            "decisions: the same as the baseline's in every scenario"
            if not differ
            else f"decisions: DIFFERENT from the baseline's in {differ} scenario(s)"
        )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "nodes": args.n,
                    "load_average": _load(),
                    "runs": [asdict(r) for r in runs],
                    "baseline": None if base is None else [asdict(b) for b in base],
                },
                indent=2,
            )
        )
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
