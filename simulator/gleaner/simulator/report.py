"""The HTML report of a simulation: plotly figures over ``results.json``, one offline file.

Contract. :func:`render_report` turns the results dict of ``gleaner.simulator.runner`` into one
self-contained HTML page (plotly.js is embedded once, so the file opens without a network):
a summary of the targets, node-level utilization and memory over time, TTFT/TPOT CDFs per
run, a per-policy comparison, and the cluster-level utilization and policy comparison.
The page is generated output (``out/``), never committed.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots


def _div(fig: go.Figure) -> str:
    fig.update_layout(template="plotly_white", margin={"l": 60, "r": 20, "t": 50, "b": 50})
    out: str = fig.to_html(full_html=False, include_plotlyjs=False)
    return out


def _node_figures(node: dict[str, Any]) -> list[str]:
    runs = node["runs"]
    figs: list[str] = []
    g = runs.get("gleaner") or next(iter(runs.values()))
    s = g["series"]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=s["t"], y=s["busy"], name="online busy", mode="lines"))
    fig.add_trace(go.Scatter(x=s["t"], y=s["offline_run"], name="offline running", mode="lines"))
    fig.add_trace(
        go.Scatter(x=s["t"], y=s["online_kv_gib"], name="online KV GiB", mode="lines"),
        secondary_y=True,
    )
    fig.add_trace(
        go.Scatter(x=s["t"], y=s["offline_memory_gib"], name="offline memory GiB", mode="lines"),
        secondary_y=True,
    )
    fig.update_layout(title="Node level (gleaner run, GPU 0): utilization and memory over time")
    fig.update_xaxes(title_text="time (s)")
    fig.update_yaxes(title_text="fraction of each second", secondary_y=False)
    fig.update_yaxes(title_text="GiB", secondary_y=True)
    figs.append(_div(fig))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT CDF", "TPOT CDF"))
    qs = [i / 100 for i in range(101)]
    for name, run in runs.items():
        fig.add_trace(
            go.Scatter(
                x=[v * 1000 for v in run["ttft_cdf_s"]],
                y=qs,
                name=name,
                mode="lines",
                legendgroup=name,
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=[v * 1000 for v in run["tpot_cdf_s"]],
                y=qs,
                name=name,
                mode="lines",
                legendgroup=name,
                showlegend=False,
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="ms", type="log")
    fig.update_layout(title="Online latency CDFs per run")
    figs.append(_div(fig))
    names = [n for n in runs if n != "online-only"]
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=(
            "TTFT / TPOT increase over online-only (mean, %)",
            "preemptions per online request",
            "offline throughput / (gate + no reclamation)",
        ),
    )
    fig.add_trace(
        go.Bar(x=names, y=[100 * runs[n]["ttft_increase"]["mean"] for n in names], name="TTFT"),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(x=names, y=[100 * runs[n]["tpot_increase"]["mean"] for n in names], name="TPOT"),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            x=names,
            y=[runs[n]["preemptions_per_request"] for n in names],
            name="preemptions/request",
        ),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Bar(x=names, y=[runs[n]["offline_normalized"] for n in names], name="normalized"),
        row=1,
        col=3,
    )
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title="Per-policy comparison (node level)", barmode="group")
    figs.append(_div(fig))
    return figs


def _cluster_figures(cluster: dict[str, Any]) -> list[str]:
    pols = cluster["policies"]
    figs: list[str] = []
    fig = go.Figure()
    first = next(iter(pols.values()))
    fig.add_trace(
        go.Scatter(
            x=first["series"]["t_h"],
            y=first["series"]["online_busy"],
            name="online busy",
            mode="lines",
        )
    )
    for name, m in pols.items():
        if name == "no-harvest":
            continue
        total = [
            a + b
            for a, b in zip(m["series"]["online_busy"], m["series"]["offline_used"], strict=True)
        ]
        fig.add_trace(
            go.Scatter(
                x=m["series"]["t_h"], y=total, name=f"online + offline ({name})", mode="lines"
            )
        )
    fig.update_layout(
        title=f"Cluster utilization over time ({cluster['gpus']} GPUs)",
        xaxis_title="hours",
        yaxis_title="mean GPU utilization",
    )
    figs.append(_div(fig))
    names = list(pols)
    fig = make_subplots(
        rows=1,
        cols=4,
        subplot_titles=("harvested utilization gain", "GPUs saved", "SLA attainment", "evictions"),
    )
    fig.add_trace(go.Bar(x=names, y=[pols[n]["utilization_gain"] for n in names]), row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=[pols[n]["gpus_saved"] for n in names]), row=1, col=2)
    fig.add_trace(go.Bar(x=names, y=[pols[n]["sla_attainment"] for n in names]), row=1, col=3)
    fig.add_trace(go.Bar(x=names, y=[pols[n]["evictions"] for n in names]), row=1, col=4)
    fig.update_layout(title="Per-policy comparison (cluster level)", showlegend=False)
    figs.append(_div(fig))
    return figs


def _targets_table(targets: list[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(t['name'])}</td><td>{t['value']:.4g}</td>"
        f"<td>{html.escape(t['target'])}</td><td class={'ok' if t['met'] else 'miss'}>"
        f"{'met' if t['met'] else 'NOT met'}</td></tr>"
        for t in targets
    )
    return f"<table><tr><th>target</th><th>value</th><th>wanted</th><th></th></tr>{rows}</table>"


def render_report(results: dict[str, Any]) -> str:
    """The report page (see the module docstring)."""
    parts: list[str] = []
    title = f"Gleaner simulation — {html.escape(str(results.get('scenario', '')))}"
    parts.append(f"<h1>{title}</h1><p>{html.escape(str(results.get('description', '')))}</p>")
    parts.append(f"<p>seed {results.get('seed')}</p>")
    if "targets" in results:
        parts.append("<h2>Node-level targets</h2>" + _targets_table(results["targets"]))
    if "node" in results:
        parts.append("<h2>Node level</h2>")
        parts.extend(_node_figures(results["node"]))
    if "cluster" in results:
        parts.append("<h2>Cluster level</h2>")
        parts.extend(_cluster_figures(results["cluster"]))
    body = "\n".join(parts)
    style = (
        "body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}"
        ".ok{color:#060}.miss{color:#a00;font-weight:bold}"
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{title}</title><style>{style}</style>"
        f"<script type='text/javascript'>{get_plotlyjs()}</script></head>"
        f"<body>{body}</body></html>"
    )
