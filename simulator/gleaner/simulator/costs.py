"""What colocation costs at the node level: every term named, parameterised and drawn here.

Contract. :class:`CostModel` (the node scenario's ``costs:`` section) holds one field per cost
term; :class:`CostMeter` draws them for one engine run from a seeded generator, so every
policy of a scenario pays from its own reproducible stream. The engine
(``gleaner.simulator.node``) asks the meter at four moments and nothing else decides a cost:

- an online launch that preempts offline work (``gleaner`` channel gate, ``gpreempt``
  timeslice): :meth:`CostMeter.preempt` = the channel disable latency (gate only; a lognormal
  distribution) + the offline kernel in flight (preempted at the hardware's granularity, a
  context save, or drained to its end);
- the first online iteration after offline work ran: :meth:`CostMeter.pollution` = cache/TLB
  refill, a fixed part plus a share of that iteration's latency;
- offline work resuming after a preemption: :meth:`CostMeter.resume` = the channel re-enable
  latency (gate only) + warm-up, offline GPU time that produces no tokens;
- memory moving between the two workloads: :meth:`CostMeter.vmm` = unmap + release (taken
  from offline) and map (given to online, or back to offline) per 2 MiB page.

The recompute of invalidated KV is charged by the memory policies in tokens
(``plan_reclamation``'s count); :attr:`CostModel.recompute_scale` scales its price.

Every default, its source, and which ones are guesses until hardware measures them are in
docs/simulator.md ("Cost model"); ``gleaner simulate --sensitivity`` shows how each term moves
the results. Pure: numbers and a generator in, seconds out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

PAGE_BYTES = 2 * 1024 * 1024
"""The CUDA VMM physical page (cuMemCreate's minimum granularity on current GPUs)."""


class LatencyDistribution(BaseModel):
    """A lognormal latency given by its median and log-space sigma, capped at ``max_ms``."""

    model_config = ConfigDict(extra="forbid")

    median_ms: float = Field(ge=0, description="Median, ms (0 turns the term off).")
    sigma: float = Field(default=0.5, ge=0, description="Log-space standard deviation.")
    max_ms: float = Field(default=5.0, gt=0, description="Largest draw, ms.")

    def mean_ms(self) -> float:
        """Mean of the uncapped distribution, ms."""
        return self.median_ms * math.exp(0.5 * self.sigma**2)

    def draw(self, rng: np.random.Generator) -> float:
        """One draw, seconds."""
        if self.median_ms <= 0:
            return 0.0
        ms = self.median_ms
        if self.sigma > 0:
            ms = float(rng.lognormal(math.log(self.median_ms), self.sigma))
        return min(ms, self.max_ms) / 1000.0

    def scaled(self, factor: float) -> LatencyDistribution:
        """The same shape with the median (and cap) multiplied by ``factor``."""
        return self.model_copy(
            update={"median_ms": self.median_ms * factor, "max_ms": self.max_ms * max(factor, 1)}
        )


def fit_latency(samples_ns: Sequence[int | float]) -> LatencyDistribution:
    """The lognormal of measured latencies (ns), in the cost model's units: the median, the
    log-space standard deviation and the largest sample as the cap (ms). The GPU hardware
    test (tests/runtime-agent/shim/test_gpu_hardware.py) writes its disable and resume
    latencies this way, ready to paste into a scenario's ``costs:``."""
    xs = np.asarray([float(x) for x in samples_ns if x > 0], dtype=np.float64) / 1e6
    if xs.size == 0:
        return LatencyDistribution(median_ms=0.0, sigma=0.0)
    sigma = float(np.std(np.log(xs), ddof=1)) if xs.size > 1 else 0.0
    return LatencyDistribution(
        median_ms=float(np.median(xs)), sigma=sigma, max_ms=max(float(xs.max()), 1e-6)
    )


def measured_costs(
    stop_ns: Sequence[int | float], resume_ns: Sequence[int | float]
) -> dict[str, Any]:
    """The ``simulator_costs`` section the GPU hardware test writes to its results file:
    the measured channel stop (``disable``) and resume (``enable``) latencies fitted by
    :func:`fit_latency`, as a scenario's ``costs:`` keys (paste them there, or merge them with
    :func:`with_measured`)."""
    return {
        "disable": fit_latency(stop_ns).model_dump(),
        "enable": fit_latency(resume_ns).model_dump(),
    }


def with_measured(costs: CostModel, measured: Mapping[str, Any]) -> CostModel:
    """``costs`` with the terms of a hardware results file's ``simulator_costs`` section
    replacing the guessed defaults (validated like a scenario's ``costs:``)."""
    return CostModel.model_validate({**costs.model_dump(), **dict(measured)})


class InflightConfig(BaseModel):
    """The offline kernel already running when the gate stops new work."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["preempt", "drain"] = Field(
        default="preempt",
        description="preempt: a compute-preemption context save; drain: it runs to its end.",
    )
    save_ms: float = Field(default=0.05, ge=0, description="Context save, ms (mode preempt).")
    kernel_mean_ms: float = Field(
        default=1.0, gt=0, description="Mean offline kernel, ms (mode drain; lognormal)."
    )
    kernel_sigma: float = Field(default=1.0, ge=0)

    def draw(self, rng: np.random.Generator) -> float:
        """Seconds the online launch waits for the in-flight kernel."""
        if self.mode == "preempt":
            return self.save_ms / 1000.0
        # Residual life of a renewal process of lognormal kernels: a uniform share of a
        # length-biased draw (lognormal with mu + sigma^2).
        s = self.kernel_sigma
        mu = math.log(self.kernel_mean_ms) - 0.5 * s * s
        biased = float(rng.lognormal(mu + s * s, s)) if s > 0 else self.kernel_mean_ms
        return biased * float(rng.random()) / 1000.0


class VmmConfig(BaseModel):
    """CUDA VMM call time per 2 MiB physical page."""

    model_config = ConfigDict(extra="forbid")

    unmap_us: float = Field(default=30.0, ge=0, description="cuMemUnmap per page, µs.")
    release_us: float = Field(default=20.0, ge=0, description="cuMemRelease per page, µs.")
    map_us: float = Field(
        default=40.0, ge=0, description="cuMemCreate + cuMemMap + cuMemSetAccess per page, µs."
    )


class CostModel(BaseModel):
    """Every cost of colocation the node level charges (docs/simulator.md, "Cost model")."""

    model_config = ConfigDict(extra="forbid")

    disable: LatencyDistribution = Field(
        default_factory=lambda: LatencyDistribution(median_ms=0.2, sigma=0.5, max_ms=2.0),
        description="Channel disable (gate), paid by the online launch that preempts.",
    )
    enable: LatencyDistribution = Field(
        default_factory=lambda: LatencyDistribution(median_ms=0.2, sigma=0.5, max_ms=2.0),
        description="Channel re-enable (gate), paid by offline before it runs again.",
    )
    inflight: InflightConfig = Field(default_factory=InflightConfig)
    resume_warmup_ms: float = Field(
        default=0.1, ge=0, description="Offline GPU time lost to warm-up on every resume, ms."
    )
    pollution_ms: float = Field(
        default=0.05, ge=0, description="Online cache/TLB refill after offline ran, ms."
    )
    pollution_fraction: float = Field(
        default=0.0,
        ge=0,
        description="...plus this share of the first online iteration after offline ran.",
    )
    vmm: VmmConfig = Field(default_factory=VmmConfig)
    recompute_scale: float = Field(
        default=1.0, ge=0, description="Price of recomputing invalidated KV (1 = prefill cost)."
    )


class CostMeter:
    """Draws the terms of one :class:`CostModel` for one engine run (see module docstring)."""

    def __init__(self, model: CostModel, rng: np.random.Generator, gate: bool) -> None:
        self.model = model
        self.rng = rng
        self.gate = gate
        """Whether offline work is stopped by disabling its channels (the disable and
        re-enable latencies apply); timeslicing pays only the in-flight kernel."""
        self.online_s = 0.0
        self.offline_s = 0.0

    def preempt(self) -> float:
        """Seconds an online launch waits when it preempts running offline work."""
        s = self.model.inflight.draw(self.rng)
        if self.gate:
            s += self.model.disable.draw(self.rng)
        self.online_s += s
        return s

    def pollution(self, iteration_s: float) -> float:
        """Extra seconds of the first online iteration after offline work ran."""
        s = self.model.pollution_ms / 1000.0 + self.model.pollution_fraction * iteration_s
        self.online_s += s
        return s

    def resume(self) -> float:
        """Offline GPU seconds lost when offline work resumes after a preemption."""
        s = self.model.resume_warmup_ms / 1000.0
        if self.gate:
            s += self.model.enable.draw(self.rng)
        self.offline_s += s
        return s

    def vmm(self, unmapped_bytes: int, mapped_bytes: int) -> float:
        """Seconds to unmap + release ``unmapped_bytes`` and map ``mapped_bytes``."""
        v = self.model.vmm
        out = -(-unmapped_bytes // PAGE_BYTES) * (v.unmap_us + v.release_us)
        out += -(-mapped_bytes // PAGE_BYTES) * v.map_us
        return out / 1e6
