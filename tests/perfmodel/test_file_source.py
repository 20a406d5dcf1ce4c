"""File trace source: CSV and Parquet in the DESIGN.md format, clear errors otherwise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gleaner.perfmodel import (
    FileTraceSource,
    TraceFormatError,
    TraceSource,
    compute_factor,
    parse_duration,
    summarize_samples,
)


def frame() -> pd.DataFrame:
    rows = []
    for t in range(20):
        for node, gpus in (("a", 2), ("b", 1)):
            for g in range(gpus):
                rows.append(
                    {
                        "timestamp": 100.0 + t,
                        "node": node,
                        "gpu": g,
                        "online_busy": float((t + g) % 4 == 0),
                        "free_memory_gib": 10.0 + (t % 5),
                        "offline_enabled": float((t + g) % 4 != 0),
                    }
                )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".csv.gz", ".trace"])
def test_csv_and_parquet_read_the_same(tmp_path: Path, suffix: str) -> None:
    df = frame()
    path = tmp_path / f"trace{suffix}"
    if suffix in (".parquet", ".trace"):
        df.to_parquet(path)  # ".trace" is recognized by Parquet's magic bytes
    else:
        df.to_csv(path, index=False)
    source = FileTraceSource(path)
    assert isinstance(source, TraceSource)
    nodes = source.load()
    expected = summarize_samples(df)
    assert sorted(nodes) == ["a", "b"]
    for name in nodes:
        assert nodes[name].equals(expected[name])
    assert compute_factor(nodes["a"], [0]) == pytest.approx(15 / 20)


def test_window_option(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    frame().to_csv(path, index=False)
    nodes = FileTraceSource(path, window_seconds=parse_duration("10s")).load()
    assert nodes["a"].window_seconds == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("timestamp,node,gpu\n1,a,0\n", "missing column(s) online_busy, free_memory_gib"),
        ("timestamp,node,gpu,online_busy,free_memory_gib\n", "no samples"),
        (
            "timestamp,node,gpu,online_busy,free_memory_gib\n1,a,0,abc,3\n",
            "column 'online_busy' must be a finite number (row 1: 'abc')",
        ),
        (
            "timestamp,node,gpu,online_busy,free_memory_gib\n1,a,0,1.5,3\n",
            "column 'online_busy' must be within 0..1 (row 1",
        ),
        (
            "timestamp,node,gpu,online_busy,free_memory_gib\n1,a,0.5,1,3\n",
            "column 'gpu' must be an integer 0..15",
        ),
        (
            "timestamp,node,gpu,online_busy,free_memory_gib\n1,a,0,1,-3\n",
            "column 'free_memory_gib' must be >= 0",
        ),
        ('timestamp,node\n"1,a\n', "not a readable CSV trace"),
    ],
)
def test_malformed_csv(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(TraceFormatError) as info:
        FileTraceSource(path).load()
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_malformed_parquet_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(TraceFormatError, match="not a readable Parquet trace"):
        FileTraceSource(bad).load()
    with pytest.raises(TraceFormatError, match="no such trace file"):
        FileTraceSource(tmp_path / "nope.csv").load()


def test_parse_duration() -> None:
    assert parse_duration("90s") == 90
    assert parse_duration("15m") == 900
    assert parse_duration("1h") == 3600
    assert parse_duration("1.5d") == 1.5 * 86400
    assert parse_duration("30") == 30
    for bad in ("", "1y", "h", "0s", "-1h"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_sample_period_is_the_median_gap() -> None:
    df = frame()
    df = df[df["timestamp"] != 105.0]  # one missing timestamp: a gap, not a longer sample
    node = summarize_samples(df)["b"]
    assert node.window_seconds == pytest.approx(19.0)
    assert float(node.memory.seconds.sum()) == pytest.approx(19.0)
    assert np.isclose(node.online_busy_seconds[0], (df[df.node == "b"].online_busy.sum()))
