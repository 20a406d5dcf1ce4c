"""``gleaner agent``: run the per-node runtime agent (compute gate, memory, accounting).

Thin shell: parses options into :class:`gleaner.runtime_agent.daemon.AgentOptions` and runs the
daemon until SIGINT/SIGTERM. Bad options exit 2 with one line (``gleaner.cli.common.fail``).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click

from gleaner.api.contract import KUBELET_POD_RESOURCES_SOCKET
from gleaner.api.units import parse_duration
from gleaner.cli.common import fail
from gleaner.protocol.node import SOCKET_DIR, SOCKET_NAME


def _duration(text: str) -> float:
    """Seconds > 0 (``gleaner.api.units`` grammar); the agent's one-line error otherwise."""
    try:
        return parse_duration(text)
    except ValueError:
        raise ValueError(f"bad duration {text!r} (examples: 15s, 500ms, 2m, 1h30m)") from None


@click.command(name="agent")
@click.option(
    "--backend",
    type=click.Choice(["nvidia", "simulated"]),
    required=True,
    help="nvidia: govern shims over the socket; simulated: model online and offline work.",
)
@click.option("--node", required=True, help="This node's name (the NodeTrace's name).")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=9464,
    show_default=True,
    help="Port of /metrics, /healthz and the simulated backend's /simulate (0: any free).",
)
@click.option(
    "--metrics-host", default="0.0.0.0", show_default=True, help="Address the port listens on."
)
@click.option(
    "--socket-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(SOCKET_DIR),
    show_default=True,
    help=f"Directory of the control socket {SOCKET_NAME} (nvidia backend).",
)
@click.option(
    "--report-interval",
    default="15s",
    show_default=True,
    help="How often the NodeTrace is written (a duration: 15s, 2m).",
)
@click.option(
    "--window",
    default="1h",
    show_default=True,
    help="How much recent history each NodeTrace report summarizes (a duration).",
)
@click.option(
    "--trace",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Online trace to replay (CSV/Parquet, docs/formats.md; simulated backend). "
    "The node's GPUs in the trace are the agent's GPUs.",
)
@click.option(
    "--gpus",
    type=click.IntRange(1, 16),
    default=None,
    help="GPU count: simulated backend without --trace (default 4), or nvidia backend "
    "when nvidia-smi finds none. With --trace the trace's GPUs count (a warning if not N).",
)
@click.option(
    "--gpu-memory-gib",
    type=click.FloatRange(min=1),
    default=80.0,
    show_default=True,
    help="Memory of each simulated GPU, GiB (the nvidia backend reads it from the GPU).",
)
@click.option("--no-kube", is_flag=True, help="Run without a cluster (metrics only).")
@click.option(
    "--kubeconfig",
    default=None,
    help="Kubeconfig file (default: the in-cluster account, then $KUBECONFIG or ~/.kube/config).",
)
@click.option(
    "--cool-floor",
    default="2ms",
    show_default=True,
    help="Shortest gate cooldown T_cool (the wait after online work goes idle before "
    "offline work resumes; docs/agent.md).",
)
@click.option(
    "--cool-ceiling", default="500ms", show_default=True, help="Longest gate cooldown T_cool."
)
@click.option(
    "--no-nvml",
    is_flag=True,
    help="Do not read free GPU memory from NVML (nvidia backend): every growth of the "
    "online headroom then reclaims offline memory.",
)
@click.option(
    "--allow-uninstrumented",
    is_flag=True,
    help="Opt this node out of the uninstrumented-process guard (nvidia backend): GPU "
    "processes no connected shim accounts for are reported, but offline work may run over "
    "them (docs/agent.md).",
)
@click.option(
    "--online-silence",
    default="5s",
    show_default=True,
    help="An online shim silent this long no longer counts as instrumented.",
)
@click.option(
    "--process-match",
    type=click.Choice(["pids", "count"]),
    default="pids",
    show_default=True,
    help="How NVML's GPU processes are matched with connected shims: pids (the agent runs "
    "in the host's pid namespace) or count (it does not, as the chart runs it: processes "
    "are counted per GPU; docs/agent.md).",
)
@click.option(
    "--pod-resources-socket",
    default=KUBELET_POD_RESOURCES_SOCKET,
    show_default=True,
    help="The kubelet's PodResources socket, to learn which pods hold which GPUs; an "
    "empty value does not ask the kubelet.",
)
@click.option(
    "--native-gate-loop/--no-native-gate-loop",
    default=True,
    show_default=True,
    help="Run the compute gates in a native thread on the online edges the shims write to "
    "shared memory (nvidia backend): online shims then send no per-edge messages and the "
    'agent reads the gates\' accounting in batches (docs/shim.md, "The native gate loop"). '
    "--no-native-gate-loop: the agent's event loop gates on socket messages.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    help="Logging level: debug, info, warning or error.",
)
@click.option(
    "--event-loop",
    type=click.Choice(["auto", "asyncio", "uvloop"]),
    default="auto",
    show_default=True,
    help="auto: uvloop when installed, else asyncio.",
)
def command(
    backend: str,
    node: str,
    metrics_port: int,
    metrics_host: str,
    socket_dir: Path,
    report_interval: str,
    window: str,
    trace: Path | None,
    gpus: int | None,
    gpu_memory_gib: float,
    no_kube: bool,
    kubeconfig: str | None,
    cool_floor: str,
    cool_ceiling: str,
    no_nvml: bool,
    allow_uninstrumented: bool,
    online_silence: str,
    process_match: str,
    pod_resources_socket: str,
    native_gate_loop: bool,
    log_level: str,
    event_loop: str,
) -> None:
    """Run the per-node runtime agent."""
    from gleaner.runtime_agent.daemon import (
        AgentDaemon,
        AgentError,
        AgentOptions,
        event_loop_factory,
    )
    from gleaner.runtime_agent.policy import GateConfig, InstrumentationConfig

    try:
        interval = _duration(report_interval)
        window_s = _duration(window)
        gate = GateConfig(
            cool_floor_s=_duration(cool_floor), cool_ceiling_s=_duration(cool_ceiling)
        )
        guard = InstrumentationConfig(
            enforce=not allow_uninstrumented,
            silence_s=_duration(online_silence),
            match="count" if process_match == "count" else "pids",
        )
    except ValueError as exc:
        fail(str(exc))
    if not node.strip():
        fail("--node must not be empty")
    if trace is not None and backend != "simulated":
        fail("--trace needs --backend simulated")
    if trace is not None and not trace.is_file():
        fail(f"trace file {trace} does not exist")
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options = AgentOptions(
        backend=backend,
        node=node,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        socket_dir=socket_dir,
        report_interval_s=interval,
        window_s=window_s,
        trace=trace,
        gpus=gpus,
        gpu_memory_gib=gpu_memory_gib,
        kube=not no_kube,
        kubeconfig=kubeconfig,
        gate=gate,
        nvml=not no_nvml,
        instrumentation=guard,
        pod_resources_socket=pod_resources_socket or None,
        gate_loop=native_gate_loop,
    )
    try:
        loop_factory = event_loop_factory(event_loop)
        daemon = AgentDaemon(options)
    except (AgentError, ValueError, OSError) as exc:
        fail(str(exc))
    click.echo(
        f"gleaner agent: node {node}, backend {backend}, {len(daemon.inventory)} GPUs, "
        f"metrics on :{metrics_port}",
        err=True,
    )
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        try:
            runner.run(daemon.run())
        except AgentError as exc:
            fail(str(exc))
