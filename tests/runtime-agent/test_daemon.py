"""``gleaner agent``: HTTP, NodeTrace reports, Pods, bursts; the nvidia daemon's per-GPU timers."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import kubernetes
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gleaner.api import NodeTraceStatus, TraceSource
from gleaner.api.units import parse_duration
from gleaner.cli.main import main as cli_main
from gleaner.protocol import wire as p
from gleaner.runtime_agent.daemon import AgentDaemon, AgentError, AgentOptions, event_loop_factory
from gleaner.runtime_agent.policy import GateConfig, InstrumentationConfig, MemoryConfig
from gleaner.testing.agent import agent_process, simulated_agent
from gleaner.testing.kube import KubeEmulator, wait_for
from gleaner.testing.net import free_port

NODE = "sim-node-1"
T = TypeVar("T")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[KubeEmulator, str, subprocess.Popen[bytes]]]:
    with (
        KubeEmulator(tmp_path, namespaces=("default", "team")) as kube,
        simulated_agent(kube, tmp_path, NODE) as running,
    ):
        yield kube, running.base, running.proc


def _samples(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{base}/metrics", timeout=30).text  # a loaded machine: slow, not wrong
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


@pytest.mark.slow
def test_simulated_agent_end_to_end(agent: tuple[KubeEmulator, str, Any]) -> None:
    kube, base, _proc = agent
    health = httpx.get(f"{base}/healthz").json()
    assert health["backend"] == "simulated" and len(health["gpus"]) == 2

    def nodetrace() -> dict[str, Any] | None:
        objs = [o for o in kube.objects("gleaner.dev/v1alpha1/nodetraces") if o.get("status")]
        return objs[0] if objs else None

    obj = wait_for(nodetrace, timeout=20, message="a NodeTrace report")
    status = NodeTraceStatus.model_validate(obj["status"])
    assert obj["metadata"]["name"] == NODE
    assert status.source == TraceSource.SIMULATED
    assert [g.uuid for g in status.gpus] == health["gpus"]

    # An offline Pod bound to this node is picked up from its labels and annotation.
    core: Any = kubernetes.client.CoreV1Api(kube.api_client())
    core.create_namespaced_pod(
        "team",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "llm-batch-0",
                "namespace": "team",
                "labels": {"gleaner.dev/role": "offline", "gleaner.dev/job": "llm-batch"},
                "annotations": {"gleaner.dev/gpus": "0,1"},
            },
            "spec": {"nodeName": NODE, "containers": [{"name": "w", "image": "x"}]},
        },
    )
    wait_for(
        lambda: httpx.get(f"{base}/healthz").json()["offline_jobs"] == {"0": "team/llm-batch",
                                                                        "1": "team/llm-batch"},
        timeout=20, message="the offline job",
    )  # fmt: skip
    key = (
        "gleaner_offline_job_timeslice_seconds_total",
        (("job", "llm-batch"), ("namespace", "team"), ("node", NODE)),
    )
    wait_for(lambda: _samples(base).get(key, 0.0) > 0, timeout=20, message="job timeslices")

    # An injected burst closes both gates for its duration.
    r = httpx.post(f"{base}/simulate/burst", params={"gpus": "0,1", "seconds": 30, "busy": 1.0})
    assert r.status_code == 200, r.text
    gates = httpx.get(f"{base}/healthz").json()["gates"]
    assert gates == {"0": False, "1": False}
    before = _samples(base)[key]
    time.sleep(1.0)
    assert _samples(base)[key] == before  # no timeslices during the burst
    bad = httpx.post(f"{base}/simulate/burst", params={"gpus": "7", "seconds": 1})
    assert bad.status_code == 400 and "GPU 7" in bad.json()["detail"]

    def reported_job() -> bool:
        obj = nodetrace()
        if obj is None:
            return False
        st = NodeTraceStatus.model_validate(obj["status"])
        return st.offline_jobs == 1 and st.per_gpu[0].offline_job == "team/llm-batch"

    wait_for(reported_job, timeout=20, message="the job in the NodeTrace")


def test_cli_rejects_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["agent", "--backend", "simulated", "--node", "n", "--report-interval",
                     "soon", "--no-kube"]) == 2  # fmt: skip
    assert "bad duration" in capsys.readouterr().err
    assert cli_main(["agent", "--backend", "nvidia", "--node", "n", "--trace", "x.csv"]) == 2
    assert "--trace needs" in capsys.readouterr().err
    assert cli_main(["agent", "--backend", "gpu", "--node", "n"]) == 2


def test_parse_duration() -> None:
    assert parse_duration("15s") == 15.0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("2m") == 120.0
    assert parse_duration("3") == 3.0
    with pytest.raises(ValueError):
        parse_duration("0s")


def _recv_gate(sock: socket.socket, decoder: p.FrameDecoder) -> p.Gate:
    while True:
        msgs = p.recv_messages(sock, decoder)
        assert msgs is not None, "the agent closed the connection"
        for m in msgs:
            if isinstance(m, p.Gate):
                return m


@pytest.mark.parametrize("loop", ["asyncio", "auto"])
def test_nvidia_daemon_gates_each_gpu_on_its_own_timer(tmp_path: Path, loop: str) -> None:
    options = AgentOptions(
        backend="nvidia",
        node="n",
        metrics_host="127.0.0.1",
        metrics_port=0,
        socket_dir=tmp_path,
        gpus=2,
        kube=False,
        gate=GateConfig(cool_floor_s=0.05, cool_ceiling_s=0.05),
        shim_source=tmp_path / "absent.so",
        gate_loop=False,  # the socket path: per-edge frames drive the agent's own gate timers
    )
    daemon = AgentDaemon(options)
    runner = threading.Thread(
        target=lambda: (
            asyncio.run(daemon.run())
            if loop == "asyncio"
            else asyncio.Runner(loop_factory=event_loop_factory(loop)).run(daemon.run())
        ),
        daemon=True,
    )
    runner.start()
    sock_path = tmp_path / "agent.sock"
    wait_for(sock_path.exists, timeout=20, message="the control socket")
    time.sleep(0.1)  # both gates open (one cooldown after start)
    offline = []
    for gpu in (0, 1):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(str(sock_path))
        p.send_message(s, p.Hello(pid=1, role=p.Role.OFFLINE, gpu_indices=(gpu,), job=f"ns/j{gpu}"))
        dec = p.FrameDecoder()
        msgs = p.recv_messages(s, dec)
        assert msgs and isinstance(msgs[0], p.HelloAck) and msgs[0].gate_open
        offline.append((s, dec))
    online = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    online.connect(str(sock_path))
    p.send_message(online, p.Hello(pid=2, role=p.Role.ONLINE, gpu_indices=(0, 1)))
    try:
        for gpu in (0, 1):
            s, dec = offline[gpu]
            p.send_message(online, p.OnlineBusy(gpu=gpu, mono_ns=1))
            assert not _recv_gate(s, dec).enable
            t_idle = time.monotonic()
            p.send_message(online, p.OnlineIdle(gpu=gpu, mono_ns=2))
            assert _recv_gate(s, dec).enable  # this GPU's timer, at the end of its cooldown
            assert time.monotonic() - t_idle >= 0.045
        assert daemon.agent.accounting.totals.gpus[1].preemptions == 1
        health = daemon.health()
        assert health["gates"] == {"0": True, "1": True}
        assert health["offline_jobs"] == {"0": "ns/j0", "1": "ns/j1"}
    finally:
        online.close()
        for s, _ in offline:
            s.close()
        daemon.stop()
        runner.join(10)
    assert not runner.is_alive()


def test_event_loop_choice() -> None:
    assert event_loop_factory("asyncio") is asyncio.new_event_loop
    loop = event_loop_factory("auto")()
    try:
        assert isinstance(loop, asyncio.AbstractEventLoop)
    finally:
        loop.close()
    with pytest.raises(AgentError):
        event_loop_factory("trio")
    assert cli_main(["agent", "--backend", "nvidia", "--node", "n", "--event-loop", "x"]) == 2


def test_online_process_gone_while_busy_reenables_on_the_cooldown_timer(tmp_path: Path) -> None:
    options = AgentOptions(
        backend="nvidia",
        node="n",
        metrics_host="127.0.0.1",
        metrics_port=0,
        socket_dir=tmp_path,
        gpus=1,
        kube=False,
        gate=GateConfig(cool_floor_s=0.05, cool_ceiling_s=0.05),
        memory=MemoryConfig(initial_interval_s=10.0, max_interval_s=60.0),
        shim_source=tmp_path / "absent.so",
        # Opted out of the uninstrumented-process guard: without NVML a disconnected online
        # shim would hold the gate until it reconnects (test_instrumented.py,
        # test_nvml.py); this test is about the cooldown timer after an idle edge.
        instrumentation=InstrumentationConfig(enforce=False),
    )
    daemon = AgentDaemon(options)
    runner = threading.Thread(target=lambda: asyncio.run(daemon.run()), daemon=True)
    runner.start()
    sock_path = tmp_path / "agent.sock"
    wait_for(sock_path.exists, timeout=20, message="the control socket")
    wait_for(lambda: all(daemon.health()["gates"].values()), timeout=20, message="the gate to open")
    off = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    off.settimeout(5)
    off.connect(str(sock_path))
    p.send_message(off, p.Hello(pid=1, role=p.Role.OFFLINE, gpu_indices=(0,), job="ns/j"))
    dec = p.FrameDecoder()
    msgs = p.recv_messages(off, dec)
    assert msgs and isinstance(msgs[0], p.HelloAck) and msgs[0].gate_open
    online = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    online.connect(str(sock_path))
    try:
        p.send_message(online, p.Hello(pid=2, role=p.Role.ONLINE, gpu_indices=(0,)))
        p.send_message(online, p.OnlineBusy(gpu=0, mono_ns=1))
        assert not _recv_gate(off, dec).enable
        t_gone = time.monotonic()
        online.close()  # busy, then gone: idle from now on
        off.settimeout(2)
        assert _recv_gate(off, dec).enable
        # The gate's own timer, one cooldown after the disconnect; not whatever event
        # (a memory release, 10 s away; a scrape) happens to come next.
        assert 0.045 <= time.monotonic() - t_gone < 5.0  # the memory release is 10 s away
    finally:
        online.close()
        off.close()
        daemon.stop()
        runner.join(10)


def test_without_any_cluster_configuration(tmp_path: Path) -> None:
    """No service account, no kubeconfig: the nvidia agent exits with one clear line (and
    leaves no socket behind); the simulated one runs locally, metrics only, with a warning."""
    env = {
        **os.environ,
        "KUBERNETES_SERVICE_HOST": "",
        "KUBECONFIG": str(tmp_path / "absent.yaml"),
        "HOME": str(tmp_path),
    }
    base = [sys.executable, "-m", "gleaner.cli.main", "agent", "--node", "n",
            "--metrics-host", "127.0.0.1"]  # fmt: skip
    sockets = tmp_path / "run"
    sockets.mkdir()
    gpu = subprocess.run(
        [
            *base,
            "--backend",
            "nvidia",
            "--gpus",
            "1",
            "--no-nvml",
            "--socket-dir",
            str(sockets),
            "--metrics-port",
            str(free_port()),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert gpu.returncode == 2, gpu.stderr
    assert "error: no cluster configuration" in gpu.stderr and "--no-kube" in gpu.stderr
    assert "Traceback" not in gpu.stderr and list(sockets.iterdir()) == []
    sim = [*base[1:], "--backend", "simulated", "--gpus", "1", "--metrics-port", "{port}"]
    with agent_process(sim, tmp_path / "sim.log", env=env) as running:
        text = httpx.get(f"{running.base}/metrics", timeout=10).text
        assert "gleaner_gpu_offline_enabled_seconds_total" in text
        assert "running without a cluster, metrics only" in running.log.read_text()
