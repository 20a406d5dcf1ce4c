"""The simulated backend: an online workload and offline work, modeled, driving a NodeAgent.

Contract. :class:`SimulatedNode` owns a :class:`~gleaner.runtime_agent.core.NodeAgent` and a
discrete-event queue. :meth:`SimulatedNode.advance` processes every event up to a time (the
daemon calls it with its monotonic clock; the simulator may call it as fast as it likes), so
the whole agent runs without a GPU and the same policies decide as in a cluster. Online load
comes from one of:

- :class:`SyntheticOnline` — a continuous-batching server per GPU: Gamma-distributed request
  arrivals, each request a prefill and a number of decode iterations separated by short
  decode gaps, KV memory growing with the tokens in flight; prefill and iteration latency and
  KV bytes per token come from the engine model (``gleaner.perfmodel.engine``, the one the
  simulator runs); seeded by the node name, so a node always sees the same load;
- :class:`TraceOnline` — a trace file (``timestamp, node, gpu, online_busy,
  free_memory_gib``): each sample of length Δ is busy for ``online_busy · Δ`` at its start;
  free memory sets the online memory use; the trace loops;
- injected bursts (:meth:`SimulatedNode.inject_burst`), on top of either.

Offline work is modeled per GPU that holds an offline job: it fills the harvestable memory
with KV handles of its requests (4 handles per request, the engine model's KV blocks in a
handle), loses the handles a reclamation plan takes and recomputes those tokens
(``recomputed_tokens``); a restore gives a lost handle back (``restored_bytes``), and the
pages of a job that leaves a GPU are dropped from the agent's quarantine. The GPU inventory
is synthetic (:func:`synthetic_inventory`), UUIDs derived from the node name; with a trace,
the trace decides it (:func:`trace_inventory`: exactly the node's GPUs in the trace, with a
warning when a requested GPU count disagrees), so that no GPU without online load is
reported for the operator to place jobs on.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gleaner.api import GpuInfo
from gleaner.api.nodetrace import gpu_uuid
from gleaner.api.units import GIB
from gleaner.perfmodel.engine import LLAMA31_8B_H100, EngineModel
from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.policy import GateConfig, HandleMap, KvSpan, MemoryConfig, ReclaimPlan

SIM_PRODUCT = "Simulated GPU"
ENGINE = LLAMA31_8B_H100
"""The engine model both synthetic workloads run (``gleaner.perfmodel.engine``, shared with the
simulator and the vLLM test fake)."""
TOKENS_PER_BLOCK = ENGINE.block_tokens
BLOCKS_PER_HANDLE = max(1, MemoryConfig().handle_bytes // ENGINE.block_bytes)
"""KV blocks of the engine model in one memory handle of the default size."""
HANDLES_PER_REQUEST = 4


def node_seed(node: str) -> int:
    """A stable 64-bit seed from a node name (same node, same synthetic load)."""
    return int.from_bytes(hashlib.sha256(node.encode()).digest()[:8], "little")


def synthetic_inventory(node: str, gpus: int, memory_gib: float) -> list[GpuInfo]:
    """``gpus`` identical simulated GPUs with UUIDs derived from the node name."""
    if not 1 <= gpus <= 16:
        raise ValueError("a node has 1 to 16 GPUs")
    if memory_gib <= 0:
        raise ValueError("GPU memory must be positive")
    return [
        GpuInfo(index=i, uuid=gpu_uuid(node, i), product=SIM_PRODUCT, memory_gi_b=memory_gib)
        for i in range(gpus)
    ]


def trace_inventory(
    node: str,
    trace_gpus: Sequence[int],
    requested: int | None,
    memory_gib: float,
    specs: Mapping[int, tuple[str, float]] | None = None,
) -> tuple[list[GpuInfo], str | None]:
    """The inventory of a node replayed from a trace: exactly its GPUs in the trace (their
    indices; product and memory from the trace's ``gpu_product``/``gpu_memory_gib`` columns,
    ``specs``, where it has them), and a warning when ``requested`` (``--gpus``) says
    another count."""
    if not trace_gpus:
        raise ValueError(f"the trace has no GPUs for node {node}")
    if memory_gib <= 0:
        raise ValueError("GPU memory must be positive")
    gpus = sorted(set(trace_gpus))
    known = specs or {}
    inventory = [
        GpuInfo(
            index=i,
            uuid=gpu_uuid(node, i),
            product=known.get(i, ("", 0.0))[0] or SIM_PRODUCT,
            memory_gi_b=known.get(i, ("", 0.0))[1] or memory_gib,
        )
        for i in gpus
    ]
    warning = None
    if requested is not None and requested != len(gpus):
        listed = ", ".join(map(str, gpus))
        warning = (
            f"--gpus {requested} ignored: the trace has {len(gpus)} GPU(s) for node {node} "
            f"({listed}), and the agent reports only those"
        )
    return inventory, warning


Event = tuple[float, int, Callable[[float], None]]


@dataclass(frozen=True, slots=True)
class SyntheticConfig:
    """The synthetic online workload of one GPU (a continuous-batching LLM server)."""

    request_rate_per_s: float = 0.25
    arrival_shape: float = 0.5
    """Gamma shape of inter-arrival times (< 1: burstier than Poisson)."""
    engine: EngineModel = ENGINE
    """Iteration latency and KV bytes per token come from this engine model."""
    prefill_s: float | None = None
    """A request's prefill iteration, seconds (None: the engine's prefill of
    ``prompt_tokens``)."""
    iteration_s: float | None = None
    """One decode iteration, seconds (None: the engine's decode step of the batch in flight
    at its mean context)."""
    decode_gap_s: float = 0.002
    """CPU time between two decode iterations (scheduling, sampling), mean."""
    min_tokens: int = 16
    max_tokens: int = 160
    prompt_tokens: int = 512
    kv_bytes_per_token: int | None = None
    """KV bytes per token (None: the engine's)."""
    weights_fraction: float = 0.35
    """Fraction of GPU memory the online model's weights take."""

    def prefill_latency(self) -> float:
        if self.prefill_s is not None:
            return self.prefill_s
        return self.engine.prefill(self.prompt_tokens)

    def iteration_latency(self, batch: int, mean_context: float) -> float:
        if self.iteration_s is not None:
            return self.iteration_s
        return self.engine.decode(max(1, batch), mean_context)

    def kv_bytes(self, tokens: int) -> int:
        per_token = self.kv_bytes_per_token or self.engine.kv_bytes_per_token
        return tokens * per_token


@dataclass(slots=True)
class _ActiveRequest:
    name: str
    remaining: int
    tokens: int


class SyntheticOnline:
    """Continuous-batching online server on each GPU, seeded by node (see module doc)."""

    def __init__(self, node: str, config: SyntheticConfig | None = None) -> None:
        self.config = config or SyntheticConfig()
        self.node = node
        self._rngs: dict[int, random.Random] = {}
        self._active: dict[int, list[_ActiveRequest]] = {}
        self._running: dict[int, bool] = {}
        self._seq = itertools.count()

    def attach(self, sim: SimulatedNode) -> None:
        c = self.config
        for gpu in sim.agent.gpus:
            rng = random.Random(node_seed(self.node) ^ (gpu * 0x9E3779B97F4A7C15))
            self._rngs[gpu] = rng
            self._active[gpu] = []
            self._running[gpu] = False
            total = sim.agent.memory_model[gpu].total_bytes
            sim.agent.set_online_memory(sim.now, gpu, base_bytes=int(total * c.weights_fraction))
            sim.schedule(sim.now + self._interarrival(gpu), self._arrival(sim, gpu))

    def _interarrival(self, gpu: int) -> float:
        c = self.config
        mean = 1.0 / c.request_rate_per_s
        return self._rngs[gpu].gammavariate(c.arrival_shape, mean / c.arrival_shape)

    def _arrival(self, sim: SimulatedNode, gpu: int) -> Callable[[float], None]:
        def run(t: float) -> None:
            c = self.config
            rng = self._rngs[gpu]
            name = f"online-{gpu}-{next(self._seq)}"
            n = rng.randint(c.min_tokens, c.max_tokens)
            self._active[gpu].append(_ActiveRequest(name, n, c.prompt_tokens))
            sim.agent.online_busy(t, gpu, "synthetic", name)
            if not self._running[gpu]:
                self._running[gpu] = True
                sim.schedule(t + c.prefill_latency(), self._iteration_end(sim, gpu))
            sim.schedule(t + self._interarrival(gpu), self._arrival(sim, gpu))

        return run

    def _iteration_end(self, sim: SimulatedNode, gpu: int) -> Callable[[float], None]:
        def run(t: float) -> None:
            c = self.config
            active = self._active[gpu]
            finished = []
            for r in active:
                r.remaining -= 1
                r.tokens += 1
                if r.remaining <= 0:
                    finished.append(r.name)
            self._active[gpu] = [r for r in active if r.remaining > 0]
            sim.agent.online_idle(t, gpu, "synthetic", finished)
            kv = c.kv_bytes(sum(r.tokens for r in self._active[gpu]))
            sim.agent.set_online_memory(t, gpu, dynamic_bytes=kv)
            if not self._active[gpu]:
                self._running[gpu] = False
                return
            gap = c.decode_gap_s * (0.5 + self._rngs[gpu].random())
            sim.schedule(t + gap, self._iteration_start(sim, gpu))

        return run

    def _iteration_start(self, sim: SimulatedNode, gpu: int) -> Callable[[float], None]:
        def run(t: float) -> None:
            active = self._active[gpu]
            if not active:
                self._running[gpu] = False
                return
            sim.agent.online_busy(t, gpu, "synthetic", active[0].name)
            context = sum(r.tokens for r in active) / len(active)
            latency = self.config.iteration_latency(len(active), context)
            sim.schedule(t + latency, self._iteration_end(sim, gpu))

        return run


@dataclass(frozen=True, slots=True)
class TraceSample:
    t: float
    busy: float
    free_gib: float
    duration: float


class TraceOnline:
    """Replay of one node's rows of a trace file, looped (see module doc)."""

    def __init__(
        self,
        samples: dict[int, list[TraceSample]],
        specs: Mapping[int, tuple[str, float]] | None = None,
    ) -> None:
        if not samples or not any(samples.values()):
            raise ValueError("the trace has no samples for this node")
        self.samples = samples
        self.specs = dict(specs or {})
        """GPU → (product, memory GiB) from the trace's optional columns ("" / 0: absent)."""
        self.span = max(s[-1].t + s[-1].duration for s in samples.values() if s) - min(
            s[0].t for s in samples.values() if s
        )
        self.t0 = min(s[0].t for s in samples.values() if s)
        self._seq = itertools.count()

    @classmethod
    def from_file(cls, path: Path, node: str) -> TraceOnline:
        """Load ``node``'s rows (all rows when the file holds one node only); the file is
        read and checked as every trace file is (``gleaner.perfmodel.frames``)."""
        from gleaner.perfmodel import TraceFormatError, read_trace_frame, validate_trace_frame

        try:
            df = validate_trace_frame(read_trace_frame(path))
        except TraceFormatError as exc:
            message = str(exc)
            raise ValueError(
                message if str(path) in message else f"trace {path}: {message}"
            ) from exc
        nodes = sorted(df["node"].astype(str).unique())
        if node in nodes:
            df = df[df["node"].astype(str) == node]
        elif len(nodes) == 1:
            pass
        else:
            raise ValueError(f"trace {path} has no rows for node {node!r} (nodes: {nodes[:5]})")
        out: dict[int, list[TraceSample]] = {}
        specs: dict[int, tuple[str, float]] = {}
        for gpu, rows in df.sort_values("timestamp").groupby("gpu"):
            products = [str(x) for x in rows.get("gpu_product", []) if str(x)]
            memory = float(rows["gpu_memory_gib"].max()) if "gpu_memory_gib" in rows else 0.0
            specs[int(str(gpu))] = (products[0] if products else "", memory)
            ts = [float(x) for x in rows["timestamp"]]
            busy = [min(1.0, max(0.0, float(x))) for x in rows["online_busy"]]
            free = [max(0.0, float(x)) for x in rows["free_memory_gib"]]
            steps = [b - a for a, b in itertools.pairwise(ts) if b > a]
            default = sorted(steps)[len(steps) // 2] if steps else 1.0
            durs = [*(b - a for a, b in itertools.pairwise(ts)), default]
            out[int(str(gpu))] = [
                TraceSample(t, b, f, d)
                for t, b, f, d in zip(ts, busy, free, durs, strict=True)
                if d > 0
            ]
        return cls(out, specs)

    def attach(self, sim: SimulatedNode) -> None:
        for gpu, samples in self.samples.items():
            if gpu not in sim.agent.gates or not samples:
                continue
            peak_free = max(s.free_gib for s in samples)
            total = sim.agent.memory_model[gpu].total_bytes
            base = max(0, total - int(peak_free * GIB))
            sim.agent.set_online_memory(sim.now, gpu, base_bytes=base)
            sim.schedule(sim.now, self._sample(sim, gpu, 0, 0, sim.now, peak_free))

    def _sample(
        self, sim: SimulatedNode, gpu: int, i: int, cycle: int, origin: float, peak: float
    ) -> Callable[[float], None]:
        def run(t: float) -> None:
            s = self.samples[gpu][i]
            sim.agent.set_online_memory(t, gpu, dynamic_bytes=int((peak - s.free_gib) * GIB))
            if s.busy > 0:
                name = f"trace-{gpu}-{next(self._seq)}"
                sim.agent.online_busy(t, gpu, "trace", name)
                sim.schedule(
                    t + s.busy * s.duration,
                    lambda te: sim.agent.online_idle(te, gpu, "trace", [name]),
                )
            j, c = i + 1, cycle
            if j >= len(self.samples[gpu]):
                j, c = 0, cycle + 1
            nxt = origin + c * self.span + (self.samples[gpu][j].t - self.t0)
            sim.schedule(max(nxt, t), self._sample(sim, gpu, j, c, origin, peak))

        return run


@dataclass(slots=True)
class OfflineModel:
    """Offline work on one GPU: KV handles filling its harvestable memory."""

    job: str
    lost_handles: set[int] = field(default_factory=set)
    recomputed_tokens: int = 0
    reclaimed_bytes: int = 0
    restored_bytes: int = 0

    def handle_table(self, n_handles: int) -> HandleMap:
        table: dict[int, list[KvSpan]] = {}
        for h in range(n_handles):
            if h in self.lost_handles:
                continue
            req, part = divmod(h, HANDLES_PER_REQUEST)
            first = part * BLOCKS_PER_HANDLE
            blocks = tuple(range(first, first + BLOCKS_PER_HANDLE))
            tokens = (HANDLES_PER_REQUEST - part) * BLOCKS_PER_HANDLE * TOKENS_PER_BLOCK
            table[h] = [KvSpan(f"{self.job}/req-{req}", blocks, tokens)]
        return table


class SimulatedNode:
    """A NodeAgent driven by modeled online and offline work (see module doc)."""

    def __init__(
        self,
        node: str,
        inventory: Sequence[GpuInfo],
        *,
        start: float = 0.0,
        online: SyntheticOnline | TraceOnline | None = None,
        gate_config: GateConfig | None = None,
        memory_config: MemoryConfig | None = None,
    ) -> None:
        self.now = start
        self._queue: list[Event] = []
        self._seq = itertools.count()
        self.offline: dict[int, OfflineModel] = {}
        self.agent = NodeAgent(
            node=node,
            inventory=inventory,
            start=start,
            gate_config=gate_config or GateConfig(),
            memory_config=memory_config or MemoryConfig(),
            sink=self,
            offline_handles=self._offline_handles,
        )
        self.gate_open: dict[int, bool] = dict.fromkeys(self.agent.gpus, False)
        self.bursts = 0
        self.online = online if online is not None else SyntheticOnline(node)
        self.online.attach(self)

    # -- the event queue ------------------------------------------------------------------

    def schedule(self, t: float, fn: Callable[[float], None]) -> None:
        heapq.heappush(self._queue, (t, next(self._seq), fn))

    def advance(self, t: float) -> int:
        """Process every event up to ``t`` (and the agent's deadlines); returns events run."""
        n = 0
        while True:
            deadline = self.agent.next_deadline()
            nxt = self._queue[0][0] if self._queue else math.inf
            if deadline is not None and deadline <= min(nxt, t):
                self.now = max(self.now, deadline)
                self.agent.tick(self.now)
                continue
            if nxt > t:
                break
            et, _, fn = heapq.heappop(self._queue)
            self.now = max(self.now, et)
            fn(self.now)
            n += 1
        self.now = max(self.now, t)
        self.agent.tick(self.now)
        return n

    def events(self) -> Iterator[float]:
        """Times of the queued events, earliest first (for inspection)."""
        return iter(sorted(e[0] for e in self._queue))

    # -- bursts and offline placement -----------------------------------------------------

    def inject_burst(self, t: float, gpus: Sequence[int], seconds: float, busy: float) -> None:
        """Make ``gpus`` online-busy for ``seconds`` (``busy`` < 1: that duty cycle)."""
        if seconds <= 0 or not 0 < busy <= 1:
            raise ValueError("a burst needs seconds > 0 and 0 < busy <= 1")
        for g in gpus:
            if g not in self.agent.gates:
                raise ValueError(f"GPU {g} is not on this node")
        self.bursts += 1
        source = f"burst-{self.bursts}"
        agent = self.agent

        def busy_at(gpu: int, request: str | None) -> Callable[[float], None]:
            return lambda te: agent.online_busy(te, gpu, source, request)

        def idle_at(gpu: int, finished: Sequence[str]) -> Callable[[float], None]:
            return lambda te: agent.online_idle(te, gpu, source, finished)

        if busy >= 1.0:
            # One request per GPU for the whole burst: it is preempted at most once.
            for g in gpus:
                name = f"{source}-{g}"
                busy_at(g, name)(t)
                self.schedule(t + seconds, idle_at(g, [name]))
            return
        # A duty cycle: each busy period is its own (anonymous) request.
        period = 0.1
        end = t + seconds
        k = 0
        while t + k * period < end:
            on = t + k * period
            off = min(end, on + busy * period)
            for g in gpus:
                self.schedule(on, busy_at(g, None))
                self.schedule(off, idle_at(g, ()))
            k += 1

    def set_offline_jobs(self, t: float, jobs_by_gpu: dict[int, str]) -> None:
        """Offline jobs placed on this node now (GPU → ``namespace/name``)."""
        self.advance(t)
        for g in list(self.offline):
            if jobs_by_gpu.get(g) != self.offline[g].job:
                del self.offline[g]
                self.agent.drop_quarantine("", g)  # its quarantined pages left with it
        for g, job in jobs_by_gpu.items():
            if g in self.agent.gates and g not in self.offline:
                self.offline[g] = OfflineModel(job)
        self.agent.set_offline_jobs(t, jobs_by_gpu)

    # -- Sink -----------------------------------------------------------------------------

    def set_gate(self, gpu: int, enable: bool, t: float) -> None:
        self.gate_open[gpu] = enable

    def reclaim(self, plan: ReclaimPlan, t: float) -> bool:
        model = self.offline.get(plan.gpu)
        if model is None:
            return True
        model.lost_handles.update(plan.handles)
        model.recomputed_tokens += plan.tokens_to_recompute
        model.reclaimed_bytes += plan.reclaimed_bytes
        return True

    def restore(self, gpu: int, owner: str, handles: tuple[int, ...], t: float) -> bool:
        model = self.offline.get(gpu)
        if model is not None:
            model.lost_handles.difference_update(handles)
            model.restored_bytes += len(handles) * self.agent.memory_config.handle_bytes
        return True

    def _offline_handles(self, gpu: int) -> HandleMap:
        model = self.offline.get(gpu)
        if model is None:
            return {}
        n = self.agent.harvestable_bytes(gpu) // self.agent.memory_config.handle_bytes
        table = model.handle_table(int(n))
        # Handles lost earlier were recomputed into fresh ones: start a new generation.
        if not table:
            model.lost_handles.clear()
            table = model.handle_table(int(n))
        return table
