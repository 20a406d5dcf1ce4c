"""What a trace cannot say: nodes files, GPU columns, and free memory in the wrong unit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gleaner.perfmodel import FileTraceSource, TraceFormatError, summarize_samples
from gleaner.perfmodel.inventory import InventoryError, NodeInfo, apply_inventory, parse_nodes

COLUMNS = ["timestamp", "node", "gpu", "online_busy", "free_memory_gib"]


def _frame(free: float = 40.0, **extra: list[Any]) -> pd.DataFrame:
    rows = [(float(t), "n1", g, float(t % 2 == 0), free) for t in range(4) for g in range(2)]
    df = pd.DataFrame(rows, columns=COLUMNS)
    for name, values in extra.items():
        df[name] = values * (len(df) // len(values))
    return df


def test_gleaner_form_and_kubernetes_nodes() -> None:
    own = {
        "nodes": [
            {"name": "n1", "labels": {"pool": "a"}, "gpuProduct": "NVIDIA H100 80GB HBM3"},
            {"name": "n2", "gpuMemoryGiB": 40},
        ]
    }
    listed = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "kind": "Node",
                "metadata": {"name": "n3", "labels": {"nvidia.com/gpu.memory": "81559"}},
            }
        ],
    }
    single = {"kind": "Node", "metadata": {"name": "n4", "labels": {"zone": "x"}}}
    nodes = parse_nodes([own, listed, single])
    assert nodes["n1"] == NodeInfo(labels={"pool": "a"}, gpu_product="NVIDIA H100 80GB HBM3")
    assert nodes["n2"].gpu_memory_gib == 40.0 and nodes["n2"].labels == {}
    assert nodes["n3"].gpu_memory_gib == pytest.approx(81559 / 1024)
    assert nodes["n4"].labels == {"zone": "x"} and nodes["n4"].gpu_product == ""


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        ([["n1"]], "document 1: expected a mapping, got list"),
        ([{"kind": "ConfigMap"}], "expected {nodes: [...]} or Kubernetes Node objects"),
        ([{"nodes": {"n1": {}}}], "nodes must be a list"),
        ([{"nodes": [{"labels": {}}]}], "a node has no name"),
        ([{"nodes": [{"name": "n1", "gpu": "H100"}]}], "unknown field(s) gpu"),
        ([{"nodes": [{"name": "n1", "gpuMemoryGiB": "lots"}]}], "must be a number, got 'lots'"),
        ([{"nodes": [{"name": "n1"}, {"name": "n1"}]}], "node n1 is given twice"),
        ([{"nodes": [{"name": "n1", "labels": ["a"]}]}], "labels must be a mapping"),
    ],
)
def test_bad_nodes_files_say_where(docs: list[object], message: str) -> None:
    with pytest.raises(InventoryError) as info:
        parse_nodes(docs)
    assert message in str(info.value)


def test_inventory_applies_labels_and_gpu_specs() -> None:
    (summary,) = summarize_samples(_frame()).values()
    summary = summary.with_labels({"zone": "x", "pool": "old"})
    info = NodeInfo(labels={"pool": "new"}, gpu_product="P", gpu_memory_gib=80)
    out = apply_inventory({"n1": summary, "other": summary}, {"n1": info, "absent": info})
    assert out["n1"].labels == {"zone": "x", "pool": "new"}
    assert {(g.product, g.memory_gib) for g in out["n1"].gpus} == {("P", 80.0)}
    assert out["other"] is summary


def test_trace_columns_give_products_and_memory() -> None:
    df = _frame(gpu_product=["H100", "A100"], gpu_memory_gib=[80.0, 40.0])
    (summary,) = summarize_samples(df).values()
    assert [(g.product, g.memory_gib) for g in summary.gpus] == [("H100", 80.0), ("A100", 40.0)]
    nodes = {"n1": NodeInfo(labels={"pool": "a"}, gpu_product="file")}
    (summary,) = summarize_samples(_frame(), inventory=nodes).values()
    assert summary.labels == {"pool": "a"}
    assert [g.product for g in summary.gpus] == ["file", "file"]


@pytest.mark.parametrize(
    ("free", "extra", "inventory", "message"),
    [
        # DCGM's FB_FREE is in MiB: 60000 "GiB" is more than any GPU has.
        (60000.0, {}, None, "no GPU has more than 512 GiB); the values look like MiB"),
        # With the GPU's memory known, a MiB value just above it is caught too.
        (81000.0, {"gpu_memory_gib": [80.0]}, None, "GPU 0 of node n1 has 80 GiB); the values l"),
        # A value that is no likely unit points at the GPU memory given instead.
        (70.0, {}, {"n1": NodeInfo(gpu_memory_gib=40.0)}, "40 GiB); free_memory_gib is in GiB"),
        (6e10, {}, None, "the values look like bytes: divide them by 1073741824"),
    ],
)
def test_free_memory_beyond_the_gpu_names_the_likely_unit(
    free: float,
    extra: dict[str, list[Any]],
    inventory: dict[str, NodeInfo] | None,
    message: str,
) -> None:
    with pytest.raises(TraceFormatError) as info:
        summarize_samples(_frame(free, **extra), inventory=inventory)
    text = str(info.value)
    assert message in text and "column 'free_memory_gib'" in text and "(row 1: " in text


def test_free_memory_within_the_gpu_is_accepted() -> None:
    (summary,) = summarize_samples(_frame(80.5, gpu_memory_gib=[80.0])).values()
    assert summary.memory.quantile(0.5) == pytest.approx(80.5, abs=0.5)


def test_iso_timestamps_read_as_epoch_seconds(tmp_path: Path) -> None:
    numeric = _frame()
    iso = numeric.copy()
    iso["timestamp"] = [f"2024-06-01T00:00:0{int(t)}Z" for t in numeric["timestamp"]]
    shifted = numeric.copy()
    shifted["timestamp"] += pd.Timestamp("2024-06-01T00:00:00Z").timestamp()
    path = tmp_path / "iso.csv"
    iso.to_csv(path, index=False)
    (got,) = FileTraceSource(path).load().values()
    (want,) = summarize_samples(shifted).values()
    assert got.equals(want) and got.window_end == want.window_end


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("yesterday,a,0,1,3", "column 'timestamp' must be epoch seconds or an ISO 8601 time "
         "such as 2024-06-01T12:00:00Z (row 2: 'yesterday')"),
        ("2,a,100,1,3", "column 'gpu' must be an integer 0..15 (row 2: 100)"),
        ("2,a,0,1,70000", "(row 2: 70000; no GPU has more than 512 GiB)"),
    ],
)  # fmt: skip
def test_errors_show_values_as_written(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(",".join(COLUMNS) + "\n1,a,0,1,3\n" + content + "\n")
    with pytest.raises(TraceFormatError) as info:
        FileTraceSource(path).load()
    assert message in str(info.value)
    assert "np." not in str(info.value)
