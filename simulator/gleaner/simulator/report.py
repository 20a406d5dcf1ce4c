"""The HTML report of a simulation: plotly figures over ``results.json``, one offline file.

Contract. :func:`render_report` turns the results dict of ``gleaner.simulator.runner`` into one
self-contained HTML page (plotly.js is embedded once, so the file opens without a network):
the verdict in words (``gleaner.simulator.verdict``), the Gleaner targets and the comparisons
with baselines (apart, each value in its unit), each policy explained in a sentence next to
its colour, the node timeline (busy fractions averaged into bins with a range slider to zoom,
memory below), TTFT/TPOT CDFs per run, a per-policy comparison, the preemption-cost break-even,
the sensitivity table when it was run, and the cluster-level utilization and policy comparison.
Every policy has one colour everywhere on the page (:func:`policy_colors`: no two policies
share one). The page is generated output (``out/``), never committed.
"""

from __future__ import annotations

import html
import math
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from gleaner.simulator.verdict import CLUSTER_POLICY_TEXT, pct, policy_text, target_value

KNOWN_COLORS: dict[str, str] = {
    "online-only": "#222222",
    "gleaner": "#0072B2",
    "gleaner-fifo": "#56B4E9",
    "iteration": "#D55E00",
    "gpreempt": "#E69F00",
    "uvm": "#CC79A7",
    "prism": "#009E73",
    "static": "#8C564B",
    "no-harvest": "#999999",
    "first-fit": "#B8860B",
    "no-multi-filter": "#6A3D9A",
}
"""Shipped policy names (node and cluster level; ``gleaner`` is one colour at both)."""

_SPARE = ("#17BECF", "#BCBD22", "#E31A1C", "#1B9E77", "#7570B3", "#66A61E", "#A6761D", "#FB9A99")

BUSY_COLOR = "#555555"
"""The online side in the node timeline (not a policy: the same load under every policy)."""


def policy_colors(names: list[str]) -> dict[str, str]:
    """One distinct colour per name: the shipped ones fixed, others from a spare list."""
    out = {n: KNOWN_COLORS[n] for n in names if n in KNOWN_COLORS}
    used = set(out.values())
    spare = [c for c in _SPARE if c not in used]
    for i, n in enumerate(n for n in names if n not in out):
        out[n] = spare[i] if i < len(spare) else f"hsl({(i * 47) % 360},60%,40%)"
    return out


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks covering [lo, hi] (lo > 0): every label on a log axis reads as a number."""
    if lo <= 0 or hi <= 0:
        return []
    out: list[float] = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0**e
            if lo / 1.001 <= v <= hi * 1.001:
                out.append(v)
    if len(out) > 9:
        out = [v for v in out if str(v).lstrip("0.").startswith("1")]
    return out


def _num(v: float) -> str:
    return f"{v:g}" if v >= 1 else f"{v:.3g}"


def _div(fig: go.Figure, height: int = 450) -> str:
    fig.update_layout(
        template="plotly_white",
        margin={"l": 70, "r": 30, "t": 60, "b": 60},
        height=height,
        font={"size": 13},
    )
    out: str = fig.to_html(full_html=False, include_plotlyjs=False)
    return out


def _bins(t: list[float], ys: list[list[float]], target: int = 240) -> tuple[list[float], ...]:
    """Average the series into at most ``target`` bins (a readable timeline of any length)."""
    n = len(t)
    k = max(1, math.ceil(n / target))
    out_t = [t[i] for i in range(0, n, k)]
    out = [[sum(y[i : i + k]) / len(y[i : i + k]) for i in range(0, n, k)] for y in ys]
    return (out_t, *out)


def _timeline(node: dict[str, Any], colors: dict[str, str]) -> str:
    runs = node["runs"]
    name = "gleaner" if "gleaner" in runs else next(iter(runs))
    s = runs[name]["series"]
    t, busy, run, kv, off = _bins(
        s["t"], [s["busy"], s["offline_run"], s["online_kv_gib"], s["offline_memory_gib"]]
    )
    step = (t[1] - t[0]) if len(t) > 1 else 1.0
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.6, 0.4],
        vertical_spacing=0.08,
        subplot_titles=(
            f"share of time busy, averaged over {step:g} s bins",
            "memory held (GiB)",
        ),
    )
    fig.add_trace(
        go.Scatter(
            x=t,
            y=busy,
            name="online busy",
            mode="lines",
            line={"color": BUSY_COLOR, "width": 1},
            fill="tozeroy",
            stackgroup="busy",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=t,
            y=run,
            name=f"offline running ({name})",
            mode="lines",
            line={"color": colors[name], "width": 1},
            fill="tonexty",
            stackgroup="busy",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=t, y=kv, name="online KV cache", mode="lines", line={"color": BUSY_COLOR, "width": 2}
        ),
        row=2,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=t,
            y=off,
            name=f"offline memory ({name})",
            mode="lines",
            line={"color": colors[name], "width": 2},
        ),
        row=2,
        col=1,
    )
    fig.update_yaxes(range=[0, 1], tickformat=".0%", row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="time (s); drag the slider below to zoom", row=2, col=1)
    fig.update_xaxes(rangeslider={"visible": True, "thickness": 0.06}, row=2, col=1)
    fig.update_layout(
        title=f"Node timeline ({name} run, GPU 0): online and offline share the GPU",
    )
    return _div(fig, height=620)


def _cdfs(runs: dict[str, Any], colors: dict[str, str]) -> str:
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("TTFT CDF (ms, log scale)", "TPOT CDF (ms, log scale)")
    )
    qs = [i / 100 for i in range(101)]
    ranges: list[tuple[float, float]] = []
    for col, key in ((1, "ttft_cdf_s"), (2, "tpot_cdf_s")):
        lo, hi = math.inf, 0.0
        for name, run in runs.items():
            xs = [v * 1000 for v in run[key]]
            pos = [v for v in xs if v > 0]
            if pos:
                lo, hi = min(lo, min(pos)), max(hi, max(pos))
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=qs,
                    name=name,
                    mode="lines",
                    legendgroup=name,
                    showlegend=col == 1,
                    line={"color": colors[name], "width": 2.5 if name == "gleaner" else 1.5},
                ),
                row=1,
                col=col,
            )
        ranges.append((lo, hi))
    for col, (lo, hi) in enumerate(ranges, start=1):
        ticks = log_ticks(lo, hi) if hi > 0 else []
        fig.update_xaxes(
            type="log",
            tickvals=ticks,
            ticktext=[_num(v) for v in ticks],
            title_text="ms",
            row=1,
            col=col,
        )
    fig.update_yaxes(title_text="share of requests", tickformat=".0%")
    fig.update_layout(title="Online latency CDFs per policy (same requests)")
    return _div(fig)


def _bars(runs: dict[str, Any], colors: dict[str, str]) -> str:
    names = [n for n, r in runs.items() if r["compute"] != "online-only"]
    fig = make_subplots(
        rows=1,
        cols=4,
        horizontal_spacing=0.07,
        subplot_titles=(
            "mean TTFT increase (%)",
            "mean TPOT increase (%)",
            "preemptions per request (log)",
            "offline tokens/s",
        ),
    )
    cols = [colors[n] for n in names]
    values = [
        [100 * runs[n]["ttft_increase"]["mean"] for n in names],
        [100 * runs[n]["tpot_increase"]["mean"] for n in names],
        [max(runs[n]["preemptions_per_request"], 1e-3) for n in names],
        [runs[n]["offline_tokens_per_second"] for n in names],
    ]
    for i, ys in enumerate(values, start=1):
        fig.add_trace(
            go.Bar(x=names, y=ys, marker_color=cols, showlegend=False, name=f"col{i}"),
            row=1,
            col=i,
        )
    pre = [v for v in values[2] if v > 0]
    # From the decade below the smallest bar, so that every bar's top has a tick below it.
    ticks = log_ticks(10.0 ** math.floor(math.log10(min(pre))), max(pre)) if pre else []
    fig.update_yaxes(type="log", tickvals=ticks, ticktext=[_num(v) for v in ticks], row=1, col=3)
    fig.update_xaxes(tickangle=-45)
    fig.update_layout(title="Per-policy comparison (node level; colours as in the legend above)")
    return _div(fig, height=480)


def _breakeven(be: dict[str, Any], colors: dict[str, str]) -> str:
    curve = be["curve"]
    xs = [c["disable_median_ms"] for c in curve]
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("mean TTFT increase (%)", "mean TPOT increase (%)")
    )
    for col, metric in ((1, "ttft"), (2, "tpot")):
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[100 * c[f"{metric}_increase"] for c in curve],
                mode="lines+markers",
                name="gleaner",
                legendgroup="gleaner",
                showlegend=col == 1,
                line={"color": colors.get("gleaner", KNOWN_COLORS["gleaner"])},
            ),
            row=1,
            col=col,
        )
        fig.add_trace(
            go.Scatter(
                x=[min(xs), max(xs)],
                y=[100 * be[f"iteration_{metric}_increase"]] * 2,
                mode="lines",
                name="iteration (does not depend on it)",
                legendgroup="iteration",
                showlegend=col == 1,
                line={"color": colors.get("iteration", KNOWN_COLORS["iteration"]), "dash": "dash"},
            ),
            row=1,
            col=col,
        )
        at = be[f"{metric}_ms"]
        if at is not None:
            fig.add_vline(x=at, line={"color": "#888", "dash": "dot"}, row=1, col=col)
    ticks = log_ticks(min(xs), max(xs))
    fig.update_xaxes(
        type="log",
        tickvals=ticks,
        ticktext=[_num(v) for v in ticks],
        title_text="channel disable latency, median (ms)",
    )
    fig.update_layout(
        title="Preemption-cost break-even: gleaner against iteration-level sharing",
        legend={"orientation": "h", "y": -0.25},
    )
    return _div(fig)


def _cluster_figures(cluster: dict[str, Any], colors: dict[str, str]) -> list[str]:
    pols = cluster["policies"]
    figs: list[str] = []
    fig = go.Figure()
    first = next(iter(pols.values()))
    fig.add_trace(
        go.Scatter(
            x=first["series"]["t_h"],
            y=first["series"]["online_busy"],
            name="online busy (every policy)",
            mode="lines",
            line={"color": BUSY_COLOR, "width": 2},
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
                x=m["series"]["t_h"],
                y=total,
                name=f"online + offline ({name})",
                mode="lines",
                line={"color": colors[name]},
            )
        )
    fig.update_layout(
        title=f"Cluster utilization over time ({cluster['gpus']} GPUs)",
        xaxis_title="hours",
        yaxis_title="mean GPU utilization",
        yaxis_tickformat=".0%",
    )
    figs.append(_div(fig))
    names = list(pols)
    fig = make_subplots(
        rows=1,
        cols=4,
        subplot_titles=(
            "harvested utilization gain (pts)",
            "GPUs saved",
            "SLA windows met (%)",
            "evictions",
        ),
    )
    cols = [colors[n] for n in names]
    sla = [
        None if pols[n]["sla_attainment"] is None else 100 * pols[n]["sla_attainment"]
        for n in names
    ]
    for i, ys in enumerate(
        (
            [100 * pols[n]["utilization_gain"] for n in names],
            [pols[n]["gpus_saved"] for n in names],
            sla,
            [pols[n]["evictions"] for n in names],
        ),
        start=1,
    ):
        fig.add_trace(go.Bar(x=names, y=ys, marker_color=cols), row=1, col=i)
    fig.update_xaxes(tickangle=-30)
    fig.update_layout(
        title="Per-policy comparison (cluster level; no bar: the policy ran no job)",
        showlegend=False,
    )
    figs.append(_div(fig))
    return figs


def _targets_table(targets: list[dict[str, Any]], kind: str, ok: str, bad: str) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(t['name'])}</td><td class=num>{html.escape(target_value(t))}</td>"
        f"<td>{html.escape(t['target'])}</td><td class={'ok' if t['met'] else 'miss'}>"
        f"{ok if t['met'] else bad}</td></tr>"
        for t in targets
        if t.get("kind", "target") == kind
    )
    return f"<table><tr><th>measure</th><th>value</th><th>wanted</th><th></th></tr>{rows}</table>"


def _policies(runs: dict[str, Any], colors: dict[str, str]) -> str:
    items = "".join(
        f"<li><span class=sw style='background:{colors[n]}'></span><b>{html.escape(n)}</b>: "
        f"{html.escape(policy_text(n, r))}</li>"
        for n, r in runs.items()
    )
    return f"<ul class=pol>{items}</ul>"


def _sensitivity(rows: list[dict[str, Any]]) -> str:
    body = "".join(
        f"<tr><td>{html.escape(r['term'])}</td><td>{html.escape(r['level'])}</td>"
        f"<td class=num>{pct(r['ttft_increase'])}</td><td class=num>{pct(r['tpot_increase'])}"
        f"</td><td class=num>{r['offline_tokens_per_second']:,.0f}</td></tr>"
        for r in rows
    )
    return (
        "<table><tr><th>cost term</th><th>level</th><th>ΔTTFT mean (%)</th>"
        f"<th>ΔTPOT mean (%)</th><th>offline tokens/s</th></tr>{body}</table>"
    )


def render_report(results: dict[str, Any]) -> str:
    """The report page (see the module docstring)."""
    names: list[str] = []
    for part in ("node", "cluster"):
        sec = results.get(part) or {}
        for n in sec.get("runs", sec.get("policies", {})):
            if n not in names:
                names.append(n)
    colors = policy_colors(names)
    parts: list[str] = []
    title = f"Gleaner simulation — {html.escape(str(results.get('scenario', '')))}"
    parts.append(f"<h1>{title}</h1><p>{html.escape(str(results.get('description', '')))}</p>")
    parts.append(f"<p>seed {results.get('seed')}</p>")
    if results.get("verdict"):
        lines = "".join(f"<li>{html.escape(v)}</li>" for v in results["verdict"])
        parts.append(f"<h2>Verdict (node level)</h2><ul>{lines}</ul>")
    if "targets" in results:
        parts.append(
            "<h2>Node-level targets (Gleaner)</h2>"
            + _targets_table(results["targets"], "target", "met", "NOT met")
        )
        parts.append(
            "<h2>Comparisons with baselines</h2>"
            + _targets_table(results["targets"], "comparison", "holds", "does NOT hold")
        )
    if "node" in results:
        node = results["node"]
        parts.append("<h2>Node level</h2><h3>Policies</h3>")
        parts.append(_policies(node["runs"], colors))
        parts.append(_timeline(node, colors))
        parts.append(_cdfs(node["runs"], colors))
        parts.append(_bars(node["runs"], colors))
        if node.get("breakeven"):
            parts.append(_breakeven(node["breakeven"], colors))
    if results.get("sensitivity"):
        parts.append(
            "<h2>Sensitivity of gleaner to each cost term</h2>"
            + _sensitivity(results["sensitivity"])
        )
    if "cluster" in results:
        parts.append("<h2>Cluster level</h2>")
        items = "".join(
            f"<li><span class=sw style='background:{colors[n]}'></span><b>{html.escape(n)}</b>: "
            f"{html.escape(CLUSTER_POLICY_TEXT.get(n, 'a custom placement policy.'))}</li>"
            for n in results["cluster"]["policies"]
        )
        parts.append(f"<ul class=pol>{items}</ul>")
        if results.get("cluster_verdict"):
            lines = "".join(f"<li>{html.escape(v)}</li>" for v in results["cluster_verdict"])
            parts.append(f"<h3>Verdict (cluster level)</h3><ul>{lines}</ul>")
        parts.extend(_cluster_figures(results["cluster"], colors))
    body = "\n".join(parts)
    style = (
        "body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}"
        "table{border-collapse:collapse;margin-bottom:1em}"
        "td,th{border:1px solid #ccc;padding:4px 8px}td.num{text-align:right}"
        ".ok{color:#060}.miss{color:#a00;font-weight:bold}"
        ".pol{list-style:none;padding-left:0}.pol li{margin:4px 0}"
        ".sw{display:inline-block;width:14px;height:14px;margin-right:6px;"
        "vertical-align:middle;border-radius:2px}"
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{title}</title><style>{style}</style>"
        f"<script type='text/javascript'>{get_plotlyjs()}</script></head>"
        f"<body>{body}</body></html>"
    )
