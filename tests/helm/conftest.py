"""Fixtures of the Helm chart tests: the chart loaded by Helm's Go SDK, and a renderer.

``render(values)`` renders the chart offline through ``helm-python-sdk`` (Helm's own
engine, schema validation included) as release ``gleaner`` in ``gleaner-system`` and
returns the parsed manifests, NOTES.txt excluded; ``notes(values)`` returns NOTES.txt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "helm" / "gleaner"

Manifest = dict[str, Any]


@pytest.fixture(scope="session")
def chart_dir() -> Path:
    return CHART_DIR


@pytest.fixture(scope="session")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def render(chart: helm.Chart) -> Callable[..., list[Manifest]]:
    def _render(
        values: dict[str, Any] | None = None,
        *,
        namespace: str = "gleaner-system",
        name: str = "gleaner",
    ) -> list[Manifest]:
        rendered = chart.render(values, name=name, namespace=namespace, is_install=True)
        manifests: list[Manifest] = []
        for path, text in sorted(rendered.items()):
            if not path.endswith(".yaml"):
                continue
            manifests.extend(doc for doc in yaml.safe_load_all(text) if doc)
        return manifests

    return _render


@pytest.fixture(scope="session")
def notes(chart: helm.Chart) -> Callable[..., str]:
    def _notes(values: dict[str, Any] | None = None) -> str:
        rendered = chart.render(values, name="gleaner", namespace="gleaner-system")
        return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))

    return _notes
