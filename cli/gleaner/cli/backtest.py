"""``gleaner backtest``: would the scheduler's placements have met their SLA on held-out time?

A thin shell around ``gleaner.scheduler.backtest`` (docs/scheduler.md, "Backtesting"). It
reads a trace file (the format of ``gleaner place --trace``) and OfflineJob manifests (as
``gleaner place --jobs``; :func:`load_queue`), then at rolling origins (``--every``, after
``--min-history``) places the whole queue on an empty cluster from the history before the
origin only, judges each placement on the next ``--horizon`` of the trace, and lets an
oracle place the queue from the horizon itself (:func:`run_backtest`, which
``python -m bench backtest`` calls too). What the queue is placed by (``--forecast``):

- ``worst-hours`` (default): the operator's admission rule, perfmodel's ``node_admission``
  over the horizon: each GPU at its busiest hour of the time-of-day forecast, its load
  scaled by the spread of past windows at ``--risk-target`` (a ``LoadSpread`` learned, as
  the operator learns it, from each default-SLA-window window of the history against what
  the node's hours forecast for it);
- ``diurnal``: the mean time-of-day forecast over the horizon (``node_forecast``);
- ``trailing``: the trailing ``--window`` (the paper's rule).

It prints one row per origin, the totals (attainment: placements that met their SLA;
placements; the oracle's; with jobs of several sizes, the share met per size), and a
verdict line against the targets (99% attainment, 80% of
the oracle's placements). Bad input prints one ``error: ...`` line and exits 2.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gleaner.api import DEFAULT_SLA_WINDOW
from gleaner.api.units import parse_duration
from gleaner.cli.common import echo_json, echo_table, fail, format_option, parse_seconds
from gleaner.perfmodel.admission import DEFAULT_RISK_TARGET

if TYPE_CHECKING:
    import pandas as pd

    from gleaner.perfmodel import JobProfile, NodeSummary
    from gleaner.perfmodel.diurnal import DiurnalProfile
    from gleaner.scheduler import JobRequest
    from gleaner.scheduler.backtest import BacktestResult


def _summaries(
    frame: pd.DataFrame, lo: float, hi: float, step_gib: float
) -> dict[str, NodeSummary]:
    """Per node, the summary of the samples in [lo, hi) (nodes without any are absent)."""
    from gleaner.perfmodel import summarize_samples

    ts = frame["timestamp"]
    part = frame[(ts >= lo) & (ts < hi)]
    if part.empty:
        return {}
    return summarize_samples(part, step_gib)


class _Hours:
    """Each node's time-of-day profile, folded hour by hour as the origins advance, and
    (with ``learn``) the load spread learned from it: before an hour is folded, each of its
    ``learn_window`` windows is compared with what the profile forecast for that hour
    (perfmodel's ``report_ratios``, as the operator learns from each report window). The
    hour's summary is then the merge of those windows (summaries are mergeable)."""

    def __init__(
        self,
        frame: pd.DataFrame,
        first: float,
        step_gib: float,
        learn_window: float,
        learn: bool = True,
    ) -> None:
        from gleaner.perfmodel.admission import LoadSpread

        self.frame = frame
        self.step_gib = step_gib
        self.learn_window = learn_window if learn else 3600.0
        self.learn = learn
        self.next_hour = float(first // 3600 * 3600)
        self.first = first
        self.profiles: dict[str, DiurnalProfile] = {}
        self.spread = LoadSpread()

    def _windows(self, lo: float, hi: float) -> list[dict[str, NodeSummary]]:
        """The summaries of [lo, hi) in ``learn_window`` parts (the last one shorter)."""
        ts = self.frame["timestamp"]
        hour = self.frame[(ts >= lo) & (ts < hi)]
        out: list[dict[str, NodeSummary]] = []
        w0 = lo
        while w0 < hi - 1e-9:
            out.append(_summaries(hour, w0, min(hi, w0 + self.learn_window), self.step_gib))
            w0 += self.learn_window
        return out

    def up_to(self, origin: float) -> dict[str, DiurnalProfile]:
        from gleaner.perfmodel.diurnal import DiurnalProfile, report_ratios

        while self.next_hour + 3600 <= origin:
            windows = self._windows(max(self.first, self.next_hour), self.next_hour + 3600)
            merged: dict[str, NodeSummary] = {}
            for part in windows:
                for name, report in part.items():
                    known = self.profiles.get(name)
                    if self.learn and known is not None:
                        self.spread.add(name, report_ratios(known, report))
                    merged[name] = merged[name].merge(report) if name in merged else report
            at = datetime.fromtimestamp(self.next_hour, UTC)
            for name, summary in merged.items():
                profile = self.profiles.get(name) or DiurnalProfile(name)
                self.profiles[name] = profile.fold_at(at, summary)
            self.next_hour += 3600
        return self.profiles


DEFAULT_LEARN_WINDOW_S = parse_duration(DEFAULT_SLA_WINDOW)
"""The windows the load spread is learned from: the default SLA window."""

Queue = tuple[list["JobRequest"], dict[str, tuple["JobProfile", float]]]
"""The jobs in queue order, and each job's profile and throughput SLA by its key."""


def load_queue(job_paths: list[Path]) -> Queue:
    """The OfflineJobs of ``job_paths`` (files or directories, as ``gleaner place --jobs``)
    as the queue a backtest places; exits 2 on none or an unresolvable profile."""
    from gleaner.cli.place import load_manifests, resolve_profile
    from gleaner.perfmodel import JobProfile
    from gleaner.scheduler import JobRequest

    manifests = load_manifests(job_paths)
    if not manifests.jobs:
        fail(f"no OfflineJob found in {', '.join(str(p) for p in job_paths)}")
    requests: list[JobRequest] = []
    profiles: dict[str, tuple[JobProfile, float]] = {}
    for order, (key, job) in enumerate(manifests.jobs):
        profile = resolve_profile(job, manifests)
        if isinstance(profile, str):
            fail(f"{key}: {profile}")
        jp = JobProfile.from_api(profile)
        requests.append(JobRequest.from_offlinejob(job, jp, order))
        profiles[key] = (jp, job.spec.throughput_sla)
    return requests, profiles


def run_backtest(
    frame: pd.DataFrame,
    requests: list[JobRequest],
    profiles: dict[str, tuple[JobProfile, float]],
    *,
    every_s: float,
    horizon_s: float,
    min_history_s: float,
    forecast: str = "worst-hours",
    window_s: float = 6 * 3600.0,
    step_gib: float = 0.5,
    risk_target: float | None = DEFAULT_RISK_TARGET,
    learn_window_s: float = DEFAULT_LEARN_WINDOW_S,
    closed_loop: bool = False,
) -> BacktestResult:
    """The backtest of ``requests`` on a validated trace ``frame`` (the module docstring):
    at each rolling origin, the queue placed from the history before it and judged on the
    horizon after it, and the oracle's placements from the horizon itself.

    With ``closed_loop``, the operator's bias table (``BiasTable`` with the operator's
    ``BiasConfig``: the risk target on the throughput residuals under ``worst-hours``)
    learns, as the operator's SLA monitor feeds it, from every ``learn_window_s`` window of
    earlier placements that ended before the origin (observed: the model on what the trace
    shows for the placement's GPUs in that window; predicted: the raw admission
    prediction), and corrects later placements."""
    from gleaner.cli.place import snapshot_of
    from gleaner.perfmodel import predict
    from gleaner.perfmodel.hours import node_admission, node_forecast
    from gleaner.scheduler import BiasConfig, BiasTable, SchedulerConfig, decide
    from gleaner.scheduler.backtest import BacktestResult, OriginResult, judge, rolling_origins

    first, last = float(frame["timestamp"].min()), float(frame["timestamp"].max())
    origins = rolling_origins(first, last, every_s, horizon_s, min_history_s)
    config = SchedulerConfig()
    hours = _Hours(frame, first, step_gib, learn_window_s, learn=forecast == "worst-hours")
    results: list[OriginResult] = []
    classes = {r.key: r.job_class for r in requests}
    bias: BiasTable | None = None
    if closed_loop:
        bias = BiasTable(BiasConfig(risk_target=risk_target if forecast == "worst-hours" else None))
    pending: list[tuple[float, str, str, float, float]] = []
    for origin in origins:
        if bias is not None:
            for end, node, job_class, observed, raw in pending:
                if end <= origin:
                    bias.observe(node, job_class, observed, raw)
            pending = [o for o in pending if o[0] > origin]
        if forecast == "worst-hours":
            recent = _summaries(frame, origin - 3600.0, origin, step_gib)
            by_node = hours.up_to(origin)
            at = datetime.fromtimestamp(origin, UTC)
            nodes = {
                name: node_admission(
                    s, by_node[name], at, horizon_s, hours.spread.scale(name, risk_target)
                )
                if name in by_node
                else s
                for name, s in recent.items()
            }
        elif forecast == "diurnal":
            recent = _summaries(frame, origin - 3600.0, origin, step_gib)
            by_node = hours.up_to(origin)
            at = datetime.fromtimestamp(origin, UTC)
            nodes = {
                name: node_forecast(s, by_node[name], at, horizon_s) if name in by_node else s
                for name, s in recent.items()
            }
        else:
            nodes = _summaries(frame, origin - window_s, origin, step_gib)
        ahead = _summaries(frame, origin, origin + horizon_s, step_gib)
        snapshot = snapshot_of(requests, nodes, bias=bias)
        placed = decide(snapshot, config).placements if nodes else []
        if bias is not None and placed:
            w0 = origin
            while w0 < origin + horizon_s - 1e-9:
                w1 = min(origin + horizon_s, w0 + learn_window_s)
                part = _summaries(frame, w0, w1, step_gib)
                for p in placed:
                    if p.node in part:
                        profile, sla = profiles[p.job]
                        seen = predict(profile, sla, part[p.node], list(p.gpus))
                        raw = p.prediction.throughput_fraction
                        pending.append((w1, p.node, classes[p.job], seen.throughput_fraction, raw))
                w0 = w1
        oracle = decide(snapshot_of(requests, ahead), config).placements if ahead else []
        judged = tuple(
            judge(
                p.job,
                profiles[p.job][0],
                profiles[p.job][1],
                p.node,
                p.gpus,
                p.throughput_fraction,
                ahead,
            )
            for p in placed
        )
        results.append(OriginResult(origin, judged, len(oracle)))
    return BacktestResult(tuple(results))


@click.command(name="backtest")
@click.option(
    "--trace",
    "trace_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Trace file (CSV or Parquet, or DCGM metrics saved from Prometheus; "
    "docs/formats.md), as for gleaner place.",
)
@click.option(
    "--jobs",
    "job_paths",
    required=True,
    multiple=True,
    type=click.Path(path_type=Path),
    help="OfflineJob manifests: a file or a directory (repeatable).",
)
@click.option("--every", default="2h", show_default=True, help="Time between two origins.")
@click.option(
    "--horizon", default="2h", show_default=True, help="Held-out time each placement is judged on."
)
@click.option(
    "--min-history",
    default="2h",
    show_default=True,
    help="Trace before the first origin (history the first placements are decided from).",
)
@click.option(
    "--forecast",
    type=click.Choice(["worst-hours", "diurnal", "trailing"]),
    default="worst-hours",
    show_default=True,
    help="Place as the operator admits (each GPU's busiest hour of the horizon, its load "
    "scaled by the spread of past windows at --risk-target), by the mean time-of-day "
    "forecast over the horizon, or by the trailing --window (the paper's rule).",
)
@click.option(
    "--risk-target",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=DEFAULT_RISK_TARGET,
    show_default=True,
    help="With --forecast worst-hours: the probability a window's online load must stay "
    "under the admission forecast with.",
)
@click.option(
    "--closed-loop",
    is_flag=True,
    help="Also correct later placements by the observed/predicted ratios of earlier ones, "
    "as the operator's bias table does.",
)
@click.option(
    "--window", default="6h", show_default=True, help="The trailing window (--forecast trailing)."
)
@click.option(
    "--step-gib", default=0.5, show_default=True, type=float, help="Memory sketch step, GiB."
)
@format_option("table", "json")
def command(
    trace_path: Path,
    job_paths: tuple[Path, ...],
    every: str,
    horizon: str,
    min_history: str,
    forecast: str,
    risk_target: float,
    closed_loop: bool,
    window: str,
    step_gib: float,
    output_format: str,
) -> None:
    """Backtest placements on held-out time of a trace, against an oracle."""
    from gleaner.perfmodel import TraceFormatError, read_trace_frame
    from gleaner.perfmodel import validate_trace_frame as validate
    from gleaner.scheduler.backtest import by_gpus, rolling_origins, verdict

    every_s, horizon_s = parse_seconds(every, "--every"), parse_seconds(horizon, "--horizon")
    history_s = parse_seconds(min_history, "--min-history")
    window_s = parse_seconds(window, "--window")
    requests, profiles = load_queue(list(job_paths))
    try:
        frame = validate(read_trace_frame(trace_path))
    except (TraceFormatError, ValueError) as exc:
        fail(f"--trace: {exc}")
    first, last = float(frame["timestamp"].min()), float(frame["timestamp"].max())
    if not rolling_origins(first, last, every_s, horizon_s, history_s):
        fail(
            f"the trace covers {(last - first) / 3600:.1f} h: too short for --min-history "
            f"{min_history} and --horizon {horizon}"
        )
    result = run_backtest(
        frame,
        requests,
        profiles,
        every_s=every_s,
        horizon_s=horizon_s,
        min_history_s=history_s,
        forecast=forecast,
        window_s=window_s,
        step_gib=step_gib,
        risk_target=risk_target,
        closed_loop=closed_loop,
    )
    line = verdict(result)
    if output_format == "json":
        data: dict[str, Any] = {
            "origins": [
                {
                    "origin": datetime.fromtimestamp(o.origin, UTC).isoformat(),
                    "placed": o.placed,
                    "met": o.met,
                    "oracle_placed": o.oracle_placed,
                    "placements": [
                        {
                            "job": j.job,
                            "node": j.node,
                            "gpus": list(j.gpus),
                            "sla": j.sla,
                            "predicted": j.predicted,
                            "realized": j.realized,
                            "met": j.met,
                        }
                        for j in o.judged
                    ],
                }
                for o in result.origins
            ],
            "placed": result.placed,
            "met": result.met,
            "attainment": result.attainment,
            "oracle_placed": result.oracle_placed,
            "oracle_share": result.oracle_share,
            "by_gpus": [{"gpus": g.key, "placed": g.placed, "met": g.met} for g in by_gpus(result)],
            "verdict": line,
        }
        echo_json(data)
        return
    echo_table(
        ["origin (UTC)", "placed", "met SLA", "oracle placed"],
        [
            (
                datetime.fromtimestamp(o.origin, UTC).strftime("%Y-%m-%d %H:%M"),
                o.placed,
                o.met,
                o.oracle_placed,
            )
            for o in result.origins
        ],
        title=f"{len(result.origins)} origins, every {every}, each judged on the next {horizon}",
    )
    att = result.attainment
    click.echo(
        f"attainment: {'-' if att is None else f'{100 * att:.1f}%'} "
        f"({result.met} of {result.placed} placements met their SLA on their horizon)"
    )
    click.echo(f"placements: {result.placed}; oracle (sees the horizon): {result.oracle_placed}")
    sizes = by_gpus(result)
    if len(sizes) > 1:
        click.echo(
            "met by job size: "
            + ", ".join(
                f"{g.key}-GPU jobs {100 * g.met / g.placed:.1f}% of {g.placed}" for g in sizes
            )
        )
    click.echo(line)
