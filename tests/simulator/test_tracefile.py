"""gleaner.simulator.tracefile: the simulated online load written in the trace file format.

The rows it writes pass the perfmodel's trace validation, read back (through the same path
``gleaner simulate --trace`` uses) to the very arrays they were written from, and come out
the same for the same scenario and seed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gleaner.perfmodel import read_trace_frame, validate_trace_frame
from gleaner.perfmodel.frames import TRACE_COLUMNS as READ_COLUMNS
from gleaner.perfmodel.frames import summarize_samples
from gleaner.simulator.cluster_scenario import ClusterScenario
from gleaner.simulator.online import EPOCH_SECONDS, generate_online, online_from_trace
from gleaner.simulator.tracefile import TRACE_COLUMNS, cluster_trace, trace_frame, write_trace

SMALL = ClusterScenario(nodes=2, gpus_per_node=3, history_h=1, duration_h=1, step_s=60)


def test_the_columns_are_the_ones_the_readers_need() -> None:
    assert TRACE_COLUMNS == READ_COLUMNS


def test_rows_are_time_major_and_aligned() -> None:
    frame = cluster_trace(SMALL, seed=3)
    assert list(frame.columns) == list(TRACE_COLUMNS)
    assert len(frame) == 2 * 3 * 120
    first = frame.iloc[:6]
    assert first["node"].tolist() == ["gpu-node-0000"] * 3 + ["gpu-node-0001"] * 3
    assert first["gpu"].tolist() == [0, 1, 2, 0, 1, 2]
    assert first["timestamp"].nunique() == 1
    # History lies before simulated time 0: one hour of it.
    assert frame["timestamp"].iloc[0] == EPOCH_SECONDS - 3600
    assert np.all(np.diff(frame["timestamp"].unique()) == 60)


def test_written_values_read_back_to_the_simulated_arrays(tmp_path: Path) -> None:
    online = generate_online(SMALL, np.random.default_rng(5))
    path = tmp_path / "t.csv"
    write_trace(trace_frame(online, decimals=6), path)
    frame = validate_trace_frame(read_trace_frame(path))
    back = online_from_trace(frame, SMALL.history_h)
    assert back.node_names == online.node_names
    assert back.gpus_per_node == online.gpus_per_node
    assert back.step_s == online.step_s
    assert back.t0_step == online.t0_step
    np.testing.assert_allclose(back.busy, online.busy, atol=1e-6)
    np.testing.assert_allclose(back.free_gib, online.free_gib, atol=1e-6)
    summaries = summarize_samples(frame)
    assert sorted(summaries) == online.node_names


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz", "t.parquet"])
def test_every_file_kind_round_trips(tmp_path: Path, name: str) -> None:
    frame = cluster_trace(SMALL, seed=1)
    write_trace(frame, tmp_path / name)
    back = validate_trace_frame(read_trace_frame(tmp_path / name))
    np.testing.assert_allclose(back["online_busy"], frame["online_busy"])
    assert back["node"].tolist() == frame["node"].tolist()


def test_same_scenario_and_seed_same_trace_other_seed_other_trace() -> None:
    a, b, c = cluster_trace(SMALL, 9), cluster_trace(SMALL, 9), cluster_trace(SMALL, 10)
    assert a.equals(b)
    assert not a["online_busy"].equals(c["online_busy"])
