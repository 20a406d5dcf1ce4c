"""``gleaner cpu-latency``: hold a CPU wakeup-latency bound until stopped.

Thin shell over :class:`gleaner.runtime_agent.cpulatency.CpuLatencyRequest`: makes the
request, says what is in force, and waits for SIGTERM or SIGINT; the bound ends when the
process does. The Helm chart runs it as a sidecar of the agent when
``agent.cpuWakeupLatency.enabled`` is set (docs/agent.md, "CPU wakeup latency"). A request
that cannot be made exits 1 with one line that says why.
"""

from __future__ import annotations

import signal
from pathlib import Path

import click

from gleaner.runtime_agent.cpulatency import (
    DEVICE,
    MAX_REQUEST_US,
    CpuLatencyError,
    CpuLatencyRequest,
    effective_latency_us,
)


@click.command(name="cpu-latency")
@click.option(
    "--max-wakeup-us",
    type=click.IntRange(0, MAX_REQUEST_US),
    default=0,
    show_default=True,
    help="The longest CPU wakeup latency allowed, in microseconds: idle states slower to "
    "leave are not used (0: idle CPUs poll instead of sleeping).",
)
@click.option(
    "--device",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEVICE,
    show_default=True,
    help="The PM QoS device.",
)
def command(max_wakeup_us: int, device: Path) -> None:
    """Keep the node's idle CPUs out of sleep states slower to leave than --max-wakeup-us,
    until SIGTERM or SIGINT, so that the compute gate's close does not wait for a sleeping
    CPU to wake (docs/agent.md, "CPU wakeup latency")."""
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before the request: no signal is lost
    try:
        request = CpuLatencyRequest.hold(max_wakeup_us, device)
    except CpuLatencyError as exc:
        click.echo(f"error: {exc}", err=True)
        click.get_current_context().exit(1)
    with request:
        try:
            now = f"{effective_latency_us(device)} µs"
        except CpuLatencyError:
            now = "unknown (the device cannot be read)"
        click.echo(
            f"gleaner cpu-latency: holding a CPU wakeup latency of at most {max_wakeup_us} µs "
            f"(in force now: {now}) until SIGTERM or SIGINT",
            err=True,
        )
        received = signal.sigwait(stop)
        click.echo(f"gleaner cpu-latency: {signal.Signals(received).name}: request ended", err=True)
