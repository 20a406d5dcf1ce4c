"""``gleaner backtest``: rolling origins on a diurnal trace, judged on held-out time."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gleaner.cli.backtest import load_queue, run_backtest
from gleaner.cli.main import main
from gleaner.perfmodel import read_trace_frame, validate_trace_frame
from gleaner.scheduler.backtest import (
    BacktestResult,
    Group,
    Judged,
    OriginResult,
    by_gpus,
    by_hour,
    by_margin,
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


def _day_and_night(path: Path, days: int, gpus: int = 2) -> Path:
    """``days`` days, 5-minute samples, one node of ``gpus`` GPUs: idle at night (busy
    0.05), busy 8:00-20:00 (0.85)."""
    rows = []
    for t in range(0, days * 86400, 300):
        hour = (t // 3600) % 24
        busy = 0.85 if 8 <= hour < 20 else 0.05
        for gpu in range(gpus):
            rows.append((float(t), "n1", gpu, busy, 60.0))
    pd.DataFrame(
        rows, columns=["timestamp", "node", "gpu", "online_busy", "free_memory_gib"]
    ).to_csv(path, index=False)
    return path


@pytest.fixture
def diurnal_trace(tmp_path: Path) -> Path:
    """Two days of :func:`_day_and_night`."""
    return _day_and_night(tmp_path / "trace.csv", 2)


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


def test_placements_met_are_split_by_job_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _day_and_night(tmp_path / "four.csv", 2, gpus=4)
    jobs = tmp_path / "sized"
    jobs.mkdir()
    (jobs / "one.yaml").write_text(JOB.format(name="one", sla=0.5))
    (jobs / "two.yaml").write_text(JOB.format(name="two", sla=0.5) + "  gpus: 2\n")
    args = ("--every", "2h", "--horizon", "2h", "--min-history", "26h")
    data = _run(trace, jobs, *args, capsys=capsys)
    placements = [p for o in data["origins"] for p in o["placements"]]
    expected = {
        size: {
            "gpus": size,
            "placed": sum(1 for p in placements if len(p["gpus"]) == size),
            "met": sum(1 for p in placements if len(p["gpus"]) == size and p["met"]),
        }
        for size in (1, 2)
    }
    assert data["by_gpus"] == [expected[1], expected[2]]
    assert expected[1]["placed"] > 0 and expected[2]["placed"] > 0
    rc = main(["backtest", "--trace", str(trace), "--jobs", str(jobs), *args])
    assert rc in (0, None)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("met by job"))
    for size in (1, 2):
        share = 100 * expected[size]["met"] / expected[size]["placed"]
        assert f"{size}-GPU jobs {share:.1f}% of {expected[size]['placed']}" in line


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


def test_counts_on_a_trace_known_by_construction(tmp_path: Path) -> None:
    # Three days; a 1-GPU job at SLA 0.5 fits a GPU only at night (busy 0.05, not 0.85).
    # Origins every 2 h from 02:00 of day 2 to 20:00 of day 3; a horizon lies wholly in
    # the night from origins 20:00, 22:00, 00:00, 02:00, 04:00 and 06:00: five on each day.
    # Two such jobs fill the node's two GPUs at each of those ten origins.
    trace = _day_and_night(tmp_path / "trace.csv", 3)
    d = tmp_path / "jobs"
    d.mkdir()
    (d / "a.yaml").write_text(JOB.format(name="a", sla=0.5))
    (d / "b.yaml").write_text(JOB.format(name="b", sla=0.5))
    frame = validate_trace_frame(read_trace_frame(trace))
    requests, profiles = load_queue([d])
    args: dict[str, Any] = {"every_s": 7200.0, "horizon_s": 7200.0, "min_history_s": 26 * 3600.0}
    night = {0, 2, 4, 6, 20, 22}
    # Predictions are exact on this trace, so closing the loop (the bias table learning
    # observed / predicted = 1 from earlier placements) changes no placement.
    for forecast, closed in (("worst-hours", False), ("worst-hours", True), ("diurnal", False)):
        result = run_backtest(
            frame, requests, profiles, forecast=forecast, closed_loop=closed, **args
        )
        assert len(result.origins) == 22
        assert result.oracle_placed == 20
        assert result.placed == result.met == 20, forecast
        for o in result.origins:
            expected = 2 if int(o.origin // 3600) % 24 in night else 0
            assert o.placed == o.oracle_placed == expected
        # 00:00 is an origin on day 3 only, 22:00 on day 2 only.
        assert [(g.key, g.placed, g.met) for g in by_hour(result)] == [
            (0, 2, 2),
            (2, 4, 4),
            (4, 4, 4),
            (6, 4, 4),
            (20, 4, 4),
            (22, 2, 2),
        ]
    # The trailing 6 h window is mostly night until 10:00 (busy at most (4 * 0.05 + 2 *
    # 0.85) / 6, a compute share of 0.68): it places at 08:00 and 10:00 into the day and
    # misses; it is mostly day from 12:00 to 22:00 and places nothing then.
    trailing = run_backtest(frame, requests, profiles, forecast="trailing", **args)
    assert trailing.oracle_placed == 20
    assert [(g.key, g.placed, g.met) for g in by_hour(trailing)] == [
        (0, 2, 2),
        (2, 4, 4),
        (4, 4, 4),
        (6, 4, 4),
        (8, 4, 0),
        (10, 4, 0),
    ]
    assert trailing.placed == 22 and trailing.met == 14


def test_misses_are_grouped_by_hour_and_margin() -> None:
    day = 86400.0
    result = BacktestResult(
        (
            OriginResult(
                day + 3 * 3600,
                (
                    Judged("a", "n", (0,), 0.5, 0.5, 0.4),  # margin 0, missed
                    Judged("b", "n", (1,), 0.5, 0.56, 0.6),  # margin 0.06, met
                ),
                2,
            ),
            OriginResult(2 * day + 3 * 3600, (Judged("c", "n", (0,), 0.2, 0.9, 0.9),), 1),
            OriginResult(2 * day + 5 * 3600, (Judged("d", "n", (0,), 0.2, 0.3, None),), 1),
            OriginResult(2 * day + 6 * 3600, (Judged("e", "n", (2, 3), 0.3, 0.4, 0.35),), 1),
        )
    )
    assert by_hour(result) == [Group(3, 3, 2), Group(5, 1, 0), Group(6, 1, 1)]
    assert by_gpus(result) == [Group(1, 4, 2), Group(2, 1, 1)]
    assert by_margin(result) == [
        Group(0, 1, 0),
        Group(1, 1, 1),
        Group(2, 2, 1),
        Group(6, 1, 1),
    ]
    assert by_margin(result)[0].missed_share == 1.0 and Group(0, 0, 0).missed_share == 0.0
    with pytest.raises(ValueError):
        by_margin(result, step=0)


def test_worst_hours_covers_the_spread_learned_from_the_history(tmp_path: Path) -> None:
    # Every hour: 30 minutes at busy 0.3, then 30 at 0.6 (mean 0.45, a compute share of
    # 0.55 against an SLA of 0.5, which every 2-hour horizon meets). Half the 30-minute
    # windows are 0.6 / 0.45 = 1.33 times busier than their hour's forecast: at risk target
    # 0.9 admission covers that (0.6 busy, 0.4 compute) and places nothing; at 0.4 the
    # spread it must cover is the quieter half's, and it places what the mean does. The
    # first origin is at 06:00 of day 2: by then 6 hours of day 2 were compared with day 1
    # (two windows on two GPUs each, 24 ratios; the spread needs 20 before it is used).
    rows = []
    for t in range(0, 2 * 86400, 300):
        busy = 0.3 if (t % 3600) < 1800 else 0.6
        for gpu in range(2):
            rows.append((float(t), "n1", gpu, busy, 60.0))
    frame = pd.DataFrame(
        rows, columns=["timestamp", "node", "gpu", "online_busy", "free_memory_gib"]
    )
    d = tmp_path / "jobs"
    d.mkdir()
    (d / "a.yaml").write_text(JOB.format(name="a", sla=0.5))
    requests, profiles = load_queue([d])
    args: dict[str, Any] = {"every_s": 7200.0, "horizon_s": 7200.0, "min_history_s": 30 * 3600.0}
    mean = run_backtest(frame, requests, profiles, forecast="diurnal", **args)
    assert mean.placed == mean.met == mean.oracle_placed == len(mean.origins) > 0
    cautious = run_backtest(frame, requests, profiles, risk_target=0.9, **args)
    assert cautious.placed == 0 and cautious.oracle_placed == mean.oracle_placed
    bold = run_backtest(frame, requests, profiles, risk_target=0.4, **args)
    assert bold.placed == bold.met == mean.placed
