"""Backtesting the scheduler on held-out time: rolling origins, judged on the horizon (pure).

Contract (docs/scheduler.md, "Backtesting"). A user who has a trace of their own cluster
asks: had Gleaner placed my jobs from the history it had, how often would they have got
their SLA in the hours that followed? :func:`rolling_origins` picks the decision times:
every ``every`` seconds from ``first + min_history`` while a whole ``horizon`` of trace
follows. At each origin the caller places the queue from the summaries *before* the origin
(``gleaner.scheduler.decide``), then judges every placement with :func:`judge` on the
summary of the horizon itself: the performance model evaluated on what actually happened
on the chosen GPUs, as the operator's SLA monitor observes a window from the NodeTrace.
An *oracle* places the same queue from the horizon's own summary (it sees the future):
how much it places is what a perfect forecast would have allowed.

:class:`BacktestResult` adds the origins up; :func:`verdict` words the one-line answer
against the targets (attainment >= 99% of placements meeting their SLA, and placing >= 80%
of what the oracle places).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gleaner.perfmodel import JobProfile, NodeSummary, predict
from gleaner.perfmodel.admission import SLA_EPS, reaches_sla

TARGET_ATTAINMENT = 0.99
"""Share of placements that must meet their SLA on their horizon."""
TARGET_ORACLE_SHARE = 0.8
"""Share of the oracle's placements the scheduler must place."""


def rolling_origins(
    first: float, last: float, every: float, horizon: float, min_history: float
) -> list[float]:
    """Decision times in [first + min_history, last - horizon], ``every`` seconds apart."""
    if not every > 0 or not horizon > 0 or min_history < 0:
        raise ValueError("every and horizon must be > 0 and min_history >= 0")
    out: list[float] = []
    t = first + min_history
    while t + horizon <= last + 1e-9:
        out.append(t)
        t += every
    return out


@dataclass(frozen=True)
class Judged:
    """One placement judged on its horizon."""

    job: str
    node: str
    gpus: tuple[int, ...]
    sla: float
    predicted: float
    """The (bias-corrected) fraction the scheduler admitted it with."""
    realized: float | None
    """The model on the horizon's summary of the same GPUs (None: the node has no horizon)."""

    @property
    def met(self) -> bool:
        return self.realized is not None and bool(reaches_sla(self.realized, self.sla))


def judge(
    job: str,
    profile: JobProfile,
    sla: float,
    node: str,
    gpus: Sequence[int],
    predicted: float,
    horizon: dict[str, NodeSummary],
) -> Judged:
    """``job`` placed on ``gpus`` of ``node``, judged on ``horizon`` (see the module docstring)."""
    summary = horizon.get(node)
    realized: float | None = None
    if summary is not None and summary.window_seconds > 0:
        realized = predict(profile, sla, summary, list(gpus)).throughput_fraction
    return Judged(job, node, tuple(int(g) for g in gpus), sla, predicted, realized)


@dataclass(frozen=True)
class OriginResult:
    """What happened at one origin."""

    origin: float
    judged: tuple[Judged, ...]
    oracle_placed: int

    @property
    def placed(self) -> int:
        return len(self.judged)

    @property
    def met(self) -> int:
        return sum(1 for j in self.judged if j.met)


@dataclass(frozen=True)
class BacktestResult:
    """Every origin of a backtest, and the totals the verdict reads."""

    origins: tuple[OriginResult, ...]

    @property
    def placed(self) -> int:
        return sum(o.placed for o in self.origins)

    @property
    def met(self) -> int:
        return sum(o.met for o in self.origins)

    @property
    def oracle_placed(self) -> int:
        return sum(o.oracle_placed for o in self.origins)

    @property
    def attainment(self) -> float | None:
        """Share of placements that met their SLA on their horizon (None: none placed)."""
        return None if self.placed == 0 else self.met / self.placed

    @property
    def oracle_share(self) -> float | None:
        """Placements / the oracle's (None: the oracle placed nothing)."""
        return None if self.oracle_placed == 0 else self.placed / self.oracle_placed


@dataclass(frozen=True)
class Group:
    """Placements of one group of a :func:`breakdown`: how many, and how many met."""

    key: int
    placed: int
    met: int

    @property
    def missed_share(self) -> float:
        return 0.0 if self.placed == 0 else 1.0 - self.met / self.placed


def _grouped(result: BacktestResult, key: Callable[[float, Judged], int]) -> list[Group]:
    """The placements grouped by ``key(origin, placement)``, in key order."""
    counts: dict[int, list[int]] = {}
    for o in result.origins:
        for j in o.judged:
            c = counts.setdefault(key(o.origin, j), [0, 0])
            c[0] += 1
            c[1] += int(j.met)
    return [Group(k, c[0], c[1]) for k, c in sorted(counts.items())]


def by_hour(result: BacktestResult) -> list[Group]:
    """The placements grouped by the hour of the day (UTC) of their origin, in hour order."""
    return _grouped(result, lambda origin, _: int(origin // 3600) % 24)


def by_gpus(result: BacktestResult) -> list[Group]:
    """The placements grouped by their job's GPUs, smallest first: what the users of jobs
    of each size would see, which the pooled attainment can hide."""
    return _grouped(result, lambda _, j: len(j.gpus))


def by_margin(result: BacktestResult, step: float = 0.05, last: int = 6) -> list[Group]:
    """The placements grouped by their admission margin (predicted - SLA) in ``step``s:
    group ``k`` holds margins in [k * step, (k + 1) * step), group ``last`` all above."""
    if not step > 0 or last < 0:
        raise ValueError("step must be > 0 and last >= 0")
    return _grouped(
        result, lambda _, j: min(last, max(0, int((j.predicted - j.sla + SLA_EPS) // step)))
    )


def verdict(
    result: BacktestResult,
    target_attainment: float = TARGET_ATTAINMENT,
    target_oracle_share: float = TARGET_ORACLE_SHARE,
) -> str:
    """The one-line answer: PASS when both targets hold, else what fell short."""
    att, share = result.attainment, result.oracle_share
    if att is None:
        return "verdict: NO DATA (nothing was placed at any origin)"
    parts = [
        f"{100 * att:.1f}% of {result.placed} placements met their SLA "
        f"(target {100 * target_attainment:.0f}%)",
        "the oracle placed nothing"
        if share is None
        else f"placed {100 * share:.0f}% of the oracle's {result.oracle_placed} "
        f"(target {100 * target_oracle_share:.0f}%)",
    ]
    ok = att >= target_attainment and (share is None or share >= target_oracle_share)
    return f"verdict: {'PASS' if ok else 'FAIL'}: " + "; ".join(parts)


__all__ = [
    "TARGET_ATTAINMENT",
    "TARGET_ORACLE_SHARE",
    "BacktestResult",
    "Group",
    "Judged",
    "OriginResult",
    "by_gpus",
    "by_hour",
    "by_margin",
    "judge",
    "rolling_origins",
    "verdict",
]
