"""``gleaner report evictions --from``: a simulation's eviction reports, read like a cluster's;
``--kubeconfig`` and ``--context`` pick the cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gleaner.cli.main import main
from gleaner.scheduler import EvictionReport
from gleaner.scheduler.report import ObservedSummary, PredictedFactors
from gleaner.simulator.snapshot import dashboard_record, write_dashboard_record

T0 = 1_700_000_000.0


def _report(job: str, hours_before_last: float) -> EvictionReport:
    return EvictionReport(
        job=job,
        node="node-3",
        gpus=(0, 1),
        sla=0.5,
        predicted=PredictedFactors(0.9, 0.8, 1.0, 0.72),
        observed=ObservedSummary(0.31, 0.2, 0.3, 10, 8, 60.0),
        reason="observed 0.31 < SLA 0.50 in 8 of 10 windows",
        time=T0 - 3600 * hours_before_last,
        eviction_count=1,
        failed=False,
        next_attempt_after=T0 + 300,
        excluded_nodes=("node-3",),
    )


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    record = dashboard_record(
        node_traces=[],
        offline_jobs=[],
        eviction_reports=[
            _report("batch/newest", 0),
            _report("batch/older", 5),
            _report("eval/other", 1),
            _report("batch/ancient", 30),
        ],
    )
    write_dashboard_record(tmp_path / "dashboard.json", record)
    return tmp_path


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["report", "evictions", *args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_reads_a_simulation_output(out_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The simulation's clock: "last 24h" counts back from its newest report, not from now.
    rc, out, _ = _run(["--from", str(out_dir), "--format", "json"], capsys)
    assert rc == 0
    rows = json.loads(out)
    assert [(r["namespace"], r["job"]) for r in rows] == [
        ("batch", "batch/newest"),
        ("eval", "eval/other"),
        ("batch", "batch/older"),
    ]
    rc, out, _ = _run(
        ["--from", str(out_dir / "dashboard.json"), "-n", "batch", "--since", "2h",
         "--format", "csv"],
        capsys,
    )  # fmt: skip
    assert rc == 0
    lines = out.strip().splitlines()
    assert len(lines) == 2 and ',batch,newest,node-3,"0,1",0.50,0.72,0.31,1,requeued,' in lines[1]
    rc, out, _ = _run(["--from", str(out_dir)], capsys)
    assert rc == 0 and f"SLA evictions in {out_dir} (all namespaces), last 24h: 3" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "{dir}/missing.json"], "No such file or directory"),
        (["--from", "{dir}/bad.json"], "not JSON"),
        (["--from", "{dir}/other.json"], "not a simulation's dashboard record"),
        (["--from", "{dir}", "--context", "prod"], "--kubeconfig and --context do not apply"),
        (["--kubeconfig", "{dir}/missing-kubeconfig"], "no cluster configuration"),
    ],
)
def test_bad_input_is_one_line(
    out_dir: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (out_dir / "bad.json").write_text("{")
    (out_dir / "other.json").write_text('{"kind": "Something"}')
    rc, _, err = _run([a.replace("{dir}", str(out_dir)) for a in args], capsys)
    assert rc == 2
    assert err.count("\n") == 1 and message in err, err


def test_context_selects_the_kubeconfig_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: a, context: {cluster: c, user: u, namespace: one}},"
        " {name: b, context: {cluster: c, user: u, namespace: two}}]\n"
    )
    rc, _, err = _run(["--kubeconfig", str(config), "--context", "nope"], capsys)
    assert rc == 2 and "no cluster configuration" in err
    # A reachable-looking context is used: the error is now about reaching its server.
    rc, _, err = _run(["--kubeconfig", str(config), "--context", "b"], capsys)
    assert rc == 2 and "cannot reach the cluster" in err, err
