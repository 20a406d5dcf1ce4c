"""Benchmark ``gleaner profile``'s accuracy against its cost (docs/profiling.md, "How long a
profile takes, for which accuracy").

The engine is the fake ``vllm bench throughput`` (``gleaner.testing.vllm_bench``:
Llama-3.1-8B on an H100 per the engine model, 512/128-token prompts, ``max-num-seqs`` 256),
profiled over [0.5, 24] GiB of KV cache with several run counts and prompt counts. For each,
the worst gap between the fitted curve and the fake's steady-state curve (runs of 4,000
prompts) over 40 budgets, as a share of standalone throughput, and the engine seconds the
runs take on the virtual clock. Target: the default (6 + 2 runs of 1,000 prompts) within 8%.

Second table, "Profiling accuracy" (docs/profiling.md, "Tokens per offline GPU-second";
docs/benchmarks.md): the default profile taken on a GPU shared with online inference, as
profile on submit takes it, against the same profile on a monopolised GPU. The shared GPU is
the agent's own gate and accounting code (``gleaner.runtime_agent.policy``: ``ComputeGate``,
``Accounting``) driven by an online side that alternates busy periods (exponential, mean
``BUSY_MEAN_S``; a decode gap of ``DECODE_GAP_S``, so the gate's cooldown is twice that)
and idle periods sized for the online load. The fake engine's steps wait for the gate to
open. Two cases of a step in flight when the gate closes: **preempted** (the shim's
channel-group disable preempts the running kernel, as designed; the step resumes at the
next opening, paying ``RESUME_S`` of context restore each time), and **runs to its end**
(the disable takes effect only between kernels: the bound if preemption does not work on
a given GPU). Each run's tokens are divided by the offline seconds the accounting gives
the run (``per_offline_second``) and fitted as profile on submit fits them. Target, when
preempted: standalone within 5% of the monopolised profile at online loads up to 50%.

Run: ``python -m bench profile`` (``--quick``: the default row, and the shared-GPU table
at one load).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gleaner.perfmodel.engine import LLAMA31_8B_H100 as ENGINE
from gleaner.perfmodel.profiling import (
    FitReport,
    GpuTime,
    Measurement,
    fit_profile,
    measure,
    per_offline_second,
)
from gleaner.runtime_agent.policy.accounting import Accounting
from gleaner.runtime_agent.policy.gate import ComputeGate, Enable, GateAction
from gleaner.testing.vllm_bench import run_batch

PROMPT, OUTPUT, SEQS = 512, 128, 256
KV_MIN, KV_MAX = 0.5, 24.0
DEFAULT = (6, 2, 1000)
ERROR_TARGET = 0.08


def runner(num_prompts: int) -> Callable[[float], Measurement]:
    def run(kv: float) -> Measurement:
        r = run_batch(ENGINE, lambda t: kv, PROMPT, OUTPUT, num_prompts, SEQS)
        return Measurement(kv, ENGINE.weights_gib + kv, r.output_tokens, r.seconds)

    return run


BUSY_MEAN_S = 0.25
"""Mean online busy period (a burst of online requests decoding back to back), seconds."""
DECODE_GAP_S = 0.005
"""The online engine's decode gap the gate learns: its cooldown is twice that."""
LOADS = (0.1, 0.3, 0.5, 0.7)
"""Online loads (the share of time the online side is busy) of the shared-GPU table."""
RESUME_S = 0.0005
"""Seconds a preempted step loses each time the gate reopens (context restore)."""
SHARED_TARGET = 0.05
"""Standalone within this share of the monopolised profile's, at loads up to 50%."""
JOB = "profiling/run"


@dataclass
class SharedGpu:
    """One GPU shared with an online side of ``load``, gated by the agent's own code.

    The timeline of gate edges is generated ahead as the engine asks for it; the agent's
    accounting of one run (:meth:`offline_seconds`) integrates the gate's level as the
    agent does (``Accounting``'s per-job timeslice seconds)."""

    load: float
    preempted: bool = True
    """Whether a step in flight stops when the gate closes (else it runs to its end)."""
    seed: int = 7
    rng: np.random.Generator = field(init=False)
    gate: ComputeGate = field(init=False)
    opens: list[float] = field(default_factory=list)
    closes: list[float] = field(default_factory=list)
    horizon: float = 0.0

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.gate = ComputeGate(0)
        self.gate.decode_gap(DECODE_GAP_S, 0.0)
        self._edges(self.gate.tick(self.gate.cooldown_s))

    def _edges(self, actions: list[GateAction]) -> None:
        for a in actions:
            (self.opens if isinstance(a, Enable) else self.closes).append(a.t)

    def _extend(self) -> None:
        """One more idle period, then one busy period of the online side."""
        idle_mean = BUSY_MEAN_S * (1.0 - self.load) / self.load
        t = self.horizon + float(self.rng.exponential(idle_mean))
        deadline = self.gate.next_deadline()
        if deadline is not None and deadline <= t:
            self._edges(self.gate.tick(deadline))
        self._edges(self.gate.online_busy(t))
        t += float(self.rng.exponential(BUSY_MEAN_S))
        self._edges(self.gate.online_idle(t))
        self.horizon = t

    def start_at(self, t: float) -> float:
        """When a step asked for at ``t`` starts: ``t`` if the gate is open, else its next
        opening."""
        while True:
            while self.horizon <= t:
                self._extend()
            i = bisect.bisect_right(self.opens, t) - 1
            if i >= 0 and (i >= len(self.closes) or self.closes[i] > t):
                return t  # open since opens[i], not closed yet
            if i + 1 < len(self.opens):
                return self.opens[i + 1]
            self._extend()

    def step_end(self, t: float, seconds: float) -> float:
        """When a step of ``seconds`` GPU time asked for at ``t`` ends on this GPU."""
        t = self.start_at(t)
        if not self.preempted:
            return t + seconds
        while True:
            i = bisect.bisect_right(self.opens, t) - 1
            while i >= len(self.closes):
                self._extend()
            room = self.closes[i] - t
            if seconds <= room:
                return t + seconds
            seconds -= room
            t = self.start_at(self.closes[i]) + RESUME_S

    def offline_seconds(self, start: float, end: float) -> GpuTime:
        """The agent's accounting of a run from ``start`` to ``end``."""
        while self.horizon <= end:
            self._extend()
        acc = Accounting([0], start=start)
        acc.set_offline_jobs(start, {JOB: [0]})
        edges = sorted([(t, 1.0) for t in self.opens] + [(t, 0.0) for t in self.closes])
        level = 0.0
        for t, lv in edges:
            if t <= start:
                level = lv
        acc.set_offline_enabled(start, 0, level)
        for t, lv in edges:
            if start < t < end:
                acc.set_offline_enabled(t, 0, lv)
        acc.advance(end)
        return GpuTime(end - start, acc.totals.job_timeslice_s[JOB])


def shared_runner(
    num_prompts: int, gpu: SharedGpu, wall: list[float], raw: list[Measurement]
) -> Callable[[float], Measurement]:
    """Runs on a shared GPU, one after the other, converted per offline GPU-second
    (``wall`` and ``raw`` collect each run's wall seconds and its wall-clock measurement)."""
    clock = [0.0]

    def run(kv: float) -> Measurement:
        start = clock[0]  # runs follow each other on the GPU's timeline
        r = run_batch(
            ENGINE,
            lambda t: kv,
            PROMPT,
            OUTPUT,
            num_prompts,
            SEQS,
            step_end=lambda t, s: gpu.step_end(start + t, s) - start,
        )
        end = clock[0] = start + r.seconds
        m = Measurement(kv, ENGINE.weights_gib + kv, r.output_tokens, r.seconds)
        wall.append(r.seconds)
        raw.append(m)
        return per_offline_second(m, gpu.offline_seconds(start, end))

    return run


def shared_table(loads: tuple[float, ...], grid: np.ndarray, mono: FitReport) -> bool:
    """Print the shared-GPU table; False when the target is missed."""
    pts, refine, n = DEFAULT
    mono_curve = mono.profile.throughput_at(ENGINE.weights_gib + grid)
    mono_rate = mono.profile.standalone_tokens_per_second
    print()
    print(
        "| step in flight | online load | gate open | standalone, corrected "
        "| standalone, uncorrected | worst curve gap, corrected | wall seconds |"
    )
    print("|---|---|---|---|---|---|---|")
    ok = True
    for preempted, load in [(p, x) for p in (True, False) for x in loads]:
        wall: list[float] = []
        raw: list[Measurement] = []
        gpu = SharedGpu(load, preempted)
        rep = fit_profile(
            measure(shared_runner(n, gpu, wall, raw), KV_MIN, KV_MAX, pts, refine, 0.25)
        )
        plain = fit_profile(raw)
        share = sum(m.seconds for m in rep.measurements) / sum(wall)
        rate = rep.profile.standalone_tokens_per_second / mono_rate - 1.0
        low = plain.profile.standalone_tokens_per_second / mono_rate - 1.0
        curve = rep.profile.throughput_at(ENGINE.weights_gib + grid)
        gap = float(np.max(np.abs(curve - mono_curve))) / mono_rate
        how = "preempted" if preempted else "runs to its end"
        print(
            f"| {how} | {load:.0%} | {share:.0%} | {rate:+.1%} | {low:+.1%} | {gap:.1%} "
            f"| {sum(wall):.0f} |"
        )
        if preempted and load <= 0.5 and abs(rate) > SHARED_TARGET:
            ok = False
    print(
        f"target: preempted, corrected standalone within {SHARED_TARGET:.0%} at online "
        "loads up to 50%"
    )
    return ok


def main(argv: list[str]) -> int:
    rows = (
        [DEFAULT]
        if "--quick" in argv
        else [
            (pts, refine, n)
            for n in (300, 1000, 2000)
            for pts, refine in ((4, 0), (4, 2), (6, 2), (8, 2), (10, 4))
        ]
    )
    grid = np.linspace(KV_MIN, KV_MAX, 40)
    steady = np.array([runner(4000)(float(kv)).tokens_per_second for kv in grid])
    print("| runs (initial + refined) | prompts per run | worst error | engine seconds |")
    print("|---|---|---|---|")
    failed = False
    mono: FitReport | None = None
    for pts, refine, n in rows:
        rep = fit_profile(measure(runner(n), KV_MIN, KV_MAX, pts, refine, 0.25))
        if (pts, refine, n) == DEFAULT:
            mono = rep
        fitted = rep.profile.throughput_at(ENGINE.weights_gib + grid)
        error = float(np.max(np.abs(fitted - steady))) / float(steady.max())
        seconds = sum(m.seconds for m in rep.measurements)
        print(f"| {pts} + {refine} | {n} | {error:.1%} | {seconds:.0f} |")
        if (pts, refine, n) == DEFAULT and error > ERROR_TARGET:
            failed = True
    print(f"target: default {DEFAULT[0]} + {DEFAULT[1]} runs within {ERROR_TARGET:.0%}")
    assert mono is not None
    if not shared_table((0.5,) if "--quick" in argv else LOADS, grid, mono):
        failed = True
    return 1 if failed else 0
