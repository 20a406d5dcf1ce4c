"""gleaner.clients.prometheus against a real Prometheus server with backfilled history."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from gleaner.clients.prometheus import PrometheusClient, PrometheusError
from gleaner.testing.net import free_port
from gleaner.testing.prometheus import PrometheusServer, Series

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

T_END = 1_700_003_600.0
END = datetime.fromtimestamp(T_END, UTC)
STEP = 15.0
TIMES = [T_END - 600 + STEP * i for i in range(41)]  # the last 10 minutes, every 15 s


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusServer]:
    labels = {"namespace": "team", "job": "llm", "gpu": "0"}
    series = [
        Series(
            "gleaner_offline_job_timeslice_seconds_total",
            labels,
            [(t, 0.25 * (t - TIMES[0])) for t in TIMES],
            "counter",
        ),
        Series("gleaner_gpu_harvestable_memory_bytes", {"gpu": "0"}, [(t, 8.0) for t in TIMES]),
    ]
    with PrometheusServer(series) as server:
        yield server


def test_instant_query_at_a_time(prometheus: PrometheusServer) -> None:
    client = PrometheusClient(prometheus.url)
    result = client.query('rate(gleaner_offline_job_timeslice_seconds_total{job="llm"}[300s])', END)
    assert len(result) == 1
    assert result[0]["metric"]["namespace"] == "team"
    assert float(result[0]["value"][1]) == pytest.approx(0.25)
    assert float(result[0]["value"][0]) == pytest.approx(T_END)
    assert client.query("gleaner_offline_job_timeslice_seconds_total", datetime.now(UTC)) == []


def test_range_query_over_a_window(prometheus: PrometheusServer) -> None:
    client = PrometheusClient(prometheus.url)
    result = client.query_window("gleaner_gpu_harvestable_memory_bytes", END, 300, STEP)
    assert len(result) == 1
    values = result[0]["values"]
    assert len(values) == 21  # (end - 300 s, ..., end] at 15 s, both ends included
    assert {float(v) for _, v in values} == {8.0}


def test_async_callers_get_the_same_answer(prometheus: PrometheusServer) -> None:
    client = PrometheusClient(prometheus.url)
    promql = "gleaner_gpu_harvestable_memory_bytes"
    assert asyncio.run(client.aquery(promql, END)) == client.query(promql, END)


def test_a_bad_query_is_one_line_naming_server_and_query(prometheus: PrometheusServer) -> None:
    client = PrometheusClient(prometheus.url)
    with pytest.raises(PrometheusError) as bad:
        client.query("rate(oops[", END)
    message = str(bad.value)
    assert message.startswith(f"{prometheus.url}: query 'rate(oops[' failed")
    with pytest.raises(PrometheusError):
        client.query_range("rate(oops[", END, END, STEP)


def test_an_unreachable_server_raises() -> None:
    client = PrometheusClient(f"http://127.0.0.1:{free_port()}", retries=0, timeout_seconds=2)
    with pytest.raises(PrometheusError, match="failed"):
        client.query("up")
