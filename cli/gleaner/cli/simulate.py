"""``gleaner simulate``: the embedded default — a harvested node and cluster, simulated.

Thin shell over ``gleaner.simulator``: load the scenario (a shipped name or a YAML file), run it
with progress bars on stderr, print a summary (table or JSON), and with ``--out DIR`` write
DIR/results.json (everything behind the report), DIR/report.html (plotly, opens offline)
and DIR/dashboard.json (the dashboard's snapshot of the simulated cluster). ``--write-trace
FILE`` only writes the scenario cluster's online load as a trace file (docs/formats.md).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gleaner.cli.common import echo_json, echo_table, fail, format_option

if TYPE_CHECKING:
    from gleaner.simulator.scenario import Scenario

_BULKY = ("series", "ttft_cdf_s", "tpot_cdf_s", "scenario_config")


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in _BULKY}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _progress_factory(enabled: bool) -> Callable[[str, int], Callable[[int], None]]:
    from tqdm import tqdm

    bars: list[Any] = []

    def factory(desc: str, total: int) -> Callable[[int], None]:
        for bar in bars:
            bar.close()
        bar = tqdm(total=total, desc=desc, file=sys.stderr, disable=not enabled, leave=True)
        bars.append(bar)

        def tick(n: int) -> None:
            bar.update(n)
            if bar.n >= total:
                bar.close()

        return tick

    return factory


def _pct(x: float) -> str:
    return f"{100 * x:+.2f}%"


def _print_tables(results: dict[str, Any]) -> None:
    node = results.get("node")
    if node is not None:
        rows = []
        for name, r in node["runs"].items():
            inc_t = r.get("ttft_increase", {})
            inc_p = r.get("tpot_increase", {})
            rows.append(
                [
                    name,
                    f"{1000 * r['ttft_s']['mean']:.1f}",
                    _pct(inc_t.get("mean", 0.0)),
                    _pct(inc_t.get("p99", 0.0)),
                    f"{1000 * r['tpot_s']['mean']:.2f}",
                    _pct(inc_p.get("mean", 0.0)),
                    _pct(inc_p.get("p99", 0.0)),
                    f"{r['preemptions_per_request']:.2f} (max {r['max_preemptions_per_request']})",
                    f"{r['reclamations_per_minute']:.2f}",
                    f"{r['offline_normalized']:.3f}",
                ]
            )
        echo_table(
            [
                "run",
                "TTFT ms",
                "ΔTTFT mean",
                "ΔTTFT p99",
                "TPOT ms",
                "ΔTPOT mean",
                "ΔTPOT p99",
                "preempt/req",
                "reclaim/min",
                "offline/bound",
            ],
            rows,
            title=f"Node level ({node['scenario']['gpus']} GPU, "
            f"{node['scenario']['duration_s']:.0f} s, seed {results['seed']})",
        )
        targets = results.get("targets", [])
        if targets:
            echo_table(
                ["target", "value", "wanted", "result"],
                [
                    [t["name"], f"{t['value']:.4g}", t["target"], "met" if t["met"] else "NOT MET"]
                    for t in targets
                ],
                title="Node-level targets (docs/simulator.md)",
            )
    cluster = results.get("cluster")
    if cluster is not None:
        rows = []
        for name, m in cluster["policies"].items():
            err = m["prediction_error"]
            rows.append(
                [
                    name,
                    f"{100 * m['online_utilization']:.1f}%",
                    f"{100 * m['utilization_gain']:+.1f} pts",
                    f"{m['gpus_saved']:.1f}",
                    "-" if m["sla_attainment"] is None else f"{100 * m['sla_attainment']:.1f}%",
                    m["evictions"],
                    f"{err['mean_abs']:.3f}" if err["placements"] else "-",
                    " ".join(f"{k}={v}" for k, v in sorted(m["phases"].items())),
                ]
            )
        echo_table(
            [
                "policy",
                "online util",
                "harvest gain",
                "GPUs saved",
                "SLA windows met",
                "evictions",
                "pred. error",
                "jobs",
            ],
            rows,
            title=f"Cluster level ({cluster['gpus']} GPUs)",
        )


def _write_trace(scenario: Scenario, seed: int | None, path: Path) -> None:
    """``--write-trace``: the cluster's online load only, no simulation."""
    from gleaner.simulator.tracefile import cluster_trace, write_trace

    if scenario.cluster is None:
        fail(f"--write-trace needs a scenario with a 'cluster' section ({scenario.name} has none)")
    frame = cluster_trace(scenario.cluster, scenario.seed if seed is None else seed)
    try:
        write_trace(frame, path)
    except OSError as exc:
        fail(f"--write-trace {path}: {exc.strerror or exc}")
    nodes = frame["node"].nunique()
    click.echo(f"wrote {path}: {len(frame)} rows, {nodes} nodes", err=True)


@click.command(name="simulate")
@click.option(
    "--scenario",
    "scenario_name",
    default="default",
    show_default=True,
    help="A shipped scenario name or a scenario YAML file.",
)
@click.option("--seed", type=int, default=None, help="Random seed (default: the scenario's).")
@format_option("table", "json")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write results.json, report.html and dashboard.json here.",
)
@click.option(
    "--trace",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Replay a trace file (CSV/Parquet, docs/formats.md) as the cluster's online load.",
)
@click.option(
    "--write-trace",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the scenario cluster's online load (history and run) as a trace file "
    "(CSV, .csv.gz or .parquet; docs/formats.md) and exit without simulating.",
)
@click.option("--quick", is_flag=True, help="A reduced run (smoke tests, CI).")
@click.option("--progress/--no-progress", default=True, help="Progress bars on stderr.")
@click.option(
    "--serve",
    is_flag=True,
    help="After the run, serve the dashboard on the simulated cluster (Ctrl-C to stop); "
    "implies --out out unless --out is given.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8080,
    show_default=True,
    help="Dashboard port for --serve (listens on 127.0.0.1).",
)
def command(
    scenario_name: str,
    seed: int | None,
    output_format: str,
    out_dir: Path | None,
    trace: Path | None,
    write_trace: Path | None,
    quick: bool,
    progress: bool,
    serve: bool,
    port: int,
) -> None:
    """Simulate a harvested GPU node and cluster; print a summary, write an HTML report."""
    from gleaner.simulator.runner import run_scenario
    from gleaner.simulator.scenario import ScenarioError, load_scenario
    from gleaner.simulator.scenario import quick as make_quick

    try:
        scenario = load_scenario(scenario_name)
    except ScenarioError as exc:
        fail(str(exc))
    if quick:
        scenario = make_quick(scenario)
    if write_trace is not None:
        _write_trace(scenario, seed, write_trace)
        return
    if trace is not None:
        if not trace.is_file():
            fail(f"--trace {trace}: no such file")
        if scenario.cluster is None:
            fail(f"--trace needs a scenario with a 'cluster' section ({scenario.name} has none)")
    if serve and scenario.cluster is None:
        fail(f"--serve needs a scenario with a 'cluster' section ({scenario.name} has none)")
    if serve and out_dir is None:
        out_dir = Path("out")
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        fail(f"--out {out_dir}: not a directory")
    try:
        output = run_scenario(
            scenario, seed=seed, trace=trace, progress=_progress_factory(progress)
        )
    except (ValueError, OSError) as exc:
        if trace is None:
            raise
        fail(f"--trace {trace}: {exc}")
    results = output.results
    if out_dir is not None:
        from gleaner.simulator.records import snapshot
        from gleaner.simulator.report import render_report
        from gleaner.simulator.snapshot import write_dashboard_record

        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "results.json").write_text(json.dumps(results), encoding="utf-8")
        (out_dir / "report.html").write_text(render_report(results), encoding="utf-8")
        if output.cluster_raw is not None:
            write_dashboard_record(
                out_dir / "dashboard.json", snapshot(output.cluster_raw, results)
            )
    if output_format == "json":
        echo_json(_strip(results))
    else:
        _print_tables(results)
        if out_dir is not None:
            click.echo(f"wrote {out_dir / 'report.html'}, results.json, dashboard.json")
    if serve and out_dir is not None:
        from gleaner.cli.dashboard import serve_snapshot

        serve_snapshot(out_dir / "dashboard.json", port=port)
