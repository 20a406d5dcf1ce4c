"""`gleaner simulate`: the quick default end to end, targets on the JSON, files, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gleaner.cli.main import main
from gleaner.dashboard.build import build_dashboard
from gleaner.dashboard.model import ClusterRecord
from gleaner.simulator.scenario import load_scenario, quick, shipped_scenarios


@pytest.fixture(scope="module")
def quick_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    rc = main(["simulate", "--quick", "--no-progress", "--format", "json", "--out", str(out)])
    assert rc == 0
    return out


@pytest.mark.slow
def test_quick_default_meets_the_node_targets(quick_out: Path) -> None:
    results = json.loads((quick_out / "results.json").read_text())
    targets = {t["name"]: t for t in results["targets"]}
    assert len(targets) == 7
    runs = results["node"]["runs"]
    g, fifo = runs["gleaner"], runs["gleaner-fifo"]
    # Checked from the raw numbers, not only from the runner's verdicts.
    assert g["ttft_increase"]["mean"] < 0.05
    assert g["tpot_increase"]["mean"] < 0.02
    assert g["max_preemptions_per_request"] <= 1
    assert g["offline_normalized"] >= 0.9
    assert runs["gpreempt"]["preemptions_per_request"] > 1
    assert runs["iteration"]["ttft_increase"]["mean"] > g["ttft_increase"]["mean"]
    assert g["throughput_loss"] <= 0.8 * fifo["throughput_loss"]
    assert all(t["met"] for t in targets.values())


@pytest.mark.slow
def test_outputs_are_written_and_usable(quick_out: Path) -> None:
    page = (quick_out / "report.html").read_text()
    assert "Plotly" in page and "<script src=" not in page  # plotly.js embedded: opens offline
    assert "TTFT CDF" in page and "Cluster utilization" in page
    record = ClusterRecord.model_validate(json.loads((quick_out / "dashboard.json").read_text()))
    snap = build_dashboard(record).snapshot
    assert snap.source == "simulation" and len(snap.nodes) == 8 and snap.jobs


@pytest.mark.slow
def test_report_plots_render_in_chromium(quick_out: Path) -> None:
    """Open report.html as a person would (file://, offline): every figure draws its data."""
    from gleaner.testing.dashboard import CHROMIUM, CHROMIUM_ARGS

    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    problems: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto((quick_out / "report.html").as_uri())
            page.wait_for_function(
                "document.querySelectorAll('.js-plotly-plot .main-svg').length > 0"
            )
            figures = page.evaluate(
                """() => [...document.querySelectorAll('.js-plotly-plot')].map(el => {
                    const box = el.getBoundingClientRect();
                    return {
                        width: box.width,
                        height: box.height,
                        traces: (el.data || []).length,
                        drawn: el.querySelectorAll('.scatterlayer .trace, .barlayer .trace')
                            .length,
                    };
                })"""
            )
        finally:
            browser.close()
    assert problems == []
    # Node utilization, latency CDFs, node per-policy bars, cluster utilization, cluster bars.
    assert len(figures) >= 5, figures
    for fig in figures:
        assert fig["width"] > 300 and fig["height"] > 200, fig
        assert fig["traces"] > 0 and fig["drawn"] > 0, fig


def test_shipped_scenarios_load() -> None:
    names = shipped_scenarios()
    assert {"default", "node-only", "cluster-1000"} <= set(names)
    for name in names:
        s = load_scenario(name)
        assert s.node is not None or s.cluster is not None
    q = quick(load_scenario("default"))
    assert q.node is not None and q.node.duration_s <= 300


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--scenario", "nope"]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnode: {duration_s: -1}\n")
    assert main(["simulate", "--scenario", str(bad)]) == 2
    bad.write_text("name: x\nnode: {typo: 1}\n")
    assert main(["simulate", "--scenario", str(bad)]) == 2
    assert main(["simulate", "--scenario", "node-only", "--trace", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("error: ") for line in err)


def _trace(path: Path) -> None:
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(0)
    for node in ("n1", "n2"):
        for t in range(0, 6 * 3600, 60):
            shared = float(rng.uniform(0.0, 0.6))
            for gpu in range(2):
                rows.append(
                    {
                        "timestamp": float(t),
                        "node": node,
                        "gpu": gpu,
                        "online_busy": shared,
                        "free_memory_gib": 50.0 - 20 * shared,
                    }
                )
    pd.DataFrame(rows).to_csv(path, index=False)


def test_a_bad_trace_fails_before_the_node_level_runs(tmp_path: Path) -> None:
    from gleaner.simulator.runner import run_scenario

    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,node\n0,a\n", encoding="utf-8")
    started: list[str] = []

    def progress(desc: str, total: int) -> Any:
        started.append(desc)
        return lambda n: None

    with pytest.raises(ValueError, match="missing column"):
        run_scenario(quick(load_scenario("default")), trace=bad, progress=progress)
    assert started == []


def test_trace_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    _trace(trace)
    scen = tmp_path / "s.yaml"
    scen.write_text(
        "name: replay\ncluster:\n  history_h: 1\n  window_h: 1\n  policies: [gleaner]\n"
        "  jobs: {per_100_gpus: 200, gpus: {1: 0.5, 2: 0.5}}\n"
    )
    rc = main(
        [
            "simulate",
            "--scenario",
            str(scen),
            "--trace",
            str(trace),
            "--no-progress",
            "--format",
            "json",
        ]
    )
    assert rc == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert out["cluster"]["gpus"] == 4 and out["cluster"]["nodes"] == 2
    m = out["cluster"]["policies"]["gleaner"]
    assert abs(m["online_utilization"] - 0.3) < 0.05
    assert m["gpus_saved"] > 0


@pytest.mark.slow
def test_full_default_node_level_meets_the_targets() -> None:
    """The default scenario's node level at full length (about 15 s here)."""
    from gleaner.simulator.runner import run_scenario

    scenario = load_scenario("default").model_copy(update={"cluster": None})
    results = run_scenario(scenario).results
    missed = [t["name"] for t in results["targets"] if not t["met"]]
    assert missed == []
    assert results["node"]["runs"]["gleaner"]["requests"] > 200


def test_write_trace_needs_a_cluster_and_a_writable_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "t.csv")
    assert main(["simulate", "--scenario", "node-only", "--write-trace", out]) == 2
    assert "needs a scenario with a 'cluster' section" in capsys.readouterr().err
    missing = tmp_path / "no-such-dir" / "t.csv"
    assert main(["simulate", "--quick", "--write-trace", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --write-trace") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "t.csv").exists()
