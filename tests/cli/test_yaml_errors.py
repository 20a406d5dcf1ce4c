"""Broken YAML gets its line and column in ``predict``, ``place`` and ``crds --validate``;
``crds --validate`` goes on past a bad file; a bad nodes file is one line that says where."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from gleaner.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BROKEN = "apiVersion: gleaner.dev/v1alpha1\nkind: OfflineJob\nspec: {gpus: [1}\n"
WHERE = "not valid YAML: line 3, column 16: expected ',' or ']', but got '}'"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.csv"
    pd.DataFrame(
        [(float(t), "n1", 0, 0.0, 30.0) for t in range(3)],
        columns=["timestamp", "node", "gpu", "online_busy", "free_memory_gib"],
    ).to_csv(path, index=False)
    return path


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(args)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_predict_and_place_give_line_and_column(
    tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BROKEN)
    for args in (
        ["predict", "--job", str(bad), "--trace", str(trace), "--node", "n1", "--gpus", "0"],
        ["place", "--jobs", str(bad), "--trace", str(trace)],
    ):
        rc, _, err = _run(args, capsys)
        assert rc == 2
        assert err.count("\n") == 1 and WHERE in err, err


def test_crds_validate_reports_every_bad_file_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(BROKEN)
    second.write_text("kind: [\n")
    good = str(EXAMPLES / "llama-3.1-8b-batch.yaml")
    rc, out, err = _run(["crds", "--validate", str(first), good, str(second)], capsys)
    assert rc == 2
    assert f"{first}: {WHERE}" in out
    assert f"{second}: not valid YAML: line 2, column 1" in out
    assert "offlinejob.gleaner.dev/llama-8b-nightly-summaries valid" in out
    assert out.rstrip().endswith("1 valid, 0 invalid, 2 file(s) unreadable")
    assert err.strip() == "error: 2 file(s) unreadable; 0 of 1 objects are invalid"


def test_bad_nodes_file(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = tmp_path / "nodes.yaml"
    job = str(EXAMPLES / "llama-3.1-8b-batch.yaml")
    for text, needle in (
        ("nodes:\n- name: n1\n  gpuProdcut: H100\n", "unknown field(s) gpuProdcut"),
        ("nodes: [\n", "not valid YAML: line 2, column 1"),
    ):
        nodes.write_text(text)
        rc, _, err = _run(
            ["place", "--jobs", job, "--trace", str(trace), "--nodes", str(nodes)], capsys
        )
        assert rc == 2 and err.startswith(f"error: --nodes {nodes}") and needle in err, err
