"""What a node's hours of the day cost a scheduling pass (targets in docs/benchmarks.md).

The operator's pass turns every NodeTrace into the summary it predicts from
(``gleaner.operator.traces.summaries_from_nodetraces``). With ``status.hours`` that is what
admission judges the next 12 hours by (each GPU's busiest hour, with the learned load
spread, over the time-of-day forecast of those hours), and parsing 24 hours per node is
far more work than parsing the latest window. The hours change once an hour, so the operator
keeps each node's parsed hours until they change (``HourProfiles``). This benchmark builds
``--nodes`` NodeTraces of 8 GPUs, each with 24 hours at the size bound (128 memory states
per hour) and a latest window, as the API server returns them (JSON), and times, side by
side in rounds:

- ``no hours``: the same NodeTraces without ``status.hours`` (how a pass read them before);
- ``latest window``: with hours, read without a time (no forecast; the hours are still
  validated with the rest of the status);
- ``hours, parsed``: every node's hours parsed in the pass (a cold cache: the operator's
  first pass, or every node's hour changed at once);
- ``hours, per pass``: the hours kept, but what each forecast reads from them laid out
  again in every pass (each node's ``HourStack``s dropped before it; the horizon's hours
  and the spread scales stay kept): what keeping the stacks saves;
- ``hours, kept``: the same with the hours and their stacks kept from the previous pass
  (the usual pass; the stacks change when the hour of the pass or the hours change).

``--weekend`` adds the weekend hours a NodeHistory keeps (docs/scheduler.md, "Day of
week"), 24 more at the size bound and each with two weekend days, so they serve the
forecast, and runs the pass on a Saturday: what the day-of-week split costs a pass.

Target: with the hours kept, the forecast adds at most 2 ms per node to a pass over the same
NodeTraces without hours (medians over the rounds; the ratio is printed too). Returns 1 when
missed. ``--nodes`` and ``--rounds`` change the size.

It also prints the bytes of one report's watch event with and without the hours, for a node
at the size bound and for a realistic one: what every watcher of NodeTraces (the operator,
``kubectl get nt -w``) receives per node every 15 s when the hours live in the NodeTrace (as
they did before NodeHistory) and now that they live in the node's NodeHistory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from gleaner.api.nodetrace import hour_memory_states
from gleaner.operator.traces import HourProfiles, summaries_from_nodetraces
from gleaner.perfmodel.diurnal import HOURS, DiurnalProfile
from gleaner.perfmodel.hours import profile_to_hours, profile_to_weekend_hours
from gleaner.perfmodel.summary import GpuSpec, NodeSummary

GPUS = 8
KEPT_MS_PER_NODE_TARGET = 2.0


def nodetrace(
    name: str,
    rng: np.random.Generator,
    now: datetime,
    realistic: bool = False,
    weekend: bool = False,
) -> dict[str, Any]:
    """One 8-GPU node's NodeTrace with 24 full hours, as JSON from the API server: each
    hour at the size bound, or (``realistic``) with harvestable memory that moves in steps
    about every minute, all GPUs together (the perfmodel benchmark's realistic trace)."""
    gpus = [GpuSpec(i, uuid=f"GPU-{name}-{i}", memory_gib=80.0) for i in range(GPUS)]
    profile = DiurnalProfile(name)
    for hour in range(HOURS):
        t = np.arange(0, 3600, 10.0) + hour * 3600
        if realistic:
            steps = np.repeat(rng.normal(0, 1.5, t.size // 6 + 1), 6)[: t.size]
            base = np.clip(30 + np.cumsum(steps) * 0.2, 4, 70)
            free = base[:, None] + rng.choice([0.0, 0.5, 1.0], size=(1, GPUS))
        else:
            level = rng.integers(0, hour_memory_states(GPUS), t.size)
            free = (np.arange(GPUS)[None, :] * 0.37 + level[:, None] * 1.13) % 79.0 + 0.1
        busy = rng.random((t.size, GPUS))
        summary = NodeSummary.from_samples(name, gpus, t, busy, free, 1.0 - busy)
        profile = profile.fold(hour, summary, weekend=weekend)
        if weekend:  # a second weekend day, so the weekend hours serve forecasts
            profile = profile.fold(hour, summary, weekend=True)
    t = now.timestamp() - 3600 + np.arange(0, 3600, 15.0)
    busy = (rng.random((t.size, GPUS)) < 0.4).astype(float)
    latest = NodeSummary.from_samples(
        name, gpus, t, busy, rng.random((t.size, GPUS)) * 79.0, 1.0 - busy
    )
    status = latest.to_nodetrace_status(now=now)
    status = status.model_copy(update={"hours": profile_to_hours(profile)})
    body = status.to_k8s()
    if weekend:  # as the operator joins them from the node's NodeHistory
        body["weekendHours"] = [h.to_k8s() for h in profile_to_weekend_hours(profile)]
    obj = {
        "apiVersion": "gleaner.dev/v1alpha1",
        "kind": "NodeTrace",
        "metadata": {"name": name},
        "spec": {"nodeName": name},
        "status": body,
    }
    parsed: dict[str, Any] = json.loads(json.dumps(obj))
    return parsed


def report_bytes(obj: dict[str, Any]) -> tuple[int, int]:
    """Bytes of the watch event every watcher of NodeTraces receives for one report of
    ``obj`` (compact JSON, as the API server writes it), with and without its hours."""

    def event(o: dict[str, Any]) -> int:
        return len(json.dumps({"type": "MODIFIED", "object": o}, separators=(",", ":")))

    return event(obj), event(_plain(obj))


def _plain(obj: dict[str, Any]) -> dict[str, Any]:
    hours = ("hours", "weekendHours")
    return {**obj, "status": {k: v for k, v in obj["status"].items() if k not in hours}}


def _median_s(run: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench hours")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="20 nodes, 3 rounds")
    parser.add_argument("--weekend", action="store_true", help="with weekend hours, on a Saturday")
    args = parser.parse_args(argv)
    nodes, rounds = (20, 3) if args.quick else (args.nodes, args.rounds)
    now = datetime.now(UTC)
    if args.weekend:
        now += timedelta(days=(5 - now.weekday()) % 7)
    rng = np.random.default_rng(7)
    traces = [nodetrace(f"node-{n}", rng, now, weekend=args.weekend) for n in range(nodes)]
    size = statistics.mean(
        sum(
            len(json.dumps(t["status"].get(k) or [], separators=(",", ":")))
            for k in ("hours", "weekendHours")
        )
        for t in traces
    )
    kept = HourProfiles()
    summaries_from_nodetraces(traces, now, kept)  # the previous pass
    # Side by side in each round, so the machine's load falls on every row alike.
    plain = [_plain(t) for t in traces]
    results: dict[str, list[float]] = {
        "no hours": [],
        "latest window": [],
        "hours, parsed": [],
        "hours, per pass": [],
        "hours, kept": [],
    }

    def forget_stacks() -> None:
        for t in traces:
            profile = kept.profile(t)
            if profile is not None:
                profile.forget_stacks()

    for _ in range(rounds):
        results["no hours"].append(_median_s(lambda: summaries_from_nodetraces(plain, now), 1))
        results["latest window"].append(_median_s(lambda: summaries_from_nodetraces(traces), 1))
        results["hours, parsed"].append(
            _median_s(lambda: summaries_from_nodetraces(traces, now, HourProfiles()), 1)
        )
        forget_stacks()
        results["hours, per pass"].append(
            _median_s(lambda: summaries_from_nodetraces(traces, now, kept), 1)
        )
        results["hours, kept"].append(
            _median_s(lambda: summaries_from_nodetraces(traces, now, kept), 1)
        )
    medians = {k: statistics.median(v) for k, v in results.items()}
    hours = "24 hours and 24 weekend hours" if args.weekend else "24 hours"
    print(
        f"{nodes} NodeTraces of {GPUS} GPUs, {hours} each ({size / 1000:.0f} kB of hours "
        f"per node as JSON); median of {rounds} rounds, side by side"
    )
    print(f"{'one pass reads':16s} {'seconds':>9s} {'x no hours':>11s} {'ms/node added':>14s}")
    base = medians["no hours"]
    for name, seconds in medians.items():
        added = 1000 * (seconds - base) / nodes
        print(f"{name:16s} {seconds:9.3f} {seconds / base:11.2f} {added:14.2f}")
    print(
        "bytes a watcher of NodeTraces receives per 15 s report of one node, "
        "hours in the NodeTrace (before) and in its NodeHistory (now):"
    )
    realistic = nodetrace("node-r", rng, now, realistic=True)
    for label, obj in (("size bound", traces[0]), ("realistic", realistic)):
        with_hours, without = report_bytes(obj)
        print(f"  {label:10s} before {with_hours / 1000:6.1f} kB, now {without / 1000:5.1f} kB")
    added_ms = 1000 * (medians["hours, kept"] - base) / nodes
    ok = added_ms <= KEPT_MS_PER_NODE_TARGET
    print(
        f"target hours kept add <= {KEPT_MS_PER_NODE_TARGET} ms per node: "
        f"{'met' if ok else 'MISSED'} ({added_ms:.2f} ms, {medians['hours, kept'] / base:.2f}x)"
    )
    return 0 if ok else 1
