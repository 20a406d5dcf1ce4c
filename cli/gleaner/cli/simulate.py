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

from gleaner.cli.common import echo_json, fail, format_option

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


WIDTH = 100
"""The terminal width the tables are laid out for (stacked, never truncated, at 100 columns)."""

DASH = "–"


def _pct(x: float) -> str:
    return f"{100 * x:+.2f}"


def _table(headers: list[str], rows: list[list[str]], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, h in enumerate(headers):
        if i == 0:
            table.add_column(h, justify="left", no_wrap=True)
        else:
            table.add_column(h, justify="right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(file=sys.stdout, width=WIDTH, highlight=False).print(table)


def _wrap(text: str, indent: str = "") -> str:
    import textwrap

    return textwrap.fill(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")


def _node_tables(results: dict[str, Any]) -> None:
    from gleaner.simulator.verdict import policy_text, target_value

    node = results["node"]
    sc = node["scenario"]
    runs = node["runs"]
    setting = f"{sc['gpus']} GPU, {sc['duration_s']:.0f} s, seed {results['seed']}"
    rows = []
    for name, r in runs.items():
        inc_t = r.get("ttft_increase", {})
        inc_p = r.get("tpot_increase", {})
        ref = r["compute"] == "online-only"
        rows.append(
            [
                name,
                f"{1000 * r['ttft_s']['mean']:.1f}",
                DASH if ref else _pct(inc_t.get("mean", 0.0)),
                DASH if ref else _pct(inc_t.get("p99", 0.0)),
                f"{1000 * r['tpot_s']['mean']:.2f}",
                DASH if ref else _pct(inc_p.get("mean", 0.0)),
                DASH if ref else _pct(inc_p.get("p99", 0.0)),
            ]
        )
    _table(
        [
            "policy",
            "TTFT mean (ms)",
            "ΔTTFT mean (%)",
            "ΔTTFT p99 (%)",
            "TPOT mean (ms)",
            "ΔTPOT mean (%)",
            "ΔTPOT p99 (%)",
        ],
        rows,
        f"Node level: online latency, Δ = increase over online-only ({setting})",
    )
    rows = []
    for name, r in runs.items():
        if r["compute"] == "online-only":
            rows.append([name, DASH, DASH, DASH, DASH, DASH])
            continue
        rows.append(
            [
                name,
                f"{r['preemptions_per_request']:.2f}",
                str(r["max_preemptions_per_request"]),
                f"{r['reclamations_per_minute']:.2f}",
                f"{r['offline_tokens_per_second']:,.0f}",
                f"{100 * r.get('offline_of_ideal', 0.0):.1f}",
            ]
        )
    _table(
        [
            "policy",
            "preemptions per request",
            "max preemptions per request",
            "reclamations per min",
            "offline tokens/s",
            "offline of idle-time ideal (%)",
        ],
        rows,
        "Node level: preemptions, memory and offline work",
    )
    click.echo("Policies:")
    for name, r in runs.items():
        click.echo(_wrap(f"{name}: {policy_text(name, r)}", "  "))
    targets = results.get("targets", [])
    for kind, title, ok, bad in (
        ("target", "Node-level targets (Gleaner)", "met", "NOT MET"),
        ("comparison", "Comparisons with baselines", "holds", "DOES NOT HOLD"),
    ):
        chosen = [t for t in targets if t.get("kind", "target") == kind]
        if not chosen:
            continue
        _table(
            ["measure", "value", "wanted", "result"],
            [
                [
                    t["name"],
                    target_value(t),
                    t["target"],
                    ok if t["met"] else bad,
                ]
                for t in chosen
            ],
            title,
        )
    sens = results.get("sensitivity")
    if sens:
        _table(
            ["cost term", "level", "ΔTTFT mean (%)", "ΔTPOT mean (%)", "offline tokens/s"],
            [
                [
                    r["term"],
                    r["level"],
                    _pct(r["ttft_increase"]),
                    _pct(r["tpot_increase"]),
                    f"{r['offline_tokens_per_second']:,.0f}",
                ]
                for r in sens
            ],
            "Sensitivity of gleaner to each cost term (same seed and requests)",
        )
    verdict = results.get("verdict", [])
    if verdict:
        click.echo("Verdict (node level):")
        for line in verdict:
            click.echo(_wrap(line, "  "))


def _print_tables(results: dict[str, Any]) -> None:
    from pathlib import PurePath

    if results.get("node") is not None:
        _node_tables(results)
    cluster = results.get("cluster")
    if cluster is not None:
        hours = float(cluster.get("config", {}).get("duration_h", 0.0))
        load = f"load of {PurePath(cluster['trace']).name}" if cluster.get("trace") else ""
        setting = ", ".join(
            x
            for x in (f"{cluster['gpus']} GPUs", f"{hours:g} h", load, f"seed {results['seed']}")
            if x
        )
        rows = []
        jobs = []
        for name, m in cluster["policies"].items():
            err = m["prediction_error"]
            rows.append(
                [
                    name,
                    f"{100 * m['online_utilization']:.1f}",
                    f"{100 * m['utilization_gain']:+.1f}",
                    f"{m['gpus_saved']:.1f}",
                    DASH if m["sla_attainment"] is None else f"{100 * m['sla_attainment']:.1f}",
                    str(m["evictions"]),
                    f"{100 * err['mean_abs']:.1f}" if err["placements"] else DASH,
                ]
            )
            jobs.append([name, ", ".join(f"{k} {v}" for k, v in sorted(m["phases"].items()))])
        _table(
            [
                "policy",
                "online util (%)",
                "harvest gain (pts)",
                "GPUs saved",
                "SLA windows met (%)",
                "evictions",
                "prediction error (pts)",
            ],
            rows,
            f"Cluster level ({setting})",
        )
        _table(["policy", "jobs at the end, by phase"], jobs, "Cluster level: OfflineJobs")
        _sizes_table(cluster["policies"])
        click.echo(
            _wrap(
                "Prediction error: the mean absolute difference between the predicted and the "
                "observed throughput, in points of the job's standalone throughput."
            )
        )
        verdict = results.get("cluster_verdict", [])
        if verdict:
            click.echo("Verdict (cluster level):")
            for line in verdict:
                click.echo(_wrap(line, "  "))


def _sizes_table(policies: dict[str, Any]) -> None:
    """SLA windows met per job size: what users of large jobs see, which the pooled
    figure (every job's windows counted alike) can hide."""
    by_policy = {
        name: {int(g): w for g, w in (m.get("sla_windows_by_gpus") or {}).items()}
        for name, m in policies.items()
    }
    sizes = sorted({g for rows in by_policy.values() for g in rows})
    if not sizes:
        return
    rows = []
    for name, by in by_policy.items():
        cells = [name]
        for g in sizes:
            w = by.get(g)
            cells.append(f"{100 * w['met'] / w['windows']:.1f}" if w and w["windows"] else DASH)
        rows.append(cells)
    _table(
        ["policy", *(f"{g}-GPU jobs (%)" for g in sizes)],
        rows,
        "Cluster level: SLA windows met by job size",
    )


def _with_requests(
    scenario: Any, path: Path | None, rate_scale: float | None, window: str | None
) -> Any:
    """The scenario with its node level replaying ``path`` (the CLI's --requests options)."""
    from gleaner.simulator.request_trace import RequestTraceConfig

    if scenario.node is None:
        fail(f"--requests needs a scenario with a 'node' section ({scenario.name} has none)")
    current = scenario.node.requests
    if path is None and current is None:
        fail("--rate-scale and --window need --requests (or a scenario with node.requests)")
    update: dict[str, Any] = {}
    if path is not None:
        if not path.is_file():
            fail(f"--requests {path}: no such file")
        update["path"] = str(path)
    if rate_scale is not None:
        update["rate_scale"] = rate_scale
    if window is not None:
        start, sep, length = window.partition(":")
        try:
            update["start_s"] = float(start) if start else 0.0
            update["duration_s"] = float(length) if sep and length else None
        except ValueError:
            fail(f"--window {window}: want START:SECONDS, e.g. 600:1200")
        if update["start_s"] < 0 or (update["duration_s"] or 1) <= 0:
            fail(f"--window {window}: START must be ≥ 0 and SECONDS > 0")
    base = current.model_dump() if current is not None else {}
    cfg = RequestTraceConfig.model_validate({**base, **update})
    node = scenario.node.model_copy(update={"requests": cfg})
    return scenario.model_copy(update={"node": node})


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
    help="Replay a trace file (CSV/Parquet, or DCGM metrics saved from Prometheus; "
    "docs/formats.md) as the cluster's online load.",
)
@click.option(
    "--write-trace",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the scenario cluster's online load (history and run) as a trace file "
    "(CSV, .csv.gz or .parquet; docs/formats.md) and exit without simulating.",
)
@click.option(
    "--requests",
    "requests_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Replay an online request trace at the node level: Azure LLM inference CSV, "
    "Mooncake JSONL or BurstGPT CSV (docs/simulator.md).",
)
@click.option(
    "--rate-scale",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="With --requests: multiply the request rate (2 halves the gaps).",
)
@click.option(
    "--window",
    default=None,
    metavar="START:SECONDS",
    help="With --requests: replay SECONDS of the trace from START seconds after its first "
    "request (trace time).",
)
@click.option(
    "--sensitivity",
    is_flag=True,
    help="Also re-run gleaner with each cost term off and ×4 and print the table.",
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
    requests_file: Path | None,
    rate_scale: float | None,
    window: str | None,
    sensitivity: bool,
    quick: bool,
    progress: bool,
    serve: bool,
    port: int,
) -> None:
    """Simulate a harvested GPU node and cluster; print a summary, write an HTML report."""
    from gleaner.simulator.request_trace import TraceError
    from gleaner.simulator.runner import run_scenario
    from gleaner.simulator.scenario import ScenarioError, load_scenario
    from gleaner.simulator.scenario import quick as make_quick

    try:
        scenario = load_scenario(scenario_name)
    except ScenarioError as exc:
        fail(str(exc))
    if requests_file is not None or rate_scale is not None or window is not None:
        scenario = _with_requests(scenario, requests_file, rate_scale, window)
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
            scenario,
            seed=seed,
            trace=trace,
            progress=_progress_factory(progress),
            sensitivity=sensitivity,
        )
    except TraceError as exc:
        fail(f"--requests: {exc}")
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
