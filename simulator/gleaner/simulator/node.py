"""Node-level simulation: one continuous-batching online engine per GPU, an offline batch job
filling its idle time, and one compute + one memory policy (millisecond resolution).

Contract. :func:`run_node` simulates every run of a :class:`NodeScenario` on the *same*
request stream (same seed) and returns a JSON-ready dict: per run the online latency
(TTFT/TPOT mean and P99, and their increase over the ``online-only`` run), preemptions per
online request, reclamation events per minute, offline tokens/s normalized to the
``gate + no reclamation`` bound, and time series for the report. The simulation is
event-driven: the clock jumps from one online iteration to the next (iteration latency from
``gleaner.simulator.latency``), through the CPU gaps between iterations and through idle periods;
policies see exactly those events.

Engine (vLLM-like): each iteration decodes one token for every running request whose prompt
is done and spends the rest of a token budget on chunked prefill; a request is admitted
when its prompt's KV blocks fit the capacity the memory policy grants; when decode growth
does not fit, the newest request is preempted and recomputed later (vLLM's default).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from gleaner.api.units import GIB
from gleaner.runtime_agent.policy.gate import GateConfig
from gleaner.runtime_agent.policy.memory import MIB, MemoryConfig
from gleaner.simulator.costs import CostMeter, CostModel
from gleaner.simulator.latency import MODELS, LatencyModel
from gleaner.simulator.offline import BLOCK_TOKENS, OfflineJobConfig, OfflineKV, memory_curve
from gleaner.simulator.policies import (
    SELECTORS,
    ComputePolicy,
    GleanerGate,
    GleanerMemory,
    GPreempt,
    IterationLevel,
    MemoryEnv,
    MemoryPolicy,
    NoOffline,
    OnlineOnly,
    PrismMemory,
    StaticMemory,
    UvmMemory,
)
from gleaner.simulator.request_trace import (
    ReplayedRequests,
    RequestTraceConfig,
    read_requests,
    split_round_robin,
)
from gleaner.simulator.workload import (
    OUTPUT_TOKENS_MEAN,
    PROMPT_TOKENS_MEAN,
    ArrivalConfig,
    LengthConfig,
    Requests,
    generate_requests,
)

ComputeName = Literal["online-only", "gleaner", "gpreempt", "iteration"]
MemoryName = Literal["none", "gleaner", "uvm", "prism", "static"]


class GapConfig(BaseModel):
    """CPU gap between two online iterations (scheduling, sampling, detokenization)."""

    model_config = ConfigDict(extra="forbid")

    mean_ms: float = Field(default=0.4, gt=0)
    sigma: float = Field(default=0.5, ge=0)
    max_ms: float = Field(default=2.0, gt=0)


class OnlineConfig(BaseModel):
    """The online service on each GPU."""

    model_config = ConfigDict(extra="forbid")

    arrival: ArrivalConfig = Field(default_factory=lambda: ArrivalConfig(rate_per_s=0.3, cv=2.0))
    prompt_tokens: LengthConfig = Field(
        default_factory=lambda: LengthConfig(mean=PROMPT_TOKENS_MEAN, sigma=1.0, max=32768)
    )
    output_tokens: LengthConfig = Field(
        default_factory=lambda: LengthConfig(mean=OUTPUT_TOKENS_MEAN, sigma=1.0, max=4096)
    )
    max_batch_tokens: int = Field(default=8192, ge=1, description="Token budget per iteration.")
    max_seqs: int = Field(default=256, ge=1)
    fixed_gib: float | None = Field(
        default=None,
        gt=0,
        description="Weights + activations + CUDA graphs, GiB (None: the engine model's "
        "resident memory, weights + runtime).",
    )
    memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="Share of the GPU the engine may use when alone."
    )
    gap: GapConfig = Field(default_factory=GapConfig)


class PreemptionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fast_latency_ms: float = Field(
        default=0.05,
        ge=0,
        description="GPreempt timeslice preemption latency (the gate's is costs.disable).",
    )
    wake_latency_ms: float = Field(default=0.02, ge=0, description="GPreempt wake-up latency.")
    kernel_mean_ms: float = Field(
        default=1.0, gt=0, description="Mean offline kernel duration (kernel-boundary waits)."
    )
    kernel_sigma: float = Field(default=1.0, ge=0)


class NodeMemoryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu_gib: float = Field(default=80.0, gt=0, description="GPU memory, GiB.")
    usable_gib: float = Field(default=76.0, gt=0, description="Usable by the two workloads.")
    handle_mib: int = Field(default=128, ge=2, description="Reclamation handle size, MiB.")
    initial_headroom_gib: float = Field(default=2.0, gt=0)
    alpha: float = Field(default=2.0, gt=1)
    release_interval_s: float = Field(default=1.0, gt=0)
    reclaim_latency_ms: float = Field(
        default=1.0,
        ge=0,
        description="Agent reaction when online outgrows its headroom (VMM time is added).",
    )
    uvm_bandwidth_gbps: float = Field(default=12.0, gt=0, description="UVM fault migration GB/s.")
    prism_release_s: float = Field(
        default=20.0, gt=0, description="Offline memory release time constant without reclaim."
    )
    static_window_s: float = Field(
        default=3600.0, gt=0, description="Static share: min free over this warm-up window."
    )


class RunSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    compute: ComputeName
    memory: MemoryName
    selector: Literal["greedy", "fifo"] = "greedy"


DEFAULT_RUNS: tuple[RunSpec, ...] = (
    RunSpec(name="online-only", compute="online-only", memory="none"),
    RunSpec(name="gleaner", compute="gleaner", memory="gleaner"),
    RunSpec(name="gleaner-fifo", compute="gleaner", memory="gleaner", selector="fifo"),
    RunSpec(name="iteration", compute="iteration", memory="gleaner"),
    RunSpec(name="gpreempt", compute="gpreempt", memory="gleaner"),
    RunSpec(name="uvm", compute="gleaner", memory="uvm"),
    RunSpec(name="prism", compute="gleaner", memory="prism"),
    RunSpec(name="static", compute="gleaner", memory="static"),
)


class NodeScenario(BaseModel):
    """Node-level part of a scenario file (see docs/simulator.md)."""

    model_config = ConfigDict(extra="forbid")

    duration_s: float = Field(default=1200.0, gt=0, description="Seconds of online arrivals.")
    gpus: int = Field(default=1, ge=1, le=16, description="GPUs (one online engine each).")
    model: str = Field(default="llama-3.1-8b-h100", description="Latency model name.")
    latency: LatencyModel | None = Field(default=None, description="Override the coefficients.")
    online: OnlineConfig = Field(default_factory=OnlineConfig)
    requests: RequestTraceConfig | None = Field(
        default=None,
        description="Replay this request trace instead of the synthetic arrivals and lengths.",
    )
    offline: OfflineJobConfig = Field(default_factory=OfflineJobConfig)
    preemption: PreemptionConfig = Field(default_factory=PreemptionConfig)
    costs: CostModel = Field(default_factory=CostModel, description="What colocation costs.")
    memory: NodeMemoryConfig = Field(default_factory=NodeMemoryConfig)
    runs: list[RunSpec] = Field(default_factory=lambda: list(DEFAULT_RUNS))
    series_step_s: float = Field(default=1.0, gt=0, description="Time-series resolution.")

    def replay(self) -> ReplayedRequests | None:
        """The replayed request trace (read from its file), or None for synthetic load."""
        if self.requests is None:
            return None
        return read_requests(
            self.requests, self.online.prompt_tokens.max, self.online.output_tokens.max
        )

    def latency_model(self) -> LatencyModel:
        if self.latency is not None:
            return self.latency
        if self.model not in MODELS:
            raise ValueError(f"unknown latency model {self.model!r}; known: {sorted(MODELS)}")
        return MODELS[self.model]


# -- the engine ---------------------------------------------------------------------------


@dataclass
class EngineResult:
    ttft: np.ndarray[Any, np.dtype[np.float64]]
    tpot: np.ndarray[Any, np.dtype[np.float64]]
    preemptions: np.ndarray[Any, np.dtype[np.int64]]
    horizon_s: float
    busy_s: float
    offline_run_s: float
    offline_tokens: float
    bound_tokens: float
    kv_preemptions: int
    max_used_blocks: int
    series: dict[str, list[float]]
    online_cost_s: float = 0.0
    """Seconds online waited or ran longer because of the cost model's terms."""
    offline_cost_s: float = 0.0
    """Offline GPU seconds that produced nothing (re-enable, warm-up, VMM calls)."""
    refused: int = 0
    """Requests that needed more KV cache than the policy could ever give online (refused)."""


def _blocks(tokens: int) -> int:
    return -(-tokens // BLOCK_TOKENS)


def simulate_engine(
    reqs: Requests,
    duration_s: float,
    model: LatencyModel,
    online: OnlineConfig,
    compute: ComputePolicy,
    memory: MemoryPolicy,
    gaps: np.ndarray[Any, np.dtype[np.float64]],
    bound_rate: float,
    series_step_s: float = 1.0,
    meter: CostMeter | None = None,
) -> EngineResult:
    """Run one online engine against one compute and one memory policy.

    With a ``meter`` the run pays the cost model's terms (``gleaner.simulator.costs``): the
    gate's preempting launch waits for the disable and the in-flight kernel, the first online
    iteration after offline ran is slower, offline loses warm-up (and re-enable) time on every
    resume and VMM time on every page moved.
    """
    n = len(reqs)
    arrival = reqs.arrival.tolist()
    prompt = reqs.prompt.tolist()
    output = reqs.output.tolist()
    todo = list(prompt)  # tokens left to prefill in the current attempt
    done_pf = [0] * n  # tokens prefilled in the current attempt
    kv = [0] * n  # tokens with KV in the cache
    gen = [0] * n
    blocks = [0] * n
    first = [-1.0] * n
    finish = [-1.0] * n
    pre = [0] * n
    names = [str(i) for i in range(n)]
    running: list[int] = []
    waiting: deque[int] = deque()
    step = model.step
    budget_max = online.max_batch_tokens
    t = 0.0
    nxt = 0
    used = 0
    max_used = 0
    busy_s = 0.0
    offline_run = 0.0
    offline_tokens = 0.0
    kv_preempt = 0
    refused = 0
    gi = 0
    n_gaps = len(gaps)
    series: dict[str, list[float]] = {
        "t": [],
        "online_kv_gib": [],
        "offline_memory_gib": [],
        "busy": [],
        "offline_run": [],
    }
    next_sample = 0.0
    # Seconds online computed / offline ran in each series step, spread over the steps the
    # interval covers (a long idle period fills every step it spans, not only the next one).
    busy_bins: dict[int, float] = {}
    run_bins: dict[int, float] = {}

    def spread(bins: dict[int, float], t0: float, t1: float) -> None:
        i = int(t0 // series_step_s)
        while t0 < t1:
            edge = (i + 1) * series_step_s
            seg = min(t1, edge) - t0
            bins[i] = bins.get(i, 0.0) + seg
            t0 = min(t1, edge)
            i += 1

    block_bytes = BLOCK_TOKENS * model.kv_bytes_per_token
    block_gib = block_bytes / GIB
    last_end = 0.0
    gate_meter = meter if meter is not None and isinstance(compute, GleanerGate) else None
    gleaner_mem = memory if meter is not None and isinstance(memory, GleanerMemory) else None
    owed = 0.0  # offline GPU seconds to spend before it makes tokens again
    cold = False  # offline was preempted since it last ran: the next run pays a resume
    ran = False  # offline ran since the last online iteration: that iteration is polluted
    moved = [0, 0]  # (reclaimed bytes, restores) the VMM cost was charged for

    def vmm_moves() -> tuple[int, int]:
        # Pages that moved since the last look: reclaimed (unmap + release + map for
        # online) and given back to offline (map).
        if gleaner_mem is None:
            return 0, 0
        out = gleaner_mem.reclaimed_bytes - moved[0]
        back = (gleaner_mem.restores - moved[1]) * gleaner_mem.config.handle_bytes
        moved[0], moved[1] = gleaner_mem.reclaimed_bytes, gleaner_mem.restores
        return out, back

    def idle(t0: float, t1: float) -> None:
        nonlocal offline_run, offline_tokens, owed, cold, ran
        if t1 <= t0:
            return
        run = compute.idle(t0, t1)
        offline_run += run
        # The gate runs offline at the end of an idle period (after its cooldown).
        spread(run_bins, t1 - run, t1)
        if meter is not None and run > 0:
            ran = True
            if cold:
                owed += meter.resume()
                cold = False
        pay = min(owed, run)
        owed -= pay
        offline_tokens += memory.advance(t0, t1, run - pay)
        if meter is not None:
            out, back = vmm_moves()
            if out or back:
                cost = meter.vmm(out, out + back)
                meter.offline_s += cost
                owed += cost

    while True:
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if not running and not waiting:
            if nxt >= n:
                break
            t_next = arrival[nxt]
            idle(t, t_next)
            t = t_next
            continue
        waiting_need = _blocks(todo[waiting[0]] + kv[waiting[0]]) if waiting else 0
        dec = [r for r in running if todo[r] == 0]
        grow = sum(1 for r in dec if kv[r] % BLOCK_TOKENS == 0)
        # What online is short of: the head of its queue and its decode growth. A policy
        # that frees memory only under pressure must see the growth too, or a request that
        # outgrows the pool is preempted and readmitted forever with nothing freed.
        cap = memory.capacity_blocks(t, used, waiting_need + grow)
        # Decode growth must fit; otherwise preempt the newest request (recompute later).
        while running and used + grow > cap:
            r = running.pop()
            used -= blocks[r]
            blocks[r] = 0
            todo[r] = kv[r] + todo[r]
            kv[r] = 0
            done_pf[r] = 0
            waiting.appendleft(r)
            kv_preempt += 1
            dec = [x for x in running if todo[x] == 0]
            grow = sum(1 for x in dec if kv[x] % BLOCK_TOKENS == 0)
        budget = budget_max - len(dec)
        sum_p = float(len(dec))
        sum_pc = 0.0
        sum_tot = 0.0
        for r in dec:
            c = kv[r] + 1
            sum_pc += c
            sum_tot += c
        chunks: list[tuple[int, int]] = []
        for r in running:
            if todo[r] > 0 and budget > 0:
                c = min(todo[r], budget)
                chunks.append((r, c))
                budget -= c
        while waiting and budget > 0 and len(running) < online.max_seqs:
            r = waiting[0]
            need = _blocks(todo[r] + kv[r])
            # Admit only with a block of growth room per running request (vLLM's watermark).
            if used + grow + need + len(running) > cap:
                break
            waiting.popleft()
            running.append(r)
            blocks[r] = need
            used += need
            c = min(todo[r], budget)
            chunks.append((r, c))
            budget -= c
        for r, c in chunks:
            ctx = done_pf[r]
            sum_p += c
            sum_pc += c * (c + ctx)
            sum_tot += c + ctx
        if not running and waiting and waiting_need > memory.ceiling_blocks():
            # More than this policy's cache could ever hold: refused, as vLLM ignores a
            # request its block manager can never allocate (else the run never ends).
            refused += 1
            waiting.popleft()
            continue
        if not dec and not chunks:
            # Blocked on memory with nothing running: wait for capacity or an arrival.
            t_next = t + 0.005
            if nxt < n:
                t_next = min(t_next, max(arrival[nxt], t + 1e-6))
            idle(t, t_next)
            t = t_next
            continue
        used += grow
        for r in dec:
            if kv[r] % BLOCK_TOKENS == 0:
                blocks[r] += 1
        max_used = max(max_used, used)
        batch = [names[r] for r in dec] + [names[r] for r, _ in chunks]
        short = 0
        if gleaner_mem is not None:
            hb = gleaner_mem.config.handle_bytes
            need = -(-used * block_bytes // hb)
            short = max(0, need - gleaner_mem.reservation.headroom) * hb
        stall = memory.observe(t, used, compute)
        if meter is not None:
            out, back = vmm_moves()
            if out or back:
                # Online waits only for the pages it outgrew its headroom by; the rest of
                # the reclamation (MIAD grows the headroom further) runs behind it.
                wait = min(short, out) if stall > 0 else 0
                fg = meter.vmm(wait, wait)
                bg = meter.vmm(out - wait, out - wait + back)
                stall += fg
                meter.online_s += fg
                meter.offline_s += bg
                owed += bg
        delay, preempted, extra_run = compute.launch(t, batch)
        if extra_run > 0:
            offline_run += extra_run
            spread(run_bins, t, t + extra_run)
            offline_tokens += memory.advance(t, t, extra_run)
        if preempted:
            for r in dec:
                pre[r] += 1
            for r, _ in chunks:
                pre[r] += 1
            if gate_meter is not None:
                delay += gate_meter.preempt()
            cold = True
        latency = step(sum_p, sum_pc, sum_tot) if sum_p > 0 else 0.0
        if meter is not None and (ran or extra_run > 0) and latency > 0:
            latency += meter.pollution(latency)
        ran = False
        start = t + delay + stall
        end = start + latency
        busy_s += latency
        spread(busy_bins, start, end)
        finished: list[str] = []
        for r in dec:
            kv[r] += 1
            gen[r] += 1
            if gen[r] >= output[r]:
                finish[r] = end
                finished.append(names[r])
        for r, c in chunks:
            todo[r] -= c
            done_pf[r] += c
            kv[r] += c
            if todo[r] == 0:
                if first[r] < 0:
                    first[r] = end
                    gen[r] = 1
                if gen[r] >= output[r]:
                    finish[r] = end
                    finished.append(names[r])
        if finished:
            keep = []
            for r in running:
                if finish[r] >= 0:
                    used -= blocks[r]
                    blocks[r] = 0
                else:
                    keep.append(r)
            running = keep
        compute.done(end, finished)
        last_end = end
        while next_sample <= end:
            series["t"].append(next_sample)
            series["online_kv_gib"].append(used * block_gib)
            series["offline_memory_gib"].append(memory.offline_memory_gib())
            next_sample += series_step_s
        if running or waiting:
            g = float(gaps[gi % n_gaps])
            gi += 1
            idle(end, end + g)
            t = end + g
        else:
            t = end
    horizon = max(duration_s, last_end)
    idle(t, horizon)
    while next_sample < horizon:
        series["t"].append(next_sample)
        series["online_kv_gib"].append(used * block_gib)
        series["offline_memory_gib"].append(memory.offline_memory_gib())
        next_sample += series_step_s
    for key, bins in (("busy", busy_bins), ("offline_run", run_bins)):
        series[key] = [min(1.0, bins.get(i, 0.0) / series_step_s) for i in range(len(series["t"]))]
    ok = [i for i in range(n) if finish[i] >= 0]
    ttft = np.array([first[i] - arrival[i] for i in ok])
    tpot = np.array([(finish[i] - first[i]) / (output[i] - 1) for i in ok if output[i] > 1])
    return EngineResult(
        ttft=ttft,
        tpot=tpot,
        preemptions=np.array([pre[i] for i in ok], dtype=np.int64),
        horizon_s=horizon,
        busy_s=busy_s,
        offline_run_s=offline_run,
        offline_tokens=offline_tokens,
        bound_tokens=offline_run * bound_rate,
        kv_preemptions=kv_preempt,
        refused=refused,
        max_used_blocks=max_used,
        series=series,
        online_cost_s=meter.online_s if meter is not None else 0.0,
        offline_cost_s=meter.offline_s if meter is not None else 0.0,
    )


# -- running a scenario -------------------------------------------------------------------


def _gaps(
    rng: np.random.Generator, cfg: GapConfig, n: int
) -> np.ndarray[Any, np.dtype[np.float64]]:
    mu = np.log(cfg.mean_ms) - 0.5 * cfg.sigma**2
    g = rng.lognormal(mu, cfg.sigma, size=n) if cfg.sigma > 0 else np.full(n, cfg.mean_ms)
    return np.minimum(g, cfg.max_ms) / 1000.0


@dataclass
class _Gpu:
    reqs: Requests
    warmup: Requests
    gaps: np.ndarray[Any, np.dtype[np.float64]]
    seed: int


def _stats(x: np.ndarray[Any, np.dtype[np.float64]]) -> dict[str, float]:
    if x.size == 0:
        return {"mean": 0.0, "p50": 0.0, "p99": 0.0}
    return {
        "mean": float(x.mean()),
        "p50": float(np.percentile(x, 50)),
        "p99": float(np.percentile(x, 99)),
    }


def _increase(value: float, ref: float) -> float:
    return (value - ref) / ref if ref > 0 else 0.0


def run_node(
    scenario: NodeScenario,
    seed: int,
    progress: Callable[[str], None] | None = None,
    replay: ReplayedRequests | None = None,
) -> dict[str, Any]:
    """Simulate every run of ``scenario``; JSON-ready results (see module docstring).

    With a request trace (``scenario.requests``, read here unless ``replay`` is given) the
    GPUs replay its window round-robin instead of synthetic load; the run lasts the window,
    and the ``static`` share is taken from the replayed requests themselves (an oracle).
    """
    if replay is None:
        replay = scenario.replay()
    if replay is not None:
        scenario = scenario.model_copy(update={"duration_s": replay.window_s})
    model = scenario.latency_model()
    mem = scenario.memory
    on = scenario.online
    block_bytes = BLOCK_TOKENS * model.kv_bytes_per_token
    fixed_gib = model.resident_gib if on.fixed_gib is None else on.fixed_gib
    pool = int((mem.usable_gib - fixed_gib) * GIB)
    alone = int((mem.gpu_gib * on.memory_utilization - fixed_gib) * GIB) // block_bytes
    curve = memory_curve(model, scenario.offline, mem.usable_gib - fixed_gib)
    per_token = model.recompute_per_token(scenario.offline.prompt_tokens.mean)
    per_token *= scenario.costs.recompute_scale
    env = MemoryEnv(
        block_bytes=block_bytes,
        pool_bytes=pool,
        online_alone_blocks=alone,
        curve=curve,
        offline=model,
        recompute_s_per_token=per_token,
    )
    handle_bytes = mem.handle_mib * MIB
    mem_cfg = MemoryConfig(
        handle_bytes=handle_bytes,
        alpha=mem.alpha,
        initial_handles=max(1, int(mem.initial_headroom_gib * GIB // handle_bytes)),
        initial_interval_s=mem.release_interval_s,
        min_interval_s=min(0.05, mem.release_interval_s),
        max_interval_s=max(60.0, mem.release_interval_s),
    )
    m0_kv = pool - env.offline_weights_bytes - mem_cfg.initial_handles * handle_bytes
    bound_rate = env.offline_rate(m0_kv)

    master = np.random.default_rng(seed)
    gpus: list[_Gpu] = []
    shares = split_round_robin(replay.requests, scenario.gpus) if replay is not None else None
    for gi in range(scenario.gpus):
        s = int(master.integers(0, 2**31 - 1))
        rng = np.random.default_rng(s)
        if shares is not None:
            gpus.append(_Gpu(shares[gi], shares[gi], _gaps(rng, on.gap, 1 << 16), s))
            continue
        reqs = generate_requests(
            rng, on.arrival, on.prompt_tokens, on.output_tokens, scenario.duration_s
        )
        warm = generate_requests(
            rng, on.arrival, on.prompt_tokens, on.output_tokens, mem.static_window_s
        )
        gpus.append(_Gpu(reqs, warm, _gaps(rng, on.gap, 1 << 16), s))
    warm_s = mem.static_window_s if replay is None else scenario.duration_s

    # The static share: minimum free memory over a warm-up window of online-only load.
    static_kv: list[int] = []
    for g in gpus:
        if any(r.memory == "static" for r in scenario.runs):
            res = simulate_engine(
                g.warmup,
                warm_s,
                model,
                on,
                OnlineOnly(),
                NoOffline(env),
                g.gaps,
                0.0,
                scenario.series_step_s,
            )
            static_kv.append(
                max(0, pool - env.offline_weights_bytes - res.max_used_blocks * block_bytes)
            )
        else:
            static_kv.append(0)

    pre = scenario.preemption
    runs: dict[str, dict[str, Any]] = {}
    raw: dict[str, list[EngineResult]] = {}
    for spec in scenario.runs:
        if progress is not None:
            progress(spec.name)
        results: list[EngineResult] = []
        extras: dict[str, float] = {"invalidated_blocks": 0.0}
        reclaims = 0
        reclaimed = 0
        recompute = 0
        for gi, g in enumerate(gpus):
            rng = np.random.default_rng(g.seed + 1)
            compute = _compute(spec.compute, pre, rng)
            memory = _memory(spec, env, mem_cfg, mem, scenario.offline, rng, static_kv[gi])
            meter = CostMeter(
                scenario.costs,
                np.random.default_rng(g.seed + 2),
                gate=spec.compute == "gleaner",
            )
            res = simulate_engine(
                g.reqs,
                scenario.duration_s,
                model,
                on,
                compute,
                memory,
                g.gaps,
                bound_rate,
                scenario.series_step_s,
                meter,
            )
            results.append(res)
            reclaims += memory.reclamations
            reclaimed += memory.reclaimed_bytes
            recompute += memory.recompute_tokens
            if isinstance(memory, GleanerMemory):
                extras["invalidated_blocks"] += memory.invalidated_blocks
        raw[spec.name] = results
        runs[spec.name] = _summarize(spec, results, reclaims, reclaimed, recompute, extras)
    _compare(runs, raw, bound_rate)
    return {
        "scenario": scenario.model_dump(mode="json"),
        "seed": seed,
        "replay": None
        if replay is None
        else {
            "format": replay.format,
            "rows": replay.rows,
            "requests": len(replay.requests),
            "dropped": replay.dropped,
            "clipped": replay.clipped,
            "window_s": replay.window_s,
        },
        "offline_profile": {
            "standalone_tokens_per_second": curve.standalone,
            "required_memory_gib": curve.required_memory_gib,
            "memory_curve": [
                {"memoryGiB": m, "tokensPerSecond": r}
                for m, r in zip(curve.memory_gib, curve.tokens_per_second, strict=True)
            ],
        },
        "bound": {
            "name": "gate + no reclamation",
            "offline_memory_gib": curve.weights_gib + m0_kv / GIB,
            "tokens_per_second_while_running": bound_rate,
        },
        "runs": runs,
    }


def _compute(name: str, pre: PreemptionConfig, rng: np.random.Generator) -> ComputePolicy:
    fast = pre.fast_latency_ms / 1000.0
    if name == "online-only":
        return OnlineOnly()
    if name == "gleaner":
        # The gate's disable latency is the cost model's (costs.disable, drawn per preemption).
        return GleanerGate(preempt_latency_s=0.0, config=GateConfig())
    if name == "gpreempt":
        return GPreempt(preempt_latency_s=fast, wake_latency_s=pre.wake_latency_ms / 1000.0)
    return IterationLevel(
        rng=rng, kernel_mean_s=pre.kernel_mean_ms / 1000.0, kernel_sigma=pre.kernel_sigma
    )


def _memory(
    spec: RunSpec,
    env: MemoryEnv,
    mem_cfg: MemoryConfig,
    mem: NodeMemoryConfig,
    offline: OfflineJobConfig,
    rng: np.random.Generator,
    static_kv: int,
) -> MemoryPolicy:
    if spec.memory == "none" or spec.compute == "online-only":
        return NoOffline(env)
    if spec.memory == "gleaner":
        kv = OfflineKV(
            handle_tokens=mem_cfg.handle_bytes // (env.block_bytes // BLOCK_TOKENS),
            job=offline,
            rng=rng,
        )
        return GleanerMemory(
            env=env,
            config=mem_cfg,
            kv=kv,
            selector=SELECTORS[spec.selector],
            reclaim_latency_s=mem.reclaim_latency_ms / 1000.0,
            name=f"gleaner-{spec.selector}",
        )
    if spec.memory == "uvm":
        return UvmMemory(env=env, bandwidth_bytes_per_s=mem.uvm_bandwidth_gbps * 1e9)
    if spec.memory == "prism":
        return PrismMemory(env=env, release_s=mem.prism_release_s)
    return StaticMemory(env=env, offline_kv_bytes=static_kv)


def _summarize(
    spec: RunSpec,
    results: list[EngineResult],
    reclaims: int,
    reclaimed: int,
    recompute: int,
    extras: dict[str, float],
) -> dict[str, Any]:
    ttft = np.concatenate([r.ttft for r in results])
    tpot = np.concatenate([r.tpot for r in results])
    pre = np.concatenate([r.preemptions for r in results])
    horizon = sum(r.horizon_s for r in results)
    minutes = horizon / 60.0
    qs = np.linspace(0, 100, 101)
    return {
        "compute": spec.compute,
        "memory": spec.memory,
        "selector": spec.selector,
        "requests": int(ttft.size),
        "ttft_s": _stats(ttft),
        "tpot_s": _stats(tpot),
        "ttft_cdf_s": np.percentile(ttft, qs).tolist() if ttft.size else [],
        "tpot_cdf_s": np.percentile(tpot, qs).tolist() if tpot.size else [],
        "preemptions_per_request": float(pre.mean()) if pre.size else 0.0,
        "max_preemptions_per_request": int(pre.max()) if pre.size else 0,
        "share_requests_preempted_more_than_once": float((pre > 1).mean()) if pre.size else 0.0,
        "preemptions": int(pre.size and sum(int(x) for x in pre)),
        "reclamations": reclaims,
        "reclamations_per_minute": reclaims / minutes if minutes > 0 else 0.0,
        "reclaimed_gib": reclaimed / GIB,
        "recompute_tokens": recompute,
        "invalidated_blocks": int(extras["invalidated_blocks"]),
        "online_kv_preemptions": sum(r.kv_preemptions for r in results),
        "refused_requests": sum(r.refused for r in results),
        "online_busy_fraction": sum(r.busy_s for r in results) / horizon if horizon else 0.0,
        "offline_run_fraction": sum(r.offline_run_s for r in results) / horizon if horizon else 0.0,
        "offline_tokens": sum(r.offline_tokens for r in results),
        "offline_tokens_per_second": sum(r.offline_tokens for r in results) / horizon
        if horizon
        else 0.0,
        "bound_tokens_per_second": sum(r.bound_tokens for r in results) / horizon
        if horizon
        else 0.0,
        "online_idle_s": horizon - sum(r.busy_s for r in results),
        "online_cost_s": sum(r.online_cost_s for r in results),
        "offline_cost_s": sum(r.offline_cost_s for r in results),
        "horizon_s": horizon,
        "series": results[0].series,
    }


def _compare(
    runs: dict[str, dict[str, Any]], raw: dict[str, list[EngineResult]], rate: float
) -> None:
    """Add increases over online-only and throughput normalized to the gleaner-gate bound
    and to the idle-time ideal (``rate``: offline tokens/s with its initial memory)."""
    ref = runs.get("online-only")
    gate_runs = [r for r in runs.values() if r["compute"] == "gleaner"]
    bound = gate_runs[0]["bound_tokens_per_second"] if gate_runs else 0.0
    for run in runs.values():
        if ref is not None:
            run["ttft_increase"] = {
                k: _increase(run["ttft_s"][k], ref["ttft_s"][k]) for k in ("mean", "p99")
            }
            run["tpot_increase"] = {
                k: _increase(run["tpot_s"][k], ref["tpot_s"][k]) for k in ("mean", "p99")
            }
        run["offline_normalized"] = run["offline_tokens_per_second"] / bound if bound > 0 else 0.0
        # Against what offline would make in *all* online-idle time with its initial memory:
        # a bound no policy can exceed (the gate bound above counts only the gate's run time).
        ideal = run["online_idle_s"] * rate
        run["offline_of_ideal"] = run["offline_tokens"] / ideal if ideal > 0 else 0.0
        run["throughput_loss"] = (
            1.0 - run["offline_normalized"] if run["compute"] != "online-only" else 0.0
        )
