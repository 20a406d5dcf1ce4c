"""``gleaner dashboard``: serve the cluster dashboard (pages and JSON API) from this machine.

Data comes from a snapshot file (``--snapshot``, e.g. ``gleaner simulate``'s
``dashboard.json``) or from a cluster (``--kubeconfig``/``--context``; without either, the
default kubeconfig). The source is read once before serving so a bad file or an unreachable
cluster fails at once with one line (exit 2). ``serve_snapshot`` is what
``gleaner simulate --serve`` calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gleaner.api.contract import BIAS_CONFIGMAP
from gleaner.cli.common import fail, parse_risk_target, parse_seconds, risk_target_option
from gleaner.operator.config import DEFAULT_STATE_NAMESPACE


def serve(source: Any, host: str, port: int, what: str) -> None:
    """Serve the dashboard over ``source`` with uvicorn until Ctrl-C."""
    import uvicorn

    from gleaner.dashboard.app import create_app

    # Once, on stderr: stdout may carry a command's JSON (``simulate --format json --serve``).
    click.echo(
        f"Gleaner dashboard ({what}) on http://{host}:{port}/  (API: /docs; Ctrl-C stops)",
        err=True,
    )
    uvicorn.run(create_app(source), host=host, port=port, log_level="warning")


def serve_snapshot(path: str | Path, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve the snapshot or record file at ``path`` (bad input: one-line error, exit 2)."""
    from gleaner.dashboard.sources import SnapshotSource, SourceError

    try:
        source = SnapshotSource(path)
    except SourceError as exc:
        fail(str(exc))
    serve(source, host, port, f"snapshot {path}")


@click.command(name="dashboard")
@click.option(
    "--snapshot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A dashboard JSON file (gleaner simulate --out DIR writes DIR/dashboard.json).",
)
@click.option("--kubeconfig", default=None, help="Kubeconfig of the cluster to show.")
@click.option("--context", default=None, help="Kubeconfig context (default: the current one).")
@click.option("--namespace", "-n", default=None, help="Only OfflineJobs of this namespace.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="HTTP port."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--state-namespace",
    default=DEFAULT_STATE_NAMESPACE,
    show_default=True,
    help="The operator's namespace (its --state-namespace): other nodes a job could run on "
    f"are judged with the corrections it learned (the ConfigMap {BIAS_CONFIGMAP} there).",
)
@risk_target_option("The operator's --risk-target ('off': the mean rule).")
@click.option(
    "--trace-stale-after",
    default="10m",
    show_default=True,
    help="The operator's --trace-stale-after: a node whose agent has not reported for this "
    "long is shown as unavailable.",
)
@click.option(
    "--refresh",
    type=click.FloatRange(min=1.0),
    default=15.0,
    show_default=True,
    help="Seconds between cluster reads (cluster mode).",
)
def command(
    snapshot: Path | None,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    port: int,
    host: str,
    state_namespace: str,
    risk_target: str,
    trace_stale_after: str,
    refresh: float,
) -> None:
    """Serve the cluster dashboard: overview, nodes, jobs, SLA evictions, and /api."""
    from gleaner.dashboard.model import AdmissionSettings
    from gleaner.dashboard.sources import KubeSource, SourceError

    if snapshot is not None and (kubeconfig or context or namespace):
        fail("--snapshot cannot be combined with --kubeconfig, --context or --namespace")
    if snapshot is not None:
        serve_snapshot(snapshot, host, port)
        return
    try:
        source = KubeSource.from_kubeconfig(
            kubeconfig,
            context,
            namespace=namespace,
            ttl_seconds=refresh,
            state_namespace=state_namespace,
            admission=AdmissionSettings(
                risk_target=parse_risk_target(risk_target),
                trace_stale_after_seconds=parse_seconds(trace_stale_after, "--trace-stale-after"),
            ),
        )
        source.data()
    except SourceError as exc:
        fail(str(exc))
    serve(source, host, port, f"cluster via {kubeconfig or 'the default kubeconfig'}")
