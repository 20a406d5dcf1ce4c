"""Measuring a job's profile: which KV-cache budgets to run, and the fit of what was measured.

Contract (docs/profiling.md). Pure: measurements in, a profile out; no I/O, no clock.

- :class:`Measurement`: one run of the job's own engine at one KV-cache budget: output
  tokens produced and seconds taken. ``memory_gib`` is the GPU memory per GPU the job held
  (its fixed footprint, weights and activations, plus the KV budget).
- :class:`SwingMeasurement`: one run whose KV budget dropped from ``high_gib`` to
  ``low_gib`` for a share ``low_fraction`` of the run (what reclamation does to a harvested
  job). Only engines that can shrink their cache mid-run give these.
- :func:`initial_budgets` spreads the first runs geometrically over ``[kv_min, kv_max]``;
  :func:`next_budget` picks the next budget where the measured curve bends most (the
  midpoint of the wider side of the sharpest corner), so a few extra runs go where linear
  interpolation between points errs most.
- :func:`measure` is the loop: the initial budgets, then ``refine`` budgets from
  :func:`next_budget`, each run through a callable the shell provides (the engine);
- :class:`GpuTime` and :func:`per_offline_second`: a run on a GPU shared with online
  inference, under the compute gate, progresses only while its gate is open. The agent
  accounts those seconds; of the ``wall_seconds`` its reports covered, ``offline_seconds``
  were open to the run. The standalone rate is then tokens per offline GPU-second: the
  run's seconds scaled by ``offline_seconds / wall_seconds``. A run without accounting
  (nothing covered it) is kept as measured, a lower bound on the standalone rate;
- :func:`fit_profile` fits:

  * the **curve**: isotonic (non-decreasing) least squares of tokens/s against memory
    (pool-adjacent-violators, each run weighted by its seconds): more memory never slows a
    batch engine, so a dip is measurement noise and is averaged away;
  * **standaloneTokensPerSecond**: the fitted curve's last (largest-memory) value;
  * **requiredMemoryGiB**: the smallest memory at which the fitted curve, interpolated
    linearly, reaches ``full_speed_fraction`` of that (0.95 by default);
  * **memoryDeficitCoefficient** (MAC): tokens/s lost per GiB of expected deficit beyond
    what the static curve predicts. For each swing run the curve predicts
    ``(1-f)·T(high) + f·T(low)``; the loss is that minus the measured rate and the
    expected deficit is ``(1-f)·max(0, Mreq-high) + f·max(0, Mreq-low)``. MAC is the
    least-squares slope through the origin of loss against deficit, floored at 0. Without
    swing runs MAC is 0 and :attr:`FitReport.deficit_measured` is False;
  * **goodness of fit**: R² of the fitted curve over the measurements, the RMS residual as
    a share of standalone throughput, and the leave-one-out interpolation error (each
    interior measurement predicted by the curve fitted without it, worst case as a share of
    standalone): the error of the curve *between* its points, which is what the scheduler
    reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel.profile import JobProfile

FloatArray = npt.NDArray[np.float64]

DEFAULT_FULL_SPEED_FRACTION = 0.95
"""requiredMemoryGiB: the memory reaching this share of standalone throughput."""

MAX_CURVE_POINTS = 64
"""The API's limit on memoryCurve points."""


@dataclass(frozen=True)
class Measurement:
    """One engine run at a fixed KV-cache budget."""

    kv_gib: float
    """KV-cache budget given to the engine, GiB per GPU."""
    memory_gib: float
    """GPU memory per GPU the job held: fixed footprint plus ``kv_gib``."""
    output_tokens: float
    """Output tokens the run produced (whole job)."""
    seconds: float
    """Wall seconds the run took."""

    def __post_init__(self) -> None:
        if not (self.kv_gib > 0 and self.memory_gib >= self.kv_gib):
            raise ValueError("kv_gib must be > 0 and memory_gib >= kv_gib")
        if self.output_tokens < 0 or not self.seconds > 0:
            raise ValueError("output_tokens must be >= 0 and seconds > 0")

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.seconds


@dataclass(frozen=True)
class GpuTime:
    """The agent's accounting of one run on a shared GPU (docs/profiling.md, "Tokens per
    offline GPU-second")."""

    wall_seconds: float
    """Seconds of the run that the agent's reports covered."""
    offline_seconds: float
    """Of those, the seconds the run's offline work was allowed to run (gate open)."""

    def __post_init__(self) -> None:
        if not (0 <= self.offline_seconds <= self.wall_seconds * (1 + 1e-9)):
            raise ValueError("need 0 <= offline_seconds <= wall_seconds")

    @property
    def offline_share(self) -> float | None:
        """``offline_seconds / wall_seconds``, or None when nothing was covered."""
        if self.wall_seconds <= 0:
            return None
        return min(1.0, self.offline_seconds / self.wall_seconds)

    def plus(self, wall_seconds: float, offline_seconds: float) -> GpuTime:
        """This accounting with one more covered stretch added."""
        return GpuTime(self.wall_seconds + wall_seconds, self.offline_seconds + offline_seconds)


NO_GPU_TIME = GpuTime(0.0, 0.0)


def per_offline_second(run: Measurement, gpu_time: GpuTime) -> Measurement:
    """``run`` in tokens per offline GPU-second: its seconds scaled by the share of the
    covered time its gate was open. Unchanged when nothing was covered (then its rate is a
    lower bound); ValueError when the gate never opened (the run cannot have progressed)."""
    share = gpu_time.offline_share
    if share is None:
        return run
    if share <= 0:
        raise ValueError(
            f"the agent accounts no offline GPU time over {gpu_time.wall_seconds:.3g} s "
            f"of the run at {run.kv_gib:.3g} GiB KV"
        )
    return Measurement(run.kv_gib, run.memory_gib, run.output_tokens, run.seconds * share)


@dataclass(frozen=True)
class SwingMeasurement:
    """One engine run whose KV budget dropped to ``low_gib`` for ``low_fraction`` of it."""

    high_memory_gib: float
    low_memory_gib: float
    low_fraction: float
    tokens_per_second: float

    def __post_init__(self) -> None:
        if not 0 < self.low_memory_gib < self.high_memory_gib:
            raise ValueError("swing: 0 < low < high")
        if not 0 < self.low_fraction < 1 or self.tokens_per_second < 0:
            raise ValueError("swing: low_fraction in (0, 1), tokens_per_second >= 0")


@dataclass(frozen=True)
class FitReport:
    """The fitted profile and how well it fits."""

    profile: JobProfile
    r_squared: float
    """1 - SS_res/SS_tot of the fitted curve over the measurements (1.0 when SS_tot is 0)."""
    rms_relative: float
    """RMS residual / standalone tokens/s."""
    loo_max_relative: float
    """Worst leave-one-out interpolation error of an interior point / standalone tokens/s
    (0.0 with fewer than three distinct memory points)."""
    deficit_measured: bool
    """Whether memoryDeficitCoefficient comes from swing runs (else it is 0)."""
    measurements: tuple[Measurement, ...]


def initial_budgets(kv_min_gib: float, kv_max_gib: float, points: int) -> tuple[float, ...]:
    """``points`` KV budgets over ``[kv_min_gib, kv_max_gib]``, both included, spaced
    geometrically: a batch engine's curve rises fastest at small budgets (each GiB adds a
    larger share of the batch there), so points are denser where it bends."""
    if not 0 < kv_min_gib < kv_max_gib:
        raise ValueError("need 0 < kv_min_gib < kv_max_gib")
    if points < 2:
        raise ValueError("need at least two budgets")
    return tuple(float(v) for v in np.geomspace(kv_min_gib, kv_max_gib, points))


def next_budget(measured: Sequence[Measurement], min_gap_gib: float = 0.0) -> float | None:
    """The next KV budget to run: where the curve bends most, or None when nothing is left.

    Over consecutive triples of measured points (by budget) the bend is the area of their
    triangle in (GiB, tokens/s): large where the slope changes over a wide interval. The new
    budget is the midpoint of the wider side of the largest one; intervals narrower than
    ``2·min_gap_gib`` are not split.
    """
    pts = sorted({m.kv_gib: m.tokens_per_second for m in measured}.items())
    if len(pts) < 3:
        return None
    best: tuple[float, float] | None = None
    for (x0, y0), (x1, y1), (x2, y2) in zip(pts, pts[1:], pts[2:], strict=False):
        area = abs((x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0)) / 2.0
        lo, hi = (x0, x1) if x1 - x0 >= x2 - x1 else (x1, x2)
        if hi - lo < 2.0 * min_gap_gib or area <= 0.0:
            continue
        if best is None or area > best[0]:
            best = (area, (lo + hi) / 2.0)
    return None if best is None else best[1]


def measure(
    run: Callable[[float], Measurement],
    kv_min_gib: float,
    kv_max_gib: float,
    points: int,
    refine: int = 0,
    min_gap_gib: float = 0.0,
) -> list[Measurement]:
    """Run the engine at ``points`` initial budgets, then at up to ``refine`` chosen ones."""
    out = [run(kv) for kv in initial_budgets(kv_min_gib, kv_max_gib, points)]
    for _ in range(refine):
        kv = next_budget(out, min_gap_gib)
        if kv is None:
            break
        out.append(run(kv))
    return out


def isotonic(y: FloatArray, w: FloatArray) -> FloatArray:
    """Weighted least-squares non-decreasing fit of ``y`` (pool adjacent violators)."""
    values: list[float] = []
    weights: list[float] = []
    counts: list[int] = []
    for yi, wi in zip(y.tolist(), w.tolist(), strict=True):
        values.append(yi)
        weights.append(wi)
        counts.append(1)
        while len(values) > 1 and values[-2] > values[-1]:
            v1, w1, c1 = values.pop(), weights.pop(), counts.pop()
            total = weights[-1] + w1
            values[-1] = (values[-1] * weights[-1] + v1 * w1) / total
            weights[-1] = total
            counts[-1] += c1
    return np.repeat(np.asarray(values, dtype=np.float64), counts)


def _curve(measured: Sequence[Measurement]) -> tuple[FloatArray, FloatArray]:
    """The isotonic curve over distinct memory values (runs at one memory pooled)."""
    mem = np.asarray([m.memory_gib for m in measured], dtype=np.float64)
    tps = np.asarray([m.tokens_per_second for m in measured], dtype=np.float64)
    secs = np.asarray([m.seconds for m in measured], dtype=np.float64)
    xs, inverse = np.unique(mem, return_inverse=True)
    w = np.asarray(np.bincount(inverse, weights=secs), dtype=np.float64)
    y = np.asarray(np.bincount(inverse, weights=secs * tps), dtype=np.float64) / w
    return xs, isotonic(y, w)


def _required_memory(xs: FloatArray, ys: FloatArray, fraction: float) -> float:
    target = fraction * float(ys[-1])
    i = int(np.argmax(ys >= target))
    if i == 0:
        return float(xs[0])
    x0, x1, y0, y1 = float(xs[i - 1]), float(xs[i]), float(ys[i - 1]), float(ys[i])
    return x0 + (x1 - x0) * (target - y0) / (y1 - y0)


def fit_profile(
    measured: Sequence[Measurement],
    swings: Sequence[SwingMeasurement] = (),
    full_speed_fraction: float = DEFAULT_FULL_SPEED_FRACTION,
) -> FitReport:
    """Fit a :class:`JobProfile` to runs at fixed budgets (and swing runs, for MAC)."""
    if not 0 < full_speed_fraction <= 1:
        raise ValueError("full_speed_fraction must be in (0, 1]")
    xs, ys = _curve(measured)
    if xs.size < 2:
        raise ValueError("need runs at two or more distinct memory budgets")
    if xs.size > MAX_CURVE_POINTS:
        raise ValueError(f"at most {MAX_CURVE_POINTS} distinct memory budgets")
    standalone = float(ys[-1])
    if standalone <= 0:
        raise ValueError("no run produced any tokens")
    required = _required_memory(xs, ys, full_speed_fraction)
    static = JobProfile(
        standalone_tokens_per_second=standalone,
        required_memory_gib=required,
        curve_memory_gib=tuple(float(v) for v in xs),
        curve_tokens_per_second=tuple(float(v) for v in ys),
    )
    mac = _deficit_coefficient(static, swings)
    profile = JobProfile(
        standalone_tokens_per_second=standalone,
        required_memory_gib=required,
        curve_memory_gib=static.curve_memory_gib,
        curve_tokens_per_second=static.curve_tokens_per_second,
        memory_deficit_coefficient=mac,
    )
    obs = np.asarray([m.tokens_per_second for m in measured], dtype=np.float64)
    pred = profile.throughput_at([m.memory_gib for m in measured])
    ss_res = float(np.sum((obs - pred) ** 2))
    ss_tot = float(np.sum((obs - obs.mean()) ** 2))
    return FitReport(
        profile=profile,
        r_squared=1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0,
        rms_relative=float(np.sqrt(ss_res / obs.size)) / standalone,
        loo_max_relative=_leave_one_out(measured) / standalone,
        deficit_measured=bool(swings),
        measurements=tuple(measured),
    )


def _deficit_coefficient(profile: JobProfile, swings: Sequence[SwingMeasurement]) -> float:
    num = den = 0.0
    req = profile.required_memory_gib
    for s in swings:
        f = s.low_fraction
        hi, lo = (float(v) for v in profile.throughput_at([s.high_memory_gib, s.low_memory_gib]))
        loss = (1 - f) * hi + f * lo - s.tokens_per_second
        deficit = (1 - f) * max(0.0, req - s.high_memory_gib) + f * max(0.0, req - s.low_memory_gib)
        num += deficit * loss
        den += deficit * deficit
    return max(0.0, num / den) if den > 0 else 0.0


def _leave_one_out(measured: Sequence[Measurement]) -> float:
    """Worst |measured - interpolated without it| over interior distinct memory points."""
    mems = sorted({m.memory_gib for m in measured})
    worst = 0.0
    for x in mems[1:-1]:
        rest = [m for m in measured if m.memory_gib != x]
        xs, ys = _curve(rest)
        here = [m for m in measured if m.memory_gib == x]
        secs = sum(m.seconds for m in here)
        obs = sum(m.tokens_per_second * m.seconds for m in here) / secs
        worst = max(worst, abs(obs - float(np.interp(x, xs, ys))))
    return worst


def profile_document(report: FitReport, digits: int = 3) -> dict[str, object]:
    """The profile as ``spec.profile`` fields (camelCase), rounded to ``digits`` decimals.

    Rounding is monotone, so tokens/s stay non-decreasing; two budgets closer than the
    rounding step would collide, and that raises ValueError.
    """
    p = report.profile
    curve = [
        {"memoryGiB": round(m, digits), "tokensPerSecond": round(t, digits)}
        for m, t in zip(p.curve_memory_gib, p.curve_tokens_per_second, strict=True)
    ]
    if len({c["memoryGiB"] for c in curve}) != len(curve):
        raise ValueError("memory budgets closer than the rounding step")
    return {
        "standaloneTokensPerSecond": round(p.standalone_tokens_per_second, digits),
        "requiredMemoryGiB": round(p.required_memory_gib, digits),
        "memoryDeficitCoefficient": round(p.memory_deficit_coefficient, digits),
        "memoryCurve": curve,
    }


def fit_summary(report: FitReport) -> dict[str, object]:
    """Goodness of fit and how it was measured, for the profile's annotations and logs."""
    return {
        "runs": len(report.measurements),
        "rSquared": round(report.r_squared, 4),
        "rmsRelative": round(report.rms_relative, 4),
        "leaveOneOutMaxRelative": round(report.loo_max_relative, 4),
        "deficitMeasured": report.deficit_measured,
        "seconds": round(sum(m.seconds for m in report.measurements), 3),
    }
