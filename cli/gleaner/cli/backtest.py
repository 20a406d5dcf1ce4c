"""``gleaner backtest``: would the scheduler's placements have met their SLA on held-out time?

A thin shell around ``gleaner.scheduler.backtest`` (docs/scheduler.md, "Backtesting"). It
reads a trace file (the format of ``gleaner place --trace``) and OfflineJob manifests (as
``gleaner place --jobs``), then at rolling origins (``--every``, after ``--min-history``)
places the whole queue on an empty cluster from the history before the origin only (the
time-of-day forecast of ``gleaner.perfmodel.diurnal`` over the horizon, or with
``--forecast trailing`` the trailing ``--window``), judges each placement on the next
``--horizon`` of the trace, and lets an oracle place the queue from the horizon itself.
It prints one row per origin, the totals (attainment: placements that met their SLA;
placements; the oracle's), and a verdict line against the targets (99% attainment, 80% of
the oracle's placements). Bad input prints one ``error: ...`` line and exits 2.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gleaner.cli.common import echo_json, echo_table, fail, format_option

if TYPE_CHECKING:
    import pandas as pd

    from gleaner.perfmodel import JobProfile, NodeSummary
    from gleaner.perfmodel.diurnal import DiurnalProfile


def _seconds(text: str, flag: str) -> float:
    from gleaner.api.units import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        fail(f"{flag}: {exc}")


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
    """Each node's time-of-day profile, folded hour by hour as the origins advance."""

    def __init__(self, frame: pd.DataFrame, first: float, step_gib: float) -> None:
        self.frame = frame
        self.step_gib = step_gib
        self.next_hour = float(first // 3600 * 3600)
        self.first = first
        self.profiles: dict[str, DiurnalProfile] = {}

    def up_to(self, origin: float) -> dict[str, DiurnalProfile]:
        from gleaner.perfmodel.diurnal import DiurnalProfile

        while self.next_hour + 3600 <= origin:
            lo = max(self.first, self.next_hour)
            for name, summary in _summaries(
                self.frame, lo, self.next_hour + 3600, self.step_gib
            ).items():
                profile = self.profiles.get(name) or DiurnalProfile(name)
                at = datetime.fromtimestamp(self.next_hour, UTC)
                self.profiles[name] = profile.fold_at(at, summary)
            self.next_hour += 3600
        return self.profiles


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
    type=click.Choice(["diurnal", "trailing"]),
    default="diurnal",
    show_default=True,
    help="Predict from the time-of-day forecast over the horizon, or the trailing --window.",
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
    window: str,
    step_gib: float,
    output_format: str,
) -> None:
    """Backtest placements on held-out time of a trace, against an oracle."""
    from gleaner.cli.place import load_manifests, resolve_profile, snapshot_of
    from gleaner.perfmodel import JobProfile, TraceFormatError, read_trace_frame
    from gleaner.perfmodel import validate_trace_frame as validate
    from gleaner.perfmodel.diurnal import forecast as diurnal_forecast
    from gleaner.scheduler import JobRequest, SchedulerConfig, decide
    from gleaner.scheduler.backtest import (
        BacktestResult,
        OriginResult,
        judge,
        rolling_origins,
        verdict,
    )

    every_s, horizon_s = _seconds(every, "--every"), _seconds(horizon, "--horizon")
    history_s, window_s = _seconds(min_history, "--min-history"), _seconds(window, "--window")
    manifests = load_manifests(list(job_paths))
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
    try:
        frame = validate(read_trace_frame(trace_path))
    except (TraceFormatError, ValueError) as exc:
        fail(f"--trace: {exc}")
    first, last = float(frame["timestamp"].min()), float(frame["timestamp"].max())
    origins = rolling_origins(first, last, every_s, horizon_s, history_s)
    if not origins:
        fail(
            f"the trace covers {(last - first) / 3600:.1f} h: too short for --min-history "
            f"{min_history} and --horizon {horizon}"
        )
    config = SchedulerConfig()
    hours = _Hours(frame, first, step_gib)
    results: list[OriginResult] = []
    for origin in origins:
        if forecast == "diurnal":
            recent = _summaries(frame, origin - 3600.0, origin, step_gib)
            by_node = hours.up_to(origin)
            at = datetime.fromtimestamp(origin, UTC)
            nodes = {
                name: diurnal_forecast(by_node[name], s, at, horizon_s) if name in by_node else s
                for name, s in recent.items()
            }
        else:
            nodes = _summaries(frame, origin - window_s, origin, step_gib)
        ahead = _summaries(frame, origin, origin + horizon_s, step_gib)
        placed = decide(snapshot_of(requests, nodes), config).placements if nodes else []
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
    result = BacktestResult(tuple(results))
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
    click.echo(line)
