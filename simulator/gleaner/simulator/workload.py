"""Online workload model: Gamma inter-arrival times and lognormal prompt/output lengths.

Contract: pure functions of a ``numpy.random.Generator`` and typed parameters; the same
seed gives the same requests, so every policy of one scenario sees the identical load.

- Arrivals: inter-arrival gaps ~ Gamma(shape = 1/CV², scale = CV²/rate) — mean 1/rate,
  coefficient of variation CV (CV = 1 is Poisson; CV > 1 is bursty). BurstGPT (Wang et
  al., arXiv:2401.17644) fits its request arrivals with Gamma distributions.
- Lengths: lognormal with the given *mean* and log-space sigma (mu = ln(mean) − sigma²/2),
  rounded and clipped to [1, max]. The defaults reproduce the BurstGPT means quoted in
  docs/simulator.md (2,747 input / 267 output tokens); clipping moves the mean by < 1% for the
  shipped sigmas (``tests/simulator`` checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PROMPT_TOKENS_MEAN = 2747.0
"""Mean prompt tokens of an online request (BurstGPT's): the node level's default, and the
cluster level's."""
OUTPUT_TOKENS_MEAN = 267.0
"""Mean output tokens of an online request (BurstGPT's): the node level's default, and the
cluster level's."""


class ArrivalConfig(BaseModel):
    """Gamma arrival process."""

    model_config = ConfigDict(extra="forbid")

    rate_per_s: float = Field(gt=0, description="Mean requests per second.")
    cv: float = Field(default=1.0, gt=0, description="Coefficient of variation of the gaps.")


class LengthConfig(BaseModel):
    """A lognormal token-length distribution given by its mean."""

    model_config = ConfigDict(extra="forbid")

    mean: float = Field(gt=0, description="Mean tokens (before clipping).")
    sigma: float = Field(default=1.0, ge=0, description="Log-space standard deviation.")
    max: int = Field(default=32768, ge=1, description="Largest length; longer draws are clipped.")


def gamma_arrivals(rng: np.random.Generator, cfg: ArrivalConfig, duration_s: float) -> FloatArray:
    """Arrival times in [0, duration_s) of a Gamma renewal process (sorted)."""
    shape = 1.0 / (cfg.cv * cfg.cv)
    scale = cfg.cv * cfg.cv / cfg.rate_per_s
    expected = cfg.rate_per_s * duration_s
    n = int(expected + 6.0 * np.sqrt(expected * max(cfg.cv, 1.0) ** 2 + 1.0) + 16)
    times = np.empty(0)
    start = 0.0
    while True:
        gaps = rng.gamma(shape, scale, size=n)
        chunk = start + np.cumsum(gaps)
        times = np.concatenate([times, chunk])
        if chunk[-1] >= duration_s:
            break
        start = float(chunk[-1])
    return times[times < duration_s]


def lognormal_lengths(rng: np.random.Generator, cfg: LengthConfig, n: int) -> IntArray:
    """``n`` token lengths, lognormal with mean ``cfg.mean``, clipped to [1, cfg.max]."""
    mu = np.log(cfg.mean) - 0.5 * cfg.sigma * cfg.sigma
    raw = rng.lognormal(mu, cfg.sigma, size=n) if cfg.sigma > 0 else np.full(n, cfg.mean)
    return np.clip(np.rint(raw), 1, cfg.max).astype(np.int64)


@dataclass(frozen=True)
class Requests:
    """A request stream: arrival time (s), prompt tokens and output tokens per request."""

    arrival: FloatArray
    prompt: IntArray
    output: IntArray

    def __len__(self) -> int:
        return int(self.arrival.shape[0])


def generate_requests(
    rng: np.random.Generator,
    arrivals: ArrivalConfig,
    prompt: LengthConfig,
    output: LengthConfig,
    duration_s: float,
) -> Requests:
    """A request stream of ``duration_s`` seconds."""
    t = gamma_arrivals(rng, arrivals, duration_s)
    return Requests(
        arrival=t,
        prompt=lognormal_lengths(rng, prompt, len(t)),
        output=lognormal_lengths(rng, output, len(t)),
    )
