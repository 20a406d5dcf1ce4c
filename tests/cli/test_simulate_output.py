"""`gleaner simulate` output: 100-column tables, '–' for no data, --requests replay, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gleaner.cli.main import main

SCENARIO = """
name: tiny
seed: 3
node:
  duration_s: 60
  runs:
    - {name: online-only, compute: online-only, memory: none}
    - {name: gleaner, compute: gleaner, memory: gleaner}
    - {name: iteration, compute: iteration, memory: gleaner}
"""


@pytest.fixture()
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    return path


def _mooncake(path: Path, n: int = 30) -> None:
    lines = [
        json.dumps({"timestamp": 1000 * i, "input_length": 200 + 50 * i, "output_length": 30})
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_tables_fit_100_columns_and_say_dash_for_no_data(
    scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--scenario", str(scenario), "--no-progress"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "…" not in out
    # online-only ran no offline work: its offline columns are dashes, not 0 or 100%.
    rows = [line for line in lines if line.startswith("│ online-only")]
    assert len(rows) == 2
    assert rows[0].count("–") == 4  # the increases over itself
    assert rows[1].count("–") == 5  # preemptions, reclamations, offline work
    for header in ("TTFT mean (ms)", "offline tokens/s", "Comparisons with baselines"):
        assert header.split()[0] in out
    assert "Verdict (node level):" in out and "Seed 3: 1 GPU," in out
    assert "Break-even (mean TTFT)" in out


def test_requests_replay_a_mooncake_file(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "mooncake.jsonl"
    _mooncake(trace)
    rc = main(
        [
            "simulate",
            "--scenario",
            str(scenario),
            "--no-progress",
            "--format",
            "json",
            "--requests",
            str(trace),
            "--rate-scale",
            "2",
            "--window",
            "5:20",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    replay = out["node"]["replay"]
    assert replay["format"] == "mooncake" and replay["requests"] == 20
    assert replay["window_s"] == pytest.approx(10.0)
    assert out["node"]["runs"]["gleaner"]["requests"] == 20
    verdict = out["verdict"][0]
    assert "the replayed Mooncake-format request trace mooncake.jsonl (20 requests)" in verdict


def test_bad_request_traces_are_one_line_and_exit_2(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,12,4\n1,x,4\n", encoding="utf-8")
    base = ["simulate", "--scenario", str(scenario), "--no-progress"]
    assert main([*base, "--requests", str(bad)]) == 2
    assert main([*base, "--requests", str(tmp_path / "none.csv")]) == 2
    assert main([*base, "--rate-scale", "2"]) == 2
    assert main([*base, "--requests", str(bad), "--window", "a:b"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("error: ") for line in err)
    assert "bad.csv:3: column 'ContextTokens': not a number ('x')" in err[0]


CLUSTER = """
name: tiny-cluster
seed: 5
cluster: {nodes: 3, gpus_per_node: 4, duration_h: 6, history_h: 1, jobs: {per_100_gpus: 100}}
"""


def test_cluster_tables_fit_100_columns_and_give_a_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER, encoding="utf-8")
    assert main(["simulate", "--scenario", str(path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "…" not in out
    assert "Cluster level (12 GPUs, 6 h, seed 5)" in out
    # no-harvest runs no job: no SLA windows and no model, so dashes rather than 100% or 0.
    row = next(line for line in lines if line.startswith("│ no-harvest"))
    assert row.count("–") == 2 and "100.0" not in row
    assert "Prediction error: the mean absolute difference" in out
    verdict = out[out.index("Verdict (cluster level):") :]
    assert "Seed 5: 12 GPUs in 3 nodes, 6 h of synthetic online load" in verdict
    assert "no-harvest ran no job" in verdict
    assert "has the most GPUs saved" in verdict and "Comparison with first-fit" in verdict


def test_cluster_windows_met_by_job_size_match_the_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER, encoding="utf-8")
    base = ["simulate", "--scenario", str(path), "--no-progress"]
    assert main([*base, "--format", "json"]) == 0
    policies = json.loads(capsys.readouterr().out)["cluster"]["policies"]
    assert main(base) == 0
    out = capsys.readouterr().out
    table = out[out.index("Cluster level: SLA windows met by job size") :].splitlines()
    header = next(line for line in table if line.startswith("┃ policy"))
    sizes = sorted({int(g) for m in policies.values() for g in m["sla_windows_by_gpus"]})
    assert [f"{g}-GPU jobs (%)" in header for g in sizes] == [True] * len(sizes)
    for name, m in policies.items():
        row = next(line for line in table if line.startswith(f"│ {name} "))
        cells = [c.strip() for c in row.strip("│ ").split("│")][1:]
        expected = []
        for g in sizes:
            w = m["sla_windows_by_gpus"].get(str(g))
            expected.append(f"{100 * w['met'] / w['windows']:.1f}" if w and w["windows"] else "–")
        assert cells == expected, name
    # The pooled attainment is these windows together.
    gleaner = policies["gleaner"]["sla_windows_by_gpus"].values()
    assert sum(w["windows"] for w in gleaner) == policies["gleaner"]["sla_windows"]
