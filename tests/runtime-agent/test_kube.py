"""NodeTrace reporting and offline-Pod discovery against the kmock API emulator over HTTP."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kmock
import pytest

from gleaner.api import NodeTraceStatus
from gleaner.clients.kube import Credentials, SyncKubeClient
from gleaner.runtime_agent.daemon import AgentDaemon, AgentOptions
from gleaner.runtime_agent.kube import (
    PodWatcher,
    ReportError,
    offline_jobs_from_pods,
    write_nodetrace,
)
from gleaner.runtime_agent.policy import Accounting
from gleaner.runtime_agent.reporting import ReportWindow
from gleaner.runtime_agent.simulated import synthetic_inventory
from gleaner.testing.kube import KubeEmulator

NODE = "gpu-node-1"
T0 = datetime(2025, 3, 1, tzinfo=UTC)
NODETRACES = "gleaner.dev/v1alpha1/nodetraces"


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeEmulator]:
    with KubeEmulator(tmp_path, namespaces=("default", "team")) as k:
        yield k


def _status(seconds: float, busy_until: float = 0.0) -> NodeTraceStatus | None:
    acc = Accounting([0, 1])
    rep = ReportWindow(window_s=3600)
    rep.add(T0, acc.snapshot(0.0))
    acc.set_online_busy(0.0, 0, 1)
    acc.set_online_busy(busy_until, 0, 0)
    acc.set_offline_enabled(busy_until, 0, 1)
    rep.add(T0 + timedelta(seconds=seconds), acc.snapshot(seconds))
    return rep.status(synthetic_inventory(NODE, 2, 80), {0: "team/llm"})


def _trace(kube: KubeEmulator) -> dict[str, Any]:
    objs = [o for o in kube.objects(NODETRACES) if o["metadata"]["name"] == NODE]
    assert len(objs) == 1
    return objs[0]


def test_create_then_patch_nodetrace_status(kube: KubeEmulator) -> None:
    client = kube.client()
    first = _status(15.0, busy_until=5.0)
    assert first is not None
    write_nodetrace(client, NODE, first)
    obj = _trace(kube)
    assert obj["spec"]["nodeName"] == NODE
    status = NodeTraceStatus.model_validate(obj["status"])
    assert status.per_gpu[0].online_busy_seconds == pytest.approx(5.0)
    assert status.per_gpu[0].offline_job == "team/llm"
    assert status.gpus[0].uuid.startswith("GPU-")
    second = _status(30.0, busy_until=20.0)
    assert second is not None
    write_nodetrace(client, NODE, second)
    status = NodeTraceStatus.model_validate(_trace(kube)["status"])
    assert status.per_gpu[0].online_busy_seconds == pytest.approx(20.0)
    assert status.window is not None and status.window.seconds == pytest.approx(30.0)


def test_api_outage_raises_and_the_next_report_covers_the_gap(kube: KubeEmulator) -> None:
    # A port nobody listens on: the API server is down.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    dead = SyncKubeClient(Credentials(server=f"http://127.0.0.1:{dead_port}"))
    acc = Accounting([0])
    rep = ReportWindow(window_s=3600)
    rep.add(T0, acc.snapshot(0.0))
    acc.set_offline_enabled(0.0, 0, 1)
    inv = synthetic_inventory(NODE, 1, 80)
    for k in (1, 2, 3):  # three failed reports, 15 s apart
        rep.add(T0 + timedelta(seconds=15 * k), acc.snapshot(15.0 * k))
        st = rep.status(inv, {})
        assert st is not None
        with pytest.raises(ReportError):
            write_nodetrace(dead, NODE, st, attempts=2, backoff_s=0.01, timeout_s=1)
        rep.failed()
    rep.add(T0 + timedelta(seconds=60), acc.snapshot(60.0))
    st = rep.status(inv, {})
    assert st is not None
    write_nodetrace(kube.client(), NODE, st)
    got = NodeTraceStatus.model_validate(_trace(kube)["status"])
    assert got.window is not None and got.window.seconds == pytest.approx(60.0)
    assert got.per_gpu[0].offline_enabled_seconds == pytest.approx(60.0)
    assert rep.failures == 3


def test_report_window_slides() -> None:
    acc = Accounting([0])
    acc.set_online_busy(0.0, 0, 1)
    rep = ReportWindow(window_s=30)
    for k in range(0, 7):
        rep.add(T0 + timedelta(seconds=10 * k), acc.snapshot(10.0 * k))
    st = rep.status(synthetic_inventory(NODE, 1, 80), {})
    assert st is not None and st.window is not None
    assert st.window.seconds == pytest.approx(30.0)
    assert st.window.start == T0 + timedelta(seconds=30)
    assert ReportWindow().status([], {}) is None


def _pod(name: str, ns: str, job: str, gpus: str, node: str = NODE, **extra: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"gleaner.dev/role": "offline", "gleaner.dev/job": job},
            "annotations": {"gleaner.dev/gpus": gpus},
        },
        "spec": {"nodeName": node, "containers": [{"name": "w", "image": "x"}]},
        "status": {"phase": "Running"},
    }
    pod.update(extra)
    return pod


def test_offline_jobs_from_pods() -> None:
    pods = [
        _pod("a-0", "team", "a", "0,1"),
        _pod("b-0", "team", "b", "2"),
        _pod("c-0", "team", "c", "3", node="elsewhere"),
        _pod("d-0", "team", "d", "3", status={"phase": "Succeeded"}),
        _pod("e-0", "x", "", "3"),
    ]
    assert offline_jobs_from_pods(pods, NODE) == {0: "team/a", 1: "team/a", 2: "team/b"}


def test_pod_watcher_follows_the_nodes_offline_pods(kube: KubeEmulator) -> None:
    import kubernetes

    client = kube.api_client()
    core: Any = kubernetes.client.CoreV1Api(client)
    core.create_namespaced_pod("team", _pod("llm-0", "team", "llm", "0,1"))
    seen: list[dict[int, str]] = []
    changed = threading.Event()

    def on_change(jobs: dict[int, str]) -> None:
        seen.append(jobs)
        changed.set()

    watcher = PodWatcher(kube.client(), NODE, on_change, watch_timeout_s=2, retry_s=0.2)
    watcher.start()
    try:
        assert changed.wait(10)
        assert seen[-1] == {0: "team/llm", 1: "team/llm"}
        changed.clear()
        core.create_namespaced_pod("team", _pod("other-0", "team", "other", "2"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and 2 not in seen[-1]:
            changed.wait(0.5)
            changed.clear()
        assert seen[-1] == {0: "team/llm", 1: "team/llm", 2: "team/other"}
        core.delete_namespaced_pod("llm-0", "team")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and 0 in seen[-1]:
            changed.wait(0.5)
            changed.clear()
        assert seen[-1] == {2: "team/other"}
    finally:
        watcher.stop()


def test_daemon_reporter_survives_refusals_and_an_outage(tmp_path: Path) -> None:
    """A create refused (403), then an API server that is down: reports fail, none raises;
    the first report after the outage covers the whole window."""
    t = [0.0]
    options = AgentOptions(
        backend="simulated", node=NODE, gpus=1, kube=True, report_attempts=2, report_backoff_s=0.01
    )
    daemon = AgentDaemon(options, clock=lambda: t[0])
    assert asyncio.run(daemon.report_once())  # the first snapshot: nothing to write yet
    with KubeEmulator(tmp_path / "refusing") as refusing:
        refusing.emulator[kmock.method("post")] << 403  # NodeTraces cannot be created
        daemon._api_client = refusing.client()
        t[0] = 15.0
        assert not asyncio.run(daemon.report_once())
        assert daemon.last_report_error is not None and "403" in daemon.last_report_error
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    daemon._api_client = SyncKubeClient(Credentials(server=f"http://127.0.0.1:{dead_port}"))
    for k in (2, 3):
        t[0] = 15.0 * k
        assert not asyncio.run(daemon.report_once())
    with KubeEmulator(tmp_path / "live") as live:
        daemon._api_client = live.client()
        t[0] = 60.0
        assert asyncio.run(daemon.report_once())
        got = NodeTraceStatus.model_validate(_trace(live)["status"])
    assert got.window is not None and got.window.seconds == pytest.approx(60.0)
    per = got.per_gpu[0]  # enabled never while busy: both fit in the window
    assert 0 < per.online_busy_seconds + per.offline_enabled_seconds <= 60.0 + 1e-6
    assert daemon.reports.failures == 3 and daemon.reports_ok == 1
    assert daemon.last_report_error is None


def test_report_window_holds_a_wall_clock_that_steps_back() -> None:
    acc = Accounting([0])
    rep = ReportWindow(window_s=3600)
    rep.add(T0, acc.snapshot(0.0))
    acc.set_online_busy(0.0, 0, 1)
    rep.add(T0 - timedelta(seconds=5), acc.snapshot(10.0))  # NTP stepped the clock back
    st = rep.status(synthetic_inventory(NODE, 1, 80), {})
    assert st is not None and st.window is not None
    assert st.window.seconds == pytest.approx(10.0)
    assert st.per_gpu[0].online_busy_seconds == pytest.approx(10.0)
