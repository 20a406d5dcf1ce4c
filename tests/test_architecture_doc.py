"""docs/architecture.md stays true to the repository it describes.

Contract: the components table names folders that exist (rows marked "(planned)" excepted)
with the import name their ``gleaner/<package>/`` gives; the distributions table names each
pyproject's distribution; the import picture lists the import-linter layers of
pyproject.toml in the same order; the metric names it calls a contract are the agent's.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", DOC, re.MULTILINE | re.DOTALL)
    assert m is not None, f"docs/architecture.md has no '## {title}' section"
    return m.group(1)


def table_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set("".join(cells)) <= {"-"}:
            continue
        rows.append(cells)
    return rows[1:]  # without the header


def test_component_folders_exist_and_match_their_import_names() -> None:
    rows = table_rows(section("Components"))
    assert len(rows) >= 14
    checked = 0
    for component, folder, import_name, *_ in rows:
        path = folder.strip("`")
        if "(planned)" in component:
            continue
        assert list(ROOT.glob(path)), f"{component}: {path} does not exist"
        m = re.fullmatch(r"[\w.-]+/gleaner/(\w+)/", path)
        if m:
            assert import_name.strip("`") == f"gleaner.{m.group(1)}", component
            checked += 1
    assert checked >= 11


def test_distributions_are_the_pyprojects() -> None:
    rows = table_rows(section("Distributions, and where each one goes"))
    named = {row[0].strip("`"): row[1] for row in rows}
    for folder in (".", "protocol", "vllm-hook", "testing"):
        name = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]["name"]
        assert name in named, name
        expected = "`pyproject.toml` (root)" if folder == "." else f"`{folder}/`"
        assert named[name] == expected, name


def test_the_import_picture_is_the_layers_contract() -> None:
    contract = next(
        c for c in PYPROJECT["tool"]["importlinter"]["contracts"] if c["type"] == "layers"
    )
    picture = section("Who may import whom").split("```", 2)[1]
    # Each layer line: the layer's names, then (after a wide gap) a note about it.
    drawn = [
        re.split(r"\s{2,}", line.strip())[0]
        for line in picture.splitlines()
        if line.strip().startswith("gleaner.")
    ]
    assert drawn == contract["layers"]


def test_contract_metric_names_are_exported_by_the_agent() -> None:
    source = (ROOT / "runtime-agent" / "gleaner" / "runtime_agent" / "metrics.py").read_text()
    names = set(re.findall(r"`(gleaner_[a-z_]+)(?:\{[^}]*\})?`", section("Contracts")))
    agent_names = {n for n in names if not n.startswith("gleaner_operator_")}
    assert len(agent_names) >= 6
    # Counters are declared without their _total suffix in prometheus_client.
    missing = [n for n in agent_names if n.removesuffix("_total") not in source]
    assert not missing, missing
