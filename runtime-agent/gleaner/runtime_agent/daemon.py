"""The agent daemon: a thin asyncio shell around a NodeAgent (``gleaner agent``).

Contract. :class:`AgentDaemon` builds the node's GPU inventory and its backend, then runs in
one event loop:

- backend ``nvidia``: the shim control server (:class:`~gleaner.runtime_agent.server.ShimServer`) on
  ``<socket dir>/agent.sock``, one timer per GPU armed at its gate's deadline (the cooldown's
  end) and one for the memory release intervals; after each event only the timers of the
  policies it touched are looked at (``NodeAgent.take_changed``), and a timer is moved only
  when its deadline moved earlier (one that fires early re-arms). The timers never fire
  before their deadline and, on Linux, not a millisecond after it either
  (:mod:`gleaner.runtime_agent.timers`: a timerfd per timer; the loops' own timers count whole
  milliseconds, and uvloop's fire up to 0.5 ms early). The shim library is copied to the
  host path offline Pods mount; free memory per GPU comes from NVML
  (:class:`~gleaner.runtime_agent.nvml.NvmlFreeMemory`, by the inventory's UUIDs, cached 100 ms) as
  ``NodeAgent.free_bytes`` (a pressure event reclaims only what free memory cannot cover, a
  restore waits until it covers the page); without NVML it stays unknown (logged once);
- backend ``simulated``: a :class:`~gleaner.runtime_agent.simulated.SimulatedNode` (synthetic online
  load seeded by the node name, or ``--trace``) advanced to the monotonic clock every
  ``sim_step_s``; offline jobs come from the node's Pods (``OFFLINE_SELECTOR``);
- an HTTP server on the metrics port: ``/metrics`` (the agent's own registry), ``/healthz``,
  and for the simulated backend ``POST /simulate/burst?gpus=0,1&seconds=60&busy=1.0``;
- a reporter: every ``report_interval_s`` a snapshot of the accounting; unless ``kube`` is
  off, the NodeTrace status of the last ``window_s`` is written (in a worker thread, so the
  gate never waits on the API server); a failed write is retried at the next interval and
  covers the gap, and no error ends the reporter (an unexpected one is logged and counted
  as a failed report).

The loop is uvloop's when it is installed (``event_loop_factory("auto")``): its C event loop
roughly halves the per-wakeup overhead of the reaction path; asyncio's is the fallback.

All agent state is touched from the loop thread only (HTTP handlers are ``async``; the Pod
watcher thread hands its updates over with ``call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from gleaner.api import GpuInfo, TraceSource
from gleaner.api.nodetrace import gpu_uuid
from gleaner.clients.kube import KubeConfigError, SyncKubeClient
from gleaner.protocol.node import SHIM_DIR, SHIM_IMAGE_PATH, SOCKET_DIR
from gleaner.runtime_agent import timers
from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.fastgate import BEAT_INTERVAL_S
from gleaner.runtime_agent.instrumented import InstrumentationWatch
from gleaner.runtime_agent.kube import (
    PodNames,
    PodWatcher,
    ReportError,
    load_client,
    read_hours,
    write_nodehistory,
    write_nodetrace,
)
from gleaner.runtime_agent.metrics import uninstrumented_families
from gleaner.runtime_agent.nvml import DEFAULT_TTL_S, NvmlFreeMemory
from gleaner.runtime_agent.podresources import KubeletGpuHolders, PodResourcesClient
from gleaner.runtime_agent.policy import GateConfig, InstrumentationConfig, MemoryConfig
from gleaner.runtime_agent.reporting import ReportWindow, with_uninstrumented
from gleaner.runtime_agent.server import ShimServer
from gleaner.runtime_agent.simulated import (
    SimulatedNode,
    TraceOnline,
    synthetic_inventory,
    trace_inventory,
)
from gleaner.runtime_agent.timers import Timer

log = logging.getLogger("gleaner.runtime_agent")

SHIM_SOURCE = Path(SHIM_IMAGE_PATH)
SHIM_DEST_DIR = Path(SHIM_DIR)


class AgentError(RuntimeError):
    """The agent cannot start with these options (one line for the user)."""


EVENT_LOOPS = ("auto", "asyncio", "uvloop")


def event_loop_factory(name: str = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop to run in: ``uvloop``, ``asyncio``, or ``auto`` (uvloop if installed)."""
    if name not in EVENT_LOOPS:
        raise AgentError(f"unknown event loop {name!r} (one of {', '.join(EVENT_LOOPS)})")
    if name != "asyncio":
        try:
            import uvloop
        except ImportError:
            if name == "uvloop":
                raise AgentError("--event-loop uvloop: uvloop is not installed") from None
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


@dataclass
class AgentOptions:
    """Everything ``gleaner agent`` is configured with."""

    backend: str
    node: str
    metrics_port: int = 9464
    metrics_host: str = "0.0.0.0"
    socket_dir: Path = Path(SOCKET_DIR)
    report_interval_s: float = 15.0
    window_s: float = 3600.0
    trace: Path | None = None
    gpus: int | None = None
    gpu_memory_gib: float = 80.0
    kube: bool = True
    kubeconfig: str | None = None
    sim_step_s: float = 0.02
    report_attempts: int = 5
    """Tries per NodeTrace write (409/429/5xx and connection errors), with backoff."""
    report_backoff_s: float = 0.2
    """First backoff between tries (doubles each time)."""
    gate: GateConfig = field(default_factory=GateConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    shim_source: Path = SHIM_SOURCE
    shim_dest_dir: Path = SHIM_DEST_DIR
    nvml: bool = True
    """Read free GPU memory from NVML (nvidia backend)."""
    nvml_ttl_s: float = DEFAULT_TTL_S
    """How long one NVML free-memory reading is reused."""
    instrumentation: InstrumentationConfig = field(default_factory=InstrumentationConfig)
    """The uninstrumented-process guard (nvidia backend); ``enforce=False`` opts the node
    out (reported, never held)."""
    instrumentation_poll_s: float = 0.5
    """How often the GPUs' process lists are read and silent online shims looked for."""
    pod_resources_socket: str | None = None
    """The kubelet's PodResources socket: which pods hold which GPUs (nvidia backend; None:
    not asked, the guard then has NVML's process lists only)."""
    gate_loop: bool = True
    """Run the native gate loop on the shared-memory segment (nvidia backend; False: the
    event loop gates on socket messages, as it also does when the loop cannot start)."""


def agent_version() -> str:
    try:
        return metadata.version("gleaner")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def nvidia_inventory(node: str) -> list[GpuInfo]:
    """GPUs from ``nvidia-smi`` (index, UUID, name, memory); [] when it is not there."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
            check=True,
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            gpus.append(
                GpuInfo(
                    index=int(parts[0]),
                    uuid=parts[1] or gpu_uuid(node, int(parts[0])),
                    product=parts[2],
                    memory_gi_b=max(float(parts[3]) / 1024.0, 1e-3),
                )
            )
    return gpus


def _utc_now() -> datetime:
    return datetime.now(UTC)


class AgentDaemon:
    """See the module docstring."""

    def __init__(
        self,
        options: AgentOptions,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] | None = None,
    ):
        self.options = options
        self.clock = clock
        self.wall: Callable[[], datetime] = wall or _utc_now
        """The wall clock that labels reports and decides their hour of the day."""
        self.started = clock()
        self.sim: SimulatedNode | None = None
        self.server: ShimServer | None = None
        self.nvml: NvmlFreeMemory | None = None
        self.instrumentation: InstrumentationWatch | None = None
        self.holders: KubeletGpuHolders | None = None
        o = options
        if o.backend == "simulated":
            online = TraceOnline.from_file(o.trace, o.node) if o.trace is not None else None
            if online is not None:
                # The trace decides the inventory: a GPU it lacks would look idle forever.
                inventory, warning = trace_inventory(
                    o.node, sorted(online.samples), o.gpus, o.gpu_memory_gib, online.specs
                )
                if warning:
                    log.warning(warning)
            else:
                inventory = synthetic_inventory(o.node, o.gpus or 4, o.gpu_memory_gib)
            self.sim = SimulatedNode(
                o.node,
                inventory,
                start=self.started,
                online=online,
                gate_config=o.gate,
                memory_config=o.memory,
            )
            self.agent = self.sim.agent
            source = TraceSource.SIMULATED
        elif o.backend == "nvidia":
            inventory = nvidia_inventory(o.node)
            if not inventory and o.gpus:
                inventory = synthetic_inventory(o.node, o.gpus, o.gpu_memory_gib)
            if not inventory:
                raise AgentError("no GPUs found (nvidia-smi absent or failed); pass --gpus N")
            self.agent = NodeAgent(
                node=o.node,
                inventory=inventory,
                start=self.started,
                gate_config=o.gate,
                memory_config=o.memory,
            )
            self.server = ShimServer(
                self.agent, o.socket_dir, clock=clock, on_event=self._rearm, gate_loop=o.gate_loop
            )
            self.agent.sink = self.server
            self.agent.offline_handles = self.server.offline_handle_map
            if o.nvml:
                self.nvml = NvmlFreeMemory.open(inventory, ttl_s=o.nvml_ttl_s)
            if self.nvml is not None:
                self.agent.free_bytes = self.nvml.free_bytes
            if o.pod_resources_socket:
                self.holders = KubeletGpuHolders(
                    inventory, PodResourcesClient(o.pod_resources_socket).list
                )
            self.instrumentation = InstrumentationWatch(
                self.agent,
                o.instrumentation,
                running_pids=None if self.nvml is None else self.nvml.running_pids,
                gpu_holders=self.holders,
            )
            self.server.instrumentation = self.instrumentation
            source = TraceSource.AGENT
        else:
            raise AgentError(f"unknown backend {o.backend!r} (nvidia or simulated)")
        self.inventory = inventory
        self.reports = ReportWindow(
            window_s=o.window_s,
            source=source,
            agent_version=agent_version(),
            node=o.node,
            inventory=inventory,
        )
        self.reports_ok = 0
        self.last_report_error: str | None = None
        self.metrics_port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gate_timers: dict[int, Timer] = {}
        self._memory_timer: Timer | None = None
        self._stopping: asyncio.Event | None = None
        self._uvicorn: Any = None
        self._watcher: PodWatcher | None = None
        self._api_client: SyncKubeClient | None = None

    # -- state shared with HTTP -----------------------------------------------------------

    def refresh(self) -> NodeAgent:
        """Bring the agent's time up to now (the collector calls this before a scrape)."""
        now = self.clock()
        if self.sim is not None:
            self.sim.advance(now)
        else:
            self.agent.tick(now)
            self._rearm()
        return self.agent

    def burst(self, gpus: list[int], seconds: float, busy: float) -> None:
        if self.sim is None:
            raise AgentError("bursts exist only in the simulated backend")
        now = self.clock()
        self.sim.advance(now)
        self.sim.inject_burst(now, gpus, seconds, busy)

    def extra_metrics(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        reports = CounterMetricFamily(
            "gleaner_agent_reports", "NodeTrace reports written.", labels=["node", "result"]
        )
        reports.add_metric([self.options.node, "ok"], self.reports_ok)
        reports.add_metric([self.options.node, "error"], self.reports.failures)
        yield reports
        if self.server is not None:
            conns = GaugeMetricFamily(
                "gleaner_agent_connections", "Connected shims by role.", labels=["node", "role"]
            )
            for role, n in self.server.connections().items():
                conns.add_metric([self.options.node, role], n)
            yield conns
            # Fail closed, made visible: why offline processes wait, and for how long.
            node = self.options.node
            status = self.server.offline_status(self.clock())
            procs = GaugeMetricFamily(
                "gleaner_offline_processes",
                "Connected offline processes by their last reported status.",
                labels=["node", "status"],
            )
            for name, n in status.processes.items():
                procs.add_metric([node, name], n)
            yield procs
            held = GaugeMetricFamily(
                "gleaner_offline_held_seconds",
                "How long the job's offline GPU work has been held by its shim (0: running).",
                labels=["node", "namespace", "job"],
            )
            for job, secs in sorted(status.held_seconds.items()):
                ns, _, name = job.partition("/")
                held.add_metric([node, ns, name], secs)
            yield held
            failed = CounterMetricFamily(
                "gleaner_gate_ack_failures",
                "GATE commands an offline process could not enforce (GATE_ACK ok=0).",
                labels=["node"],
            )
            failed.add_metric([node], self.server.gate_acks_failed)
            yield failed
        if self.instrumentation is not None:
            yield from uninstrumented_families(
                self.options.node,
                self.agent.gpus,
                self.instrumentation.report(self.clock()),
                self.options.instrumentation.enforce,
            )

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "node": self.options.node,
            "backend": self.options.backend,
            "gpus": [g.uuid for g in self.inventory],
            "uptime_s": round(self.clock() - self.started, 3),
            "reports_ok": self.reports_ok,
            "reports_failed": self.reports.failures,
            "last_report_error": self.last_report_error,
            "offline_jobs": {str(g): j for g, j in sorted(self.agent.offline_jobs.items())},
            "gates": {str(g): gate.enabled for g, gate in sorted(self.agent.gates.items())},
            "uninstrumented": self._uninstrumented_health(),
            "process_match": None
            if self.instrumentation is None
            else self.options.instrumentation.match,
            "pod_resources": None
            if self.holders is None
            else {"known": self.holders() is not None, "error": self.holders.last_error},
            **self._gate_path_health(),
        }

    def _gate_path_health(self) -> dict[str, Any]:
        if self.server is None:
            return {}
        seg, loop = self.server.segment, self.server.loop
        native: dict[str, Any] | None = None
        if loop is not None or self.server.loop_error:
            native = {"running": loop is not None and loop.alive, "error": self.server.loop_error}
            if loop is not None:
                st, _ = loop.stats()
                native |= {
                    "edges": st.edges,
                    "lost_edges": st.lost_edges,
                    "framed_edges": self.server.framed_edges,
                }
        return {
            "gate_segment": {
                "path": None if seg is None else str(seg.path),
                "error": self.server.segment_error,
            },
            "gate_loop": native,
            "offline_held": self.server.held_offline(),
        }

    def _uninstrumented_health(self) -> dict[str, Any] | None:
        if self.instrumentation is None:
            return None
        found = self.instrumentation.report(self.clock())
        return {
            "enforced": self.options.instrumentation.enforce,
            "gpus": {
                str(g): [{"pid": u.pid, "why": u.why, "pod": u.pod} for u in procs]
                for g, procs in sorted(found.items())
            },
        }

    # -- run ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until :meth:`stop` (or SIGINT/SIGTERM through uvicorn)."""
        import uvicorn

        from gleaner.runtime_agent.http import QuietServer, build_app

        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        o = self.options
        if o.kube:  # first: an agent that cannot start leaves nothing behind
            await self.connect()
        if self.server is not None:
            self._make_timers(self._loop)
            self._copy_shim()
            await self.server.start()
            self._rearm()
        if self._api_client is not None and self.instrumentation is not None:
            self.instrumentation.pod_name = PodNames(self._api_client, o.node)
        if self._api_client is not None and self.sim is not None:
            self._watcher = PodWatcher(self._api_client, o.node, self._jobs_changed)
            self._watcher.start()
        config = uvicorn.Config(
            build_app(self),
            host=o.metrics_host,
            port=o.metrics_port,
            log_level="warning",
            lifespan="off",
            access_log=False,
        )
        self._uvicorn = QuietServer(config)
        tasks = [asyncio.create_task(self._report_loop(), name="reporter")]
        if self.sim is not None:
            tasks.append(asyncio.create_task(self._sim_loop(), name="simulator"))
        if self.instrumentation is not None:
            tasks.append(asyncio.create_task(self._instrumentation_loop(), name="processes"))
        if self.server is not None and self.server.segment is not None:
            tasks.append(asyncio.create_task(self._beat_loop(), name="gate-heartbeat"))
        if self.holders is not None:
            self.holders.start()
        web = asyncio.create_task(self._uvicorn.serve(), name="http")
        started = asyncio.create_task(self._note_port())
        stop = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({web, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._uvicorn.should_exit = True
            for t in [*tasks, started, stop]:
                t.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await web
            if self._watcher is not None:
                self._watcher.stop()
            if self.holders is not None:
                self.holders.stop()
            if self.server is not None:
                self.server.close()
            if self.nvml is not None:
                self.nvml.close()
                self.nvml = None
            for timer in [*self._gate_timers.values(), self._memory_timer]:
                if timer is not None:
                    timer.close()

    async def connect(self) -> None:
        """Open the cluster connection the reports go through (:meth:`run` does it first)."""
        self._api_client = await asyncio.to_thread(self._cluster_client)

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)

    async def _note_port(self) -> None:
        for _ in range(60_000):  # uvicorn has no started event; poll for up to 10 min
            if getattr(self._uvicorn, "started", False):
                break
            await asyncio.sleep(0.01)
        for server in self._uvicorn.servers:
            for sock in server.sockets:
                self.metrics_port = int(sock.getsockname()[1])
                return

    async def _sim_loop(self) -> None:
        assert self.sim is not None
        while True:
            self.sim.advance(self.clock())
            await asyncio.sleep(self.options.sim_step_s)

    async def _beat_loop(self) -> None:
        """The shared-memory gate's heartbeat: from this loop, so that a stalled loop lets
        it go stale and the offline shims close their gates (docs/shim.md)."""
        assert self.server is not None
        while True:
            self.server.beat()
            await asyncio.sleep(BEAT_INTERVAL_S)

    async def _instrumentation_loop(self) -> None:
        """Read the GPUs' process lists and apply the holds, every poll interval (silence
        is noticed here too, at most one interval late)."""
        assert self.instrumentation is not None
        while True:
            self.instrumentation.poll(self.clock())
            self._rearm()
            await asyncio.sleep(self.options.instrumentation_poll_s)

    def _make_timers(self, loop: asyncio.AbstractEventLoop) -> None:
        monotonic = self.clock is time.monotonic  # timerfd deadlines are on that clock
        for gpu in self.agent.gates:
            self._gate_timers[gpu] = timers.create(
                loop, functools.partial(self._fire_gate, gpu), monotonic=monotonic
            )
        self._memory_timer = timers.create(loop, self._fire_memory, monotonic=monotonic)

    def _rearm(self) -> None:
        """Re-arm the timers of the policies touched since the last call (nvidia backend)."""
        memory_timer = self._memory_timer
        if memory_timer is None:
            return  # not running
        agent = self.agent
        gpus, memory = agent.take_changed()
        if gpus:
            gate_timers, gates = self._gate_timers, agent.gates
            for gpu in gpus:
                deadline = gates[gpu].next_deadline()  # agent.gate_deadline(gpu), one call less
                if deadline is None:
                    continue  # an armed timer stays: it fires, finds nothing due, re-arms
                timer = gate_timers[gpu]
                armed = timer.deadline
                if armed is None or armed > deadline:
                    timer.arm(deadline)
        if memory:
            deadline = agent.memory_deadline()
            armed = memory_timer.deadline
            if deadline is not None and (armed is None or armed > deadline):
                memory_timer.arm(deadline)

    def _fire_gate(self, gpu: int) -> None:
        self.agent.tick_gate(self.clock(), gpu)
        self._rearm()

    def _fire_memory(self) -> None:
        self.agent.tick_memory(self.clock())
        self._rearm()

    def _jobs_changed(self, jobs: dict[int, str]) -> None:
        loop = self._loop
        if loop is None or self.sim is None:
            return
        sim = self.sim

        def apply() -> None:
            sim.set_offline_jobs(self.clock(), jobs)

        loop.call_soon_threadsafe(apply)

    async def _report_loop(self) -> None:
        o = self.options
        self.reports.add(self.wall(), self.refresh().accounting.snapshot())
        while True:
            await asyncio.sleep(o.report_interval_s)
            try:
                await self.report_once()
            except Exception as exc:  # the reporter outlives any one failed report
                self.reports.failed()
                self.last_report_error = f"{type(exc).__name__}: {exc}"
                log.exception("NodeTrace report failed unexpectedly (the next one covers it)")

    def _cluster_client(self) -> SyncKubeClient | None:
        """The cluster's API client. No cluster configuration at all: the simulated backend
        runs on without one (metrics only, a warning), the nvidia backend cannot start."""
        o = self.options
        try:
            return load_client(o.kubeconfig)
        except KubeConfigError as exc:
            if o.backend == "simulated" and o.kubeconfig is None:
                log.warning(
                    "no cluster configuration (%s): running without a cluster, metrics only "
                    "(--kubeconfig PATH to report NodeTraces, --no-kube to silence this)",
                    exc,
                )
                return None
            raise AgentError(
                f"no cluster configuration ({exc}): run in the cluster, set KUBECONFIG or "
                "--kubeconfig, or pass --no-kube to run without one (metrics only)"
            ) from exc

    async def report_once(self) -> bool:
        """Snapshot now and, with Kubernetes on, write the window's NodeTrace status."""
        wall = self.wall()
        self.reports.add(wall, self.refresh().accounting.snapshot())
        if not self.options.kube or self._api_client is None:
            return True
        if self.reports.profile is None:
            try:
                stored, legacy = await asyncio.to_thread(
                    read_hours, self._api_client, self.options.node
                )
            except ReportError as exc:
                log.warning("hours of the day not read yet (tried again next report): %s", exc)
            else:
                self.reports.seed(stored, legacy)
        await self._write_history()
        status = self.reports.status(self.inventory, self.agent.offline_jobs)
        if status is None:
            return True
        if self.instrumentation is not None:
            found = self.instrumentation.report(self.clock())
            status = with_uninstrumented(status, found, self.options.instrumentation.enforce)
        try:
            await asyncio.to_thread(
                write_nodetrace,
                self._api_client,
                self.options.node,
                status,
                attempts=self.options.report_attempts,
                backoff_s=self.options.report_backoff_s,
                clear_legacy_hours=self.reports.hours_in_history,
            )
        except ReportError as exc:
            self.reports.failed()
            self.last_report_error = str(exc)
            log.warning("NodeTrace report failed (the next one covers the gap): %s", exc)
            return False
        self.reports.reported(wall)
        self.reports_ok += 1
        self.last_report_error = None
        return True

    async def _write_history(self) -> None:
        """Write the node's NodeHistory when an hour completed (or the hours were read from
        the NodeTrace); a failed write is tried again with the next report."""
        history = self.reports.history()
        if history is None or self._api_client is None:
            return
        try:
            await asyncio.to_thread(
                write_nodehistory,
                self._api_client,
                self.options.node,
                history,
                attempts=self.options.report_attempts,
                backoff_s=self.options.report_backoff_s,
            )
        except ReportError as exc:
            log.warning("NodeHistory write failed (tried again next report): %s", exc)
            return
        self.reports.history_stored()

    def _copy_shim(self) -> None:
        src, dest = self.options.shim_source, self.options.shim_dest_dir
        if not src.exists():
            log.warning("shim library %s not found; offline pods cannot be gated", src)
            return
        try:
            dest.mkdir(parents=True, exist_ok=True)
            tmp = dest / (src.name + ".tmp")
            shutil.copy2(src, tmp)
            tmp.replace(dest / src.name)  # atomic: running pods keep the old inode
        except OSError as exc:
            log.warning("could not copy the shim to %s: %s", dest, exc)
