"""Fixtures for the dashboard tests: the example record, its data, and a TestClient."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gleaner.dashboard.app import create_app
from gleaner.dashboard.build import DashboardData, build_dashboard
from gleaner.dashboard.model import ClusterRecord
from gleaner.dashboard.sources import StaticSource
from gleaner.testing.dashboard import example_record


@pytest.fixture
def record() -> ClusterRecord:
    return example_record()


@pytest.fixture
def data(record: ClusterRecord) -> DashboardData:
    return build_dashboard(record)


@pytest.fixture
def client(data: DashboardData) -> Iterator[TestClient]:
    with TestClient(create_app(StaticSource(data)), raise_server_exceptions=False) as c:
        yield c
