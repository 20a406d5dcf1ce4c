"""``gleaner backtest``: rolling origins on a diurnal trace, judged on held-out time."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gleaner.cli.main import main
from gleaner.scheduler.backtest import (
    BacktestResult,
    Judged,
    OriginResult,
    rolling_origins,
    verdict,
)

JOB = """apiVersion: gleaner.dev/v1alpha1
kind: OfflineJob
metadata: {{name: {name}}}
spec:
  template: {{spec: {{containers: [{{name: w, image: busybox}}]}}}}
  throughputSLA: {sla}
  profile:
    standaloneTokensPerSecond: 1000
    requiredMemoryGiB: 20
    memoryCurve: [{{memoryGiB: 10, tokensPerSecond: 500}}, {{memoryGiB: 20, tokensPerSecond: 1000}}]
"""


@pytest.fixture
def diurnal_trace(tmp_path: Path) -> Path:
    """Two days, 5-minute samples, one node of two GPUs: idle at night, busy 8:00-20:00."""
    rows = []
    for t in range(0, 2 * 86400, 300):
        hour = (t // 3600) % 24
        busy = 0.85 if 8 <= hour < 20 else 0.05
        for gpu in range(2):
            rows.append((float(t), "n1", gpu, busy, 60.0))
    path = tmp_path / "trace.csv"
    pd.DataFrame(
        rows, columns=["timestamp", "node", "gpu", "online_busy", "free_memory_gib"]
    ).to_csv(path, index=False)
    return path


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    d = tmp_path / "jobs"
    d.mkdir()
    (d / "a.yaml").write_text(JOB.format(name="a", sla=0.5))
    return d


def _run(
    trace: Path, jobs: Path, *extra: str, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    rc = main(["backtest", "--trace", str(trace), "--jobs", str(jobs), "--format", "json", *extra])
    assert rc in (0, None)
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_origins_roll_over_the_trace() -> None:
    assert rolling_origins(0, 10 * 3600, 7200, 7200, 3600) == [3600, 10800, 18000, 25200]
    assert rolling_origins(0, 3600, 7200, 7200, 0) == []
    with pytest.raises(ValueError):
        rolling_origins(0, 1, 0, 1, 0)


def test_the_time_of_day_forecast_avoids_the_morning_miss(
    diurnal_trace: Path, jobs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("--every", "2h", "--horizon", "2h", "--min-history", "26h")
    trailing = _run(diurnal_trace, jobs, *args, "--forecast", "trailing", capsys=capsys)
    diurnal = _run(diurnal_trace, jobs, *args, capsys=capsys)
    # Origins every 2 h from 02:00 of day 2 to 22:00: at 06:00 the trailing night
    # says idle but the day starts at 08:00 (and the same at 18:00 the other way round).
    assert [o["origin"][11:16] for o in diurnal["origins"]][:3] == ["02:00", "04:00", "06:00"]
    assert trailing["attainment"] < 1.0
    assert diurnal["attainment"] == 1.0
    assert diurnal["met"] == diurnal["placed"] > 0
    # The oracle sees the horizon: it never places less than a forecast that met every SLA.
    assert diurnal["oracle_placed"] >= diurnal["placed"]
    assert diurnal["verdict"].startswith("verdict: PASS")
    assert trailing["verdict"].startswith("verdict: FAIL")


def test_the_table_prints_totals_and_a_verdict(
    diurnal_trace: Path, jobs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(
        ["backtest", "--trace", str(diurnal_trace), "--jobs", str(jobs), "--min-history", "26h"]
    )
    assert rc in (0, None)
    out = capsys.readouterr().out
    assert "attainment:" in out and "oracle (sees the horizon)" in out
    assert out.strip().splitlines()[-1].startswith("verdict: ")


def test_a_trace_too_short_is_an_error(
    diurnal_trace: Path, jobs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(
        ["backtest", "--trace", str(diurnal_trace), "--jobs", str(jobs), "--min-history", "3d"]
    )
    assert rc == 2
    assert "too short" in capsys.readouterr().err


def test_the_verdict_names_what_fell_short() -> None:
    good = Judged("j", "n", (0,), 0.5, 0.6, 0.6)
    bad = Judged("j", "n", (0,), 0.5, 0.6, 0.3)
    assert good.met and not bad.met and not Judged("j", "n", (0,), 0.5, 0.6, None).met
    result = BacktestResult((OriginResult(0.0, (good, bad), 4),))
    assert result.attainment == 0.5 and math.isclose(result.oracle_share or 0, 0.5)
    assert verdict(result).startswith("verdict: FAIL: 50.0% of 2 placements")
    assert verdict(BacktestResult(())).startswith("verdict: NO DATA")
