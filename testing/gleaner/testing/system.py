"""The whole Gleaner system on one machine, as real processes on loopback (end-to-end tests).

Contract. ``GleanerSystem(workdir, nodes)`` starts, in this order,

1. the Kubernetes API: with ``tenant`` (``gleaner.testing.tenant.Tenant``, made with the
   namespaces in ``NAMESPACES``), the tenant's share of the real control plane
   (docs/controlplane.md), where every ``SimNode`` is also a KWOK Node; without, kmock's
   emulator over HTTP (``gleaner.testing.kube.KubeEmulator``, in this process), with the
   CRDs from ``crds/`` and namespaces ``default`` and ``batch``;
2. one ``gleaner agent --backend simulated`` process per ``SimNode``, each replaying its own
   online trace (a trace-format CSV written by ``write_traces`` from a seeded generator),
   reporting its NodeTrace every ``agent_report_interval`` over a short ``agent_window``;
3. the real ``prometheus`` scraping every agent and the operator every second
   (``gleaner.testing.processes.ScrapingPrometheus``);
4. ``gleaner operator`` with short intervals (``OPERATOR_FAST_ARGS``) and its HTTP server;
5. on the emulator only, a stand-in kubelet (a thread): the emulator has none, so Pods
   bound to a node whose agent is alive are moved to phase Running, as a kubelet would once
   the containers start. On the control plane KWOK runs them.

and waits until every agent answers ``/healthz``, every NodeTrace has a window, Prometheus
scrapes every target and the operator answers ``/healthz``. ``stop()`` ends everything it
started (process groups, the emulator thread), also after a failed start.
``diagnostics()`` says where to look: each process' log path and last lines, and the
objects in the API server.

Everything a scenario does goes through the same doors a user or a cluster would use: the
Kubernetes API (``api``), the agents' HTTP endpoints (``burst``), the operator's HTTP server
(``operator_metrics``, ``dashboard``), Prometheus (``prom``) and the ``gleaner`` CLI
(``gleaner(...)``). Nothing is imported from the operator or the agent.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.error
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self, TypeVar

import yaml

from gleaner.api import GROUP, VERSION
from gleaner.api.contract import OFFLINE_SELECTOR, job_selector
from gleaner.testing.kube import KubeApi, KubeEmulator
from gleaner.testing.net import free_port
from gleaner.testing.processes import (
    ManagedProcess,
    ProcessSet,
    ScrapingPrometheus,
    http_json,
    http_status,
    http_text,
    wait_http,
)
from gleaner.testing.tenant import Tenant

T = TypeVar("T")

NAMESPACES = ("default", "batch")

OPERATOR_FAST_ARGS: tuple[str, ...] = (
    "--sla-window=2s",
    "--max-sla-window=2s",  # judge each 2 s sample, not the jobs' 30 min slaWindow
    "--sla-grace=2s",
    "--sla-violations=2/3",
    "--eviction-backoff=1s",
    "--eviction-backoff-max=4s",
    "--unschedulable-backoff=1s",
    "--requeue-interval=1s",
    "--min-pass-interval=0.2s",
    "--trace-stale-after=6s",
    "--watch-timeout=60s",
    "--peering-lifetime=5s",
)
"""Operator flags that make a whole scenario take seconds instead of minutes."""


# ---------------------------------------------------------------------------------------
# Online traces (pure)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimNode:
    """One simulated GPU node: mean online busy fraction and free memory per GPU.

    ``aligned``: all GPUs share one busy pattern (what tensor-parallel offline jobs need);
    otherwise each GPU jitters on its own.
    """

    name: str
    busy: tuple[float, ...]
    free_gib: float = 70.0
    aligned: bool = False
    memory_gib: float = 80.0

    @property
    def gpus(self) -> int:
        return len(self.busy)


TRACE_COLUMNS = ("timestamp", "node", "gpu", "online_busy", "free_memory_gib")


def trace_rows(
    node: SimNode, *, seconds: int = 60, step: float = 1.0, seed: int = 0, jitter: float = 0.02
) -> list[tuple[float, str, int, float, float]]:
    """Trace-format samples of ``node`` (seeded: same arguments, same rows)."""
    rng = random.Random(f"{seed}/{node.name}")
    rows: list[tuple[float, str, int, float, float]] = []
    for i in range(round(seconds / step)):
        shared = rng.uniform(-jitter, jitter)
        for gpu, mean in enumerate(node.busy):
            noise = shared if node.aligned else rng.uniform(-jitter, jitter)
            busy = min(1.0, max(0.0, mean + noise)) if mean > 0 else 0.0
            rows.append((round(i * step, 3), node.name, gpu, round(busy, 4), node.free_gib))
    return rows


def write_trace(path: Path, rows: Iterable[tuple[float, str, int, float, float]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(TRACE_COLUMNS)
        writer.writerows(rows)
    return path


def write_traces(
    directory: Path, nodes: Sequence[SimNode], *, seed: int = 0
) -> tuple[dict[str, Path], Path]:
    """One trace file per node (what each agent replays) and one with every node (what
    ``gleaner place --trace`` reads): ``({node: path}, combined path)``."""
    per_node: dict[str, Path] = {}
    combined: list[tuple[float, str, int, float, float]] = []
    for node in nodes:
        rows = trace_rows(node, seed=seed)
        per_node[node.name] = write_trace(directory / f"trace-{node.name}.csv", rows)
        combined.extend(rows)
    return per_node, write_trace(directory / "trace-all.csv", combined)


# ---------------------------------------------------------------------------------------
# Polling
# ---------------------------------------------------------------------------------------


def poll(
    predicate: Callable[[], T | None],
    *,
    timeout: float,
    what: str | Callable[[], str],
    interval: float = 0.2,
) -> T:
    """Call ``predicate`` until it returns something truthy (exceptions count as "not yet");
    on timeout raise ``TimeoutError`` naming ``what`` and the last exception seen."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except Exception as exc:  # not there yet: connection refused, 404, KeyError...
            last_error = exc
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            extra = f" (last error: {last_error!r})" if last_error is not None else ""
            raise TimeoutError(f"after {timeout:.0f} s: {text}{extra}")
        time.sleep(interval)


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text exposition -> {(sample name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return out


def report_time(nodetrace: Mapping[str, Any]) -> datetime:
    """A NodeTrace's ``status.lastReportTime`` as an aware datetime."""
    text = str((nodetrace.get("status") or {})["lastReportTime"])
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# ---------------------------------------------------------------------------------------
# Processes of the system
# ---------------------------------------------------------------------------------------


@dataclass
class Agent:
    """One running (or stopped) agent process and what it was started with."""

    node: SimNode
    port: int
    trace: Path
    process: ManagedProcess

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class GleanerSystem:
    """See the module docstring. Use as a context manager or call start()/stop()."""

    workdir: Path
    nodes: Sequence[SimNode]
    seed: int = 0
    agent_report_interval: str = "1s"
    agent_window: str = "10s"
    operator_args: Sequence[str] = OPERATOR_FAST_ARGS
    operator_env: Mapping[str, str] = field(default_factory=dict)
    operator_reads_prometheus: bool = False
    """Start the operator with ``--prometheus-url`` (traces and SLA observations from the
    agents' metrics in Prometheus instead of NodeTraces)."""
    startup_timeout: float = 90.0
    tenant: Tenant | None = None
    """The share of the real control plane to run on; None: kmock's emulator."""
    kube: KubeEmulator | None = field(default=None, init=False)
    api: KubeApi = field(init=False)
    prom: ScrapingPrometheus = field(init=False)
    processes: ProcessSet = field(default_factory=ProcessSet, init=False)
    agents: dict[str, Agent] = field(default_factory=dict, init=False)
    operator: ManagedProcess | None = field(default=None, init=False)
    operator_port: int = field(default=0, init=False)
    combined_trace: Path = field(default=Path(), init=False)
    _kubelet_stop: threading.Event = field(default_factory=threading.Event, init=False)
    _kubelet: threading.Thread | None = field(default=None, init=False)

    # -- lifecycle ------------------------------------------------------------------------

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        if self.tenant is None:
            self.kube = KubeEmulator(self.workdir / "kube", namespaces=NAMESPACES)
        self.prom = ScrapingPrometheus(self.workdir / "prometheus")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def kubeconfig(self) -> Path:
        """The kubeconfig every process and the CLI use."""
        if self.tenant is not None:
            return self.tenant.kubeconfig
        assert self.kube is not None
        return self.kube.kubeconfig

    def _start(self) -> None:
        if self.tenant is not None:
            self.api = KubeApi(self.tenant.plane)
            for node in self.nodes:
                self.tenant.add_kwok_node(node.name)
        else:
            assert self.kube is not None
            self.kube.start()
            self.api = KubeApi(self.kube)
        traces, self.combined_trace = write_traces(
            self.workdir / "traces", self.nodes, seed=self.seed
        )
        self.processes.add(self.prom.build()).start()
        for node in self.nodes:
            self._launch_agent(node, traces[node.name])
        self.start_operator()
        if self.kube is not None:
            self._kubelet = threading.Thread(target=self._kubelet_loop, name="kubelet", daemon=True)
            self._kubelet.start()
        self.prom.wait_ready()
        for agent in self.agents.values():
            self.wait_agent_ready(agent.node.name)
        self.wait_operator_ready()
        self._update_targets()
        poll(
            self._all_targets_up,
            timeout=self.startup_timeout,
            what="Prometheus scraping every agent and the operator",
        )

    def stop(self) -> None:
        self._kubelet_stop.set()
        if self._kubelet is not None:
            self._kubelet.join(timeout=5)
        self.processes.stop_all()
        if self.kube is not None:
            with contextlib.suppress(Exception):
                self.kube.stop()

    # -- environment ----------------------------------------------------------------------

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of every process: KUBECONFIG at the emulator, unbuffered output."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("GLEANER_", "KUBERNETES_SERVICE"))
        }
        env.update({"KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"})
        env.update(extra or {})
        return env

    def gleaner(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run the ``gleaner`` CLI (``python -m gleaner.cli.main``) against this system."""
        return subprocess.run(
            [sys.executable, "-m", "gleaner.cli.main", *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            check=False,
        )

    # -- agents ---------------------------------------------------------------------------

    def _launch_agent(self, node: SimNode, trace: Path) -> Agent:
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "gleaner.cli.main",
            "agent",
            "--backend=simulated",
            f"--node={node.name}",
            f"--gpus={node.gpus}",
            f"--gpu-memory-gib={node.memory_gib}",
            f"--metrics-port={port}",
            "--metrics-host=127.0.0.1",
            f"--trace={trace}",
            f"--report-interval={self.agent_report_interval}",
            f"--window={self.agent_window}",
            f"--kubeconfig={self.kubeconfig}",
        ]
        process = ManagedProcess(
            f"agent {node.name}", argv, self.workdir / "logs" / f"agent-{node.name}.log"
        )
        process.env = self.env()
        agent = Agent(node, port, trace, process)
        self.agents[node.name] = agent
        self.processes.add(process).start()
        return agent

    def add_agent(self, node: SimNode) -> Agent:
        """Start an agent for a node that was not there (capacity appears)."""
        if node.name in self.agents:
            raise ValueError(f"agent {node.name} exists")
        if self.tenant is not None:
            self.tenant.add_kwok_node(node.name)
        rows = trace_rows(node, seed=self.seed)
        trace = write_trace(self.workdir / "traces" / f"trace-{node.name}.csv", rows)
        agent = self._launch_agent(node, trace)
        self.wait_agent_ready(node.name)
        self._update_targets()
        return agent

    def kill_agent(self, node: str) -> None:
        """The node's agent dies (SIGKILL): no more NodeTrace reports, no more metrics."""
        self.agents[node].process.kill()

    def restart_agent(self, node: str) -> Agent:
        """Start a killed agent again (same port, same trace) and wait until it reports."""
        agent = self.agents[node]
        agent.process.start()
        self.wait_agent_ready(node, fresh_after=datetime.now(UTC))
        return agent

    def agent_alive(self, node: str) -> bool:
        agent = self.agents.get(node)
        return agent is not None and agent.process.alive()

    def wait_agent_ready(self, node: str, fresh_after: datetime | None = None) -> dict[str, Any]:
        """Wait for the agent's /healthz and a NodeTrace with a window (reported after
        ``fresh_after`` when given)."""
        agent = self.agents[node]
        wait_http(f"{agent.url}/healthz", timeout=self.startup_timeout, process=agent.process)

        def reported() -> dict[str, Any] | None:
            trace = self.nodetrace(node) or {}
            status = trace.get("status") or {}
            if not status.get("window"):
                return None
            if fresh_after is not None and report_time(trace) <= fresh_after:
                return None
            return trace

        return poll(reported, timeout=self.startup_timeout, what=f"NodeTrace {node} reported")

    def burst(self, node: str, gpus: Sequence[int], seconds: float, busy: float = 1.0) -> Any:
        """Inject an online burst on ``node``'s GPUs through the agent's HTTP endpoint."""
        agent = self.agents[node]
        query = f"gpus={','.join(map(str, gpus))}&seconds={seconds}&busy={busy}"
        return http_json(f"{agent.url}/simulate/burst?{query}", method="POST")

    def agent_health(self, node: str) -> dict[str, Any]:
        result: dict[str, Any] = http_json(f"{self.agents[node].url}/healthz")
        return result

    # -- operator -------------------------------------------------------------------------

    @property
    def operator_url(self) -> str:
        return f"http://127.0.0.1:{self.operator_port}"

    def start_operator(self, env: Mapping[str, str] | None = None) -> ManagedProcess:
        """Start (or restart) ``gleaner operator``; ``env`` adds variables for this start."""
        if self.operator_port == 0:
            self.operator_port = free_port()
        argv = [
            sys.executable,
            "-m",
            "gleaner.cli.main",
            "operator",
            f"--http-port={self.operator_port}",
            "--http-host=127.0.0.1",
            *self.operator_args,
        ]
        if self.operator_reads_prometheus:
            argv.append(f"--prometheus-url={self.prom.url}")
        if self.tenant is not None:
            # State (the bias table) in the tenant's namespace, which its close() empties: in
            # the default namespace it would outlive the test and bias the next one.
            argv += [
                f"--peering={self.tenant.peering}",
                f"--state-namespace={self.tenant.namespace}",
            ]
        if self.operator is None:
            self.operator = self.processes.add(
                ManagedProcess("operator", argv, self.workdir / "logs" / "operator.log")
            )
        self.operator.argv = argv
        self.operator.env = self.env({**self.operator_env, **(env or {})})
        self.operator.start()
        return self.operator

    def kill_operator(self) -> None:
        """SIGKILL the operator (a crash: no cleanup, its peering record stays behind)."""
        assert self.operator is not None
        self.operator.kill()

    def wait_operator_ready(self) -> None:
        wait_http(
            f"{self.operator_url}/healthz", timeout=self.startup_timeout, process=self.operator
        )

    def operator_metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return parse_metrics(http_text(f"{self.operator_url}/metrics"))

    def operator_metric(self, name: str, **labels: str) -> float | None:
        return self.operator_metrics().get((name, tuple(sorted(labels.items()))))

    # -- Prometheus -----------------------------------------------------------------------

    def _update_targets(self) -> None:
        self.prom.set_targets("agent", [a.target for a in self.agents.values()])
        self.prom.set_targets("operator", [f"127.0.0.1:{self.operator_port}"])

    def _all_targets_up(self) -> bool:
        wanted = {a.target for a in self.agents.values() if a.process.alive()}
        wanted.add(f"127.0.0.1:{self.operator_port}")
        up = {
            r["metric"]["instance"] for r in self.prom.query("up == 1") if "instance" in r["metric"]
        }
        return wanted <= up

    def prom_values(self, promql: str) -> dict[tuple[tuple[str, str], ...], float]:
        """An instant query: {sorted labels: value}."""
        return {
            tuple(sorted(r["metric"].items())): float(r["value"][1])
            for r in self.prom.query(promql)
        }

    # -- the dashboard API ----------------------------------------------------------------

    def api_paths(self) -> set[str]:
        """Paths under /api the operator's HTTP server declares (FastAPI's OpenAPI schema)."""
        try:
            schema = http_json(f"{self.operator_url}/openapi.json")
        except (urllib.error.URLError, OSError, ValueError):
            return set()
        return {p for p in (schema.get("paths") or {}) if p.startswith("/api")}

    def wait_dashboard(
        self, path: str, predicate: Callable[[Any], bool], what: str, *, timeout: float = 45
    ) -> Any:
        """Poll a dashboard API path until ``predicate(body)`` (the dashboard caches the
        cluster for up to 15 s, so fresh changes take that long to show)."""
        seen: dict[str, Any] = {}

        def check() -> Any:
            status, body = self.dashboard(path)
            seen["answer"] = (status, body)
            return body if status == 200 and predicate(body) else None

        return poll(
            check,
            timeout=timeout,
            interval=0.5,
            what=lambda: (
                f"dashboard {path}: {what}; last answer: "
                + json.dumps(seen.get("answer"), default=str)[:1500]
            ),
        )

    def dashboard(self, path: str) -> tuple[int, Any]:
        """GET ``path`` from the operator's HTTP server: (status, decoded JSON or None)."""
        url = f"{self.operator_url}{path}"
        status = http_status(url)
        if status != 200:
            return status, None
        return status, http_json(url)

    # -- the Kubernetes API ---------------------------------------------------------------

    def apply_file(self, path: Path, namespace: str | None = None) -> list[dict[str, Any]]:
        """Create every OfflineJob and ConfigMap in a YAML file (``kubectl create -f``)."""
        created = []
        for doc in yaml.safe_load_all(Path(path).read_text()):
            if not isinstance(doc, dict):
                continue
            created.append(self.apply(doc, namespace))
        return created

    def apply(self, doc: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        ns = namespace or (doc.get("metadata") or {}).get("namespace") or "default"
        doc = {**doc, "metadata": {**doc.get("metadata", {}), "namespace": ns}}
        if doc.get("kind") == "ConfigMap":
            result = self.api.core.create_namespaced_config_map(ns, doc)
            return dict(self.api.client.sanitize_for_serialization(result))
        if doc.get("kind") == "OfflineJob":
            return self.api.create_job(doc)
        raise ValueError(f"cannot apply a {doc.get('kind')}")

    def job(self, name: str, namespace: str = "batch") -> dict[str, Any]:
        job = self.api.get_job(name, namespace)
        if job is None:
            raise KeyError(f"OfflineJob {namespace}/{name} not found")
        return job

    def wait_job(
        self,
        name: str,
        predicate: Callable[[dict[str, Any]], bool],
        what: str,
        *,
        namespace: str = "batch",
        timeout: float = 60,
    ) -> dict[str, Any]:
        """Poll the job until ``predicate(job)``; the timeout message shows its status."""
        seen: dict[str, Any] = {}

        def check() -> dict[str, Any] | None:
            job = self.job(name, namespace)
            seen["status"] = job.get("status")
            return job if predicate(job) else None

        return poll(
            check,
            timeout=timeout,
            what=lambda: (
                f"{namespace}/{name}: {what}; status now: "
                + json.dumps(seen.get("status"), default=str)[:1500]
            ),
        )

    def wait_phase(
        self, name: str, phase: str, *, namespace: str = "batch", timeout: float = 60
    ) -> dict[str, Any]:
        return self.wait_job(
            name,
            lambda j: (j.get("status") or {}).get("phase") == phase,
            f"phase {phase}",
            namespace=namespace,
            timeout=timeout,
        )

    def pods(self, namespace: str = "batch", job: str | None = None) -> list[dict[str, Any]]:
        selector = job_selector(job) if job else OFFLINE_SELECTOR
        return [
            dict(self.api.client.sanitize_for_serialization(p))
            for p in self.api.pods(namespace, selector)
        ]

    def events(self, namespace: str = "batch", name: str | None = None) -> list[dict[str, Any]]:
        out = [
            dict(self.api.client.sanitize_for_serialization(e)) for e in self.api.events(namespace)
        ]
        if name is None:
            return out
        return [e for e in out if (e.get("involvedObject") or {}).get("name") == name]

    def wait_events(
        self, name: str, reason: str, namespace: str = "batch", timeout: float = 30
    ) -> list[dict[str, Any]]:
        """The Events with ``reason`` about object ``name``, once there is one: the operator
        posts an Event just after the status write a test may have waited for."""

        def found() -> list[dict[str, Any]]:
            return [e for e in self.events(namespace, name) if e["reason"] == reason]

        return poll(found, timeout=timeout, what=f"a {reason} Event about {namespace}/{name}")

    def nodetrace(self, node: str) -> dict[str, Any] | None:
        import kubernetes

        try:
            result = self.api.custom.get_cluster_custom_object(GROUP, VERSION, "nodetraces", node)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(result)

    # -- the stand-in kubelet -------------------------------------------------------------

    def _kubelet_loop(self) -> None:
        while not self._kubelet_stop.wait(0.25):
            with contextlib.suppress(Exception):
                self._kubelet_once()

    def _kubelet_once(self) -> None:
        assert self.kube is not None
        for pod in self.kube.objects("v1/pods"):
            meta = pod.get("metadata") or {}
            node = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase")
            if not node or phase or meta.get("deletionTimestamp"):
                continue
            if not self.agent_alive(node):
                continue  # a node whose agent is down starts nothing
            self.api.set_pod_phase(meta["name"], "Running", meta.get("namespace", "default"))

    # -- diagnostics ----------------------------------------------------------------------

    def _objects(self, resource: str) -> list[dict[str, Any]]:
        """Every object of ``resource`` (``'v1/pods'``, ``'<group>/<version>/<plural>'``)."""
        if self.kube is not None:
            return self.kube.objects(resource)
        if resource == "v1/pods":
            pods = self.api.core.list_pod_for_all_namespaces().items
            return [dict(self.api.client.sanitize_for_serialization(p)) for p in pods]
        group, version, plural = resource.split("/")
        listed = self.api.custom.list_cluster_custom_object(group, version, plural)
        return list(listed.get("items", []))

    def diagnostics(self) -> str:
        lines = [self.processes.diagnostics()]
        with contextlib.suppress(Exception):
            lines.append("--- objects in the API server:")
            for resource in ("gleaner.dev/v1alpha1/offlinejobs", "v1/pods"):
                for obj in self._objects(resource):
                    meta = obj.get("metadata") or {}
                    status = obj.get("status") or {}
                    lines.append(
                        f"    {resource.rsplit('/', 1)[-1]} {meta.get('namespace')}/"
                        f"{meta.get('name')}: phase={status.get('phase')} "
                        f"node={(obj.get('spec') or {}).get('nodeName', '')} "
                        f"message={str(status.get('message', ''))[:200]}"
                    )
            for obj in self._objects("gleaner.dev/v1alpha1/nodetraces"):
                status = obj.get("status") or {}
                lines.append(
                    f"    nodetrace {obj['metadata']['name']}: lastReportTime="
                    f"{status.get('lastReportTime')} idleFraction={status.get('idleFraction')}"
                )
        lines.append(f"--- work directory: {self.workdir} (now {datetime.now(UTC).isoformat()})")
        return "\n".join(lines)
