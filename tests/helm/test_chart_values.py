"""values.yaml, values.schema.json and the generated README table agree.

The schema refuses typos, wrong types and out-of-range numbers with a message naming the key;
every object the chart defines is closed (``additionalProperties: false``), the only open
ones being typed maps (labels, selectors) and Kubernetes types passed through to the API
server (marked ``pass-through`` in ``$comment``); every key is documented and the README
table and RBAC copies are what ``scripts/helm_generate.py`` writes.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import helm_python as helm
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "helm_generate", ROOT / "scripts" / "helm_generate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"operatr": {"replicaCount": 1}}, "additional properties 'operatr' not allowed"),
        ({"operator": {"replicas": 1}}, "additional properties 'replicas' not allowed"),
        ({"operator": {"replicaCount": -1}}, "/operator/replicaCount"),
        ({"operator": {"replicaCount": "two"}}, "got string, want integer"),
        ({"agent": {"metricsPort": 70000}}, "/agent/metricsPort"),
        ({"agent": {"backend": "amd"}}, "value must be one of 'nvidia', 'simulated'"),
        ({"agent": {"reportInterval": "15 seconds"}}, "/agent/reportInterval"),
        ({"agent": {"tolerations": [{"key": "a", "operater": "Exists"}]}}, "operater"),
        ({"crds": {"enabled": "yes"}}, "/crds/enabled"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"image": {"digest": "latest"}}, "/image/digest"),
        ({"operator": {"prometheusUrl": "prometheus:9090"}}, "/operator/prometheusUrl"),
        ({"operator": {"resources": {"limit": {"cpu": "1"}}}}, "/operator/resources"),
        ({"grafana": {"dashboard": {"labels": {"grafana_dashboard": 1}}}}, "got number"),
        ({"prometheus": {"serviceMonitor": {"enable": True}}}, "'enable' not allowed"),
    ],
)
def test_bad_values_are_refused_with_a_readable_message(
    chart: helm.Chart, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.render(values, name="gleaner", namespace="gleaner-system")
    text = str(caught.value)
    assert message in text
    assert len(text.splitlines()) <= 6, text


def test_default_values_pass_the_schema(chart: helm.Chart) -> None:
    chart.validate_schema(chart.values)


def _object_nodes(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield path, node
        for key, child in node.items():
            yield from _object_nodes(child, f"{path}/{key}")
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _object_nodes(child, f"{path}/{index}")


def test_every_chart_object_is_closed(chart: helm.Chart) -> None:
    schema = chart.schema
    assert schema is not None
    nodes = list(_object_nodes(schema, ""))
    assert len(nodes) > 20
    for path, node in nodes:
        if str(node.get("$comment", "")).startswith("pass-through:"):
            continue
        if "properties" in node:
            assert node.get("additionalProperties") is False, path
        else:
            closed = isinstance(node.get("additionalProperties"), dict)
            assert closed, f"{path} accepts anything: close it or mark it pass-through"


def test_every_key_is_documented_and_the_readme_is_current(generator: ModuleType) -> None:
    chart = ROOT / "helm" / "gleaner"
    values_text = (chart / "values.yaml").read_text()
    schema = json.loads((chart / "values.schema.json").read_text())
    rows = generator.value_rows(
        schema, yaml.safe_load(values_text), generator.comment_docs(values_text)
    )
    assert len(rows) > 60
    assert all(row.description for row in rows)
    stale = [
        str(path.relative_to(ROOT))
        for path, text in generator.expected_files().items()
        if path.read_text() != text
    ]
    assert stale == [], "run python scripts/helm_generate.py"


def test_generator_reads_comment_paragraphs_and_flags_gaps(generator: ModuleType) -> None:
    text = (
        "# Top.\n"
        "top:\n"
        "  # First line\n"
        "  # second line.\n"
        "  #\n"
        "  # Not in the table.\n"
        "  leaf: 1\n"
        "  list:\n"
        "    - key: ignored\n"
        "  bare: 2\n"
    )
    docs = generator.comment_docs(text)
    assert docs[("top",)] == "Top."
    assert docs[("top", "leaf")] == "First line second line."
    assert docs[("top", "bare")] == ""
    assert ("top", "list", "key") not in docs
    schema = {
        "properties": {
            "top": {
                "type": "object",
                "properties": {
                    "leaf": {"type": "integer"},
                    "list": {"type": "array"},
                    "bare": {"type": "integer"},
                },
            }
        }
    }
    with pytest.raises(generator.DocError, match=r"top\.list .*top\.bare"):
        generator.value_rows(schema, yaml.safe_load(text), docs)


def test_generator_check_mode_reports_a_stale_file(
    generator: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generator.main(["--check"]) == 0
    readme = "intro\n<!-- values-table:start -->\nold\n<!-- values-table:end -->\nend\n"
    replaced = generator.with_table(readme, "| a |")
    assert (
        replaced
        == "intro\n<!-- values-table:start -->\n\n| a |\n\n<!-- values-table:end -->\nend\n"
    )
    with pytest.raises(generator.DocError):
        generator.with_table("no markers", "| a |")
