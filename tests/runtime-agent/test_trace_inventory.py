"""A trace decides the simulated agent's inventory: no GPU without online load is reported."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pytest

from gleaner.runtime_agent.daemon import AgentDaemon, AgentOptions
from gleaner.runtime_agent.simulated import TraceOnline, trace_inventory

COLUMNS = ["timestamp", "node", "gpu", "online_busy", "free_memory_gib"]


def _trace(tmp_path: Path, gpus: tuple[int, ...] = (0, 1)) -> Path:
    path = tmp_path / "t.csv"
    rows = [(float(t), "n", g, float(t % 2), 30.0) for t in range(6) for g in gpus]
    pd.DataFrame(rows, columns=COLUMNS).to_csv(path, index=False)
    return path


def test_trace_inventory_is_the_traces_gpus() -> None:
    inventory, warning = trace_inventory("n", [2, 0, 2], None, 80.0)
    assert [g.index for g in inventory] == [0, 2] and warning is None
    assert {g.memory_gi_b for g in inventory} == {80.0}
    _, warning = trace_inventory("n", [0, 1], 4, 80.0)
    assert warning == (
        "--gpus 4 ignored: the trace has 2 GPU(s) for node n (0, 1), "
        "and the agent reports only those"
    )
    with pytest.raises(ValueError, match="no GPUs for node n"):
        trace_inventory("n", [], None, 80.0)


def test_daemon_reports_no_phantom_gpus(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trace = _trace(tmp_path)
    with caplog.at_level(logging.WARNING, logger="gleaner.runtime_agent"):
        daemon = AgentDaemon(
            AgentOptions(backend="simulated", node="n", trace=trace, gpus=4, kube=False)
        )
    assert [g.index for g in daemon.inventory] == [0, 1]
    assert sorted(daemon.agent.gpus) == [0, 1]
    assert "--gpus 4 ignored: the trace has 2 GPU(s)" in caplog.text
    # Without --gpus, the trace alone decides, silently.
    caplog.clear()
    daemon = AgentDaemon(AgentOptions(backend="simulated", node="n", trace=trace, kube=False))
    assert [g.index for g in daemon.inventory] == [0, 1] and "ignored" not in caplog.text


def test_trace_online_reads_iso_times_and_says_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "iso.csv"
    rows = [(f"2024-06-01T00:00:0{t}Z", "n", 0, 1.0, 30.0) for t in range(4)]
    pd.DataFrame(rows, columns=COLUMNS).to_csv(path, index=False)
    online = TraceOnline.from_file(path, "n")
    assert [s.duration for s in online.samples[0]] == [1.0, 1.0, 1.0, 1.0]
    path.write_text(",".join(COLUMNS) + "\n0,n,0,2.5,30\n")
    with pytest.raises(
        ValueError, match=r"column 'online_busy' must be within 0\.\.1 \(row 1: 2\.5\)"
    ):
        TraceOnline.from_file(path, "n")


def test_a_trace_in_mib_is_refused_with_the_likely_unit(tmp_path: Path) -> None:
    path = tmp_path / "mib.csv"
    rows = [(float(t), "n", 0, 0.5, 81000.0) for t in range(3)]
    pd.DataFrame(rows, columns=COLUMNS).to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"the values look like MiB \(DCGM's FB_FREE unit\)"):
        TraceOnline.from_file(path, "n")


def test_trace_columns_name_the_gpus(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    rows = [
        (float(t), "n", g, 0.5, 30.0, "NVIDIA H100 80GB HBM3" if g == 0 else "", 80.0)
        for t in range(3)
        for g in range(2)
    ]
    pd.DataFrame(rows, columns=[*COLUMNS, "gpu_product", "gpu_memory_gib"]).to_csv(
        path, index=False
    )
    daemon = AgentDaemon(AgentOptions(backend="simulated", node="n", trace=path, kube=False))
    assert [(g.product, g.memory_gi_b) for g in daemon.inventory] == [
        ("NVIDIA H100 80GB HBM3", 80.0),
        ("Simulated GPU", 80.0),
    ]
