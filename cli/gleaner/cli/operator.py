"""``gleaner operator``: run the Kubernetes operator (kopf) against the current cluster.

Uses the in-cluster service account, else ``KUBECONFIG``. Flags map one-to-one onto
``gleaner.operator.config.OperatorConfig`` (docs/operator.md, "Flags"); durations accept
``30``, ``30s``, ``5m``, ``1h``, ``1h30m`` (grammar: ``gleaner.api.units``). Bad flags:
one-line error, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gleaner.api.contract import BIAS_CONFIGMAP, ENV_OPERATOR_BIND_DELAY
from gleaner.cli.common import fail, parse_risk_target, parse_seconds, risk_target_option
from gleaner.operator.config import (
    DEFAULT_MOVE_HORIZON_H,
    DEFAULT_STATE_NAMESPACE,
)
from gleaner.scheduler.lifecycle import (
    DEFAULT_MIN_STAY_SECONDS,
    DEFAULT_PLANNED_EXIT_ADMISSION_H,
    DEFAULT_PLANNED_EXIT_MIN_GPUS,
    PlannedExitRule,
)

if TYPE_CHECKING:
    from gleaner.operator.config import ProfilingPool


def _seconds(text: str, flag: str) -> float:
    """Seconds >= 0 (0 turns a delay off; flags that need more check it themselves)."""
    return parse_seconds(text, flag, allow_zero=True)


def _profiling_pool(selector: tuple[str, ...], tolerations: str) -> ProfilingPool | None:
    """The profiling node pool of the two flags; None when no label is given."""
    from gleaner.operator.config import ProfilingPool

    labels: dict[str, str] = {}
    for item in selector:
        key, eq, value = item.partition("=")
        if not eq or not key:
            fail(f"--profiling-node-selector: expected KEY=VALUE, got {item!r}")
        labels[key] = value
    parsed: list[dict[str, Any]] = []
    if tolerations:
        try:
            doc = json.loads(tolerations)
        except ValueError as exc:
            fail(f"--profiling-tolerations: not JSON: {exc}")
        if not isinstance(doc, list) or not all(isinstance(t, dict) for t in doc):
            fail("--profiling-tolerations: expected a JSON list of Toleration objects")
        parsed = [dict(t) for t in doc]
    if not labels:
        if parsed:
            fail("--profiling-tolerations needs --profiling-node-selector (the pool's labels)")
        return None
    return ProfilingPool(labels, tuple(parsed))


@click.command(name="operator")
@click.option(
    "--namespace", "namespaces", multiple=True, help="Serve only this namespace (repeatable)."
)
@click.option("--all-namespaces", "-A", is_flag=True, help="Serve every namespace (the default).")
@click.option(
    "--http-port",
    type=int,
    default=8080,
    show_default=True,
    help="/healthz, /readyz, /metrics and the dashboard; 0 disables.",
)
@click.option(
    "--http-host", default="0.0.0.0", show_default=True, help="Address the HTTP server binds."
)
@click.option(
    "--webhook-port",
    type=int,
    default=0,
    show_default=True,
    help="TLS port of the admission webhook (online Pods, OfflineJobs' finalizer; "
    "docs/operator.md); 0 disables.",
)
@click.option(
    "--webhook-cert-dir",
    default="",
    help="Directory with the webhook's tls.crt and tls.key (required with --webhook-port).",
)
@click.option(
    "--batch-api-port",
    type=int,
    default=0,
    show_default=True,
    help="Port of the OpenAI-compatible Batch API (docs/batch.md); 0 disables.",
)
@click.option(
    "--batch-api-dir",
    default="",
    help="Directory of the Batch API's files (required with --batch-api-port).",
)
@click.option(
    "--batch-api-url",
    default="",
    help="URL at which batch runners reach the Batch API (its Service; required with "
    "--batch-api-port).",
)
@click.option(
    "--batch-api-cert-dir",
    default="",
    help="Directory with the Batch API's tls.crt and tls.key: serve it over HTTPS, reloading "
    "the pair when the files change [default: plain HTTP].",
)
@click.option(
    "--batch-api-max-file-mib",
    type=int,
    default=200,
    show_default=True,
    help="Largest file the Batch API takes, MiB.",
)
@click.option(
    "--prometheus-url",
    default=None,
    help="Read traces and observed throughput from Prometheus instead of NodeTraces.",
)
@click.option(
    "--peering",
    default="gleaner",
    show_default=True,
    help="kopf peering name (one active operator at a time).",
)
@click.option("--standalone", is_flag=True, help="Run without peering.")
@click.option(
    "--peering-lifetime",
    default="60s",
    show_default=True,
    help="How long a replica's peering record stays valid without keep-alives.",
)
@click.option(
    "--peering-priority",
    default=None,
    help="kopf peering priority; the live replica with the highest is active "
    "[default: random per process, so replicas never tie].",
)
@click.option(
    "--sla-window", default="60s", show_default=True, help="SLA monitor window (timer interval)."
)
@click.option(
    "--max-sla-window",
    default=None,
    help="Judge no job's SLA over a longer span than this (e.g. 10m) [default: each "
    "job's spec.slaWindow]. At or below --sla-window every sample is a window.",
)
@click.option(
    "--sla-grace",
    default="300s",
    show_default=True,
    help="Windows this soon after a placement are ignored.",
)
@click.option(
    "--sla-violations",
    default="3/5",
    show_default=True,
    help="Evict after K of the last N windows missed: K/N.",
)
@click.option(
    "--eviction-backoff",
    default="30s",
    show_default=True,
    help="Backoff after the first eviction (doubles each time).",
)
@click.option(
    "--eviction-backoff-max",
    default="30m",
    show_default=True,
    help="Upper bound of the eviction backoff.",
)
@click.option(
    "--unschedulable-backoff",
    default="30s",
    show_default=True,
    help="Least time between two attempts of an Unschedulable job.",
)
@click.option(
    "--requeue-interval",
    default="15s",
    show_default=True,
    help="How often the scheduling loop looks again while no pass has run (a standby).",
)
@click.option(
    "--min-pass-interval",
    default="1s",
    show_default=True,
    help="Least time between two scheduling passes.",
)
@click.option(
    "--record-delay",
    default="5s",
    show_default=True,
    help="Time after a job's Pod is made before the job's status shows the placement "
    "(Scheduled) on its own; a Pod that starts sooner is recorded as Running at once, "
    "in one status write.",
)
@click.option(
    "--trace-stale-after",
    default="10m",
    show_default=True,
    help="NodeTraces older than this are not used.",
)
@click.option(
    "--watch-timeout",
    default="300s",
    show_default=True,
    help="Server-side timeout of watch requests.",
)
@click.option(
    "--profiling-node-selector",
    "profiling_node_selector",
    multiple=True,
    metavar="KEY=VALUE",
    help="Profile on submit runs its profiling Pods only on nodes with this label "
    "(repeatable): a dedicated profiling node pool, where a run has its GPU to itself.",
)
@click.option(
    "--profiling-tolerations",
    default="",
    metavar="JSON",
    help="Tolerations (a JSON list of Kubernetes Toleration objects) added to profiling "
    "Pods on the profiling node pool.",
)
@click.option(
    "--bind-delay",
    default="0s",
    envvar=ENV_OPERATOR_BIND_DELAY,
    show_default=True,
    hidden=True,
    help="Fault injection for tests.",
)
@click.option(
    "--state-namespace",
    default=DEFAULT_STATE_NAMESPACE,
    envvar="POD_NAMESPACE",
    show_default=True,
    help=f"Namespace of the operator's own state (the ConfigMap {BIAS_CONFIGMAP}); "
    "the operator's own namespace when it runs in a Pod.",
)
@click.option(
    "--bias-persist-interval",
    default="60s",
    show_default=True,
    help="Least time between two writes of the learned prediction correction.",
)
@risk_target_option(
    "Admit a job only where a window is predicted to meet its SLA with at least this "
    "probability (0 < p < 1); on nodes that report their hours of the day, also the load "
    "their windows may reach above the forecast; 'off': where the mean prediction meets it."
)
@click.option(
    "--move-check-interval",
    default="1h",
    show_default=True,
    help="How often to look for running jobs whose node is forecast to stop admitting "
    "them (a peak of its online load) and move them to a node that admits them; "
    "0 never moves a job.",
)
@click.option(
    "--move-min-stay",
    default=f"{DEFAULT_MIN_STAY_SECONDS / 3600:g}h",
    show_default=True,
    help="How long a job runs on its node before it may be moved.",
)
@click.option(
    "--move-horizon",
    default=f"{DEFAULT_MOVE_HORIZON_H:g}h",
    show_default=True,
    help="How far ahead a running job's node must still admit it; else it is moved.",
)
@click.option(
    "--planned-exit/--no-planned-exit",
    default=True,
    show_default=True,
    help=f"Place a job of {DEFAULT_PLANNED_EXIT_MIN_GPUS} or more GPUs that no node admits "
    f"over the coming hours where one admits it over the next "
    f"{DEFAULT_PLANNED_EXIT_ADMISSION_H:g} h; such a job goes back to the queue, progress "
    "kept, when its node no longer admits it over the next hour and no other node does.",
)
@click.option("--verbose", "-v", is_flag=True, help="Debug logging.")
def command(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    http_port: int,
    http_host: str,
    webhook_port: int,
    webhook_cert_dir: str,
    batch_api_port: int,
    batch_api_dir: str,
    batch_api_url: str,
    batch_api_cert_dir: str,
    batch_api_max_file_mib: int,
    prometheus_url: str | None,
    peering: str,
    standalone: bool,
    peering_lifetime: str,
    peering_priority: str | None,
    sla_window: str,
    max_sla_window: str | None,
    sla_grace: str,
    sla_violations: str,
    eviction_backoff: str,
    eviction_backoff_max: str,
    unschedulable_backoff: str,
    requeue_interval: str,
    min_pass_interval: str,
    record_delay: str,
    trace_stale_after: str,
    watch_timeout: str,
    profiling_node_selector: tuple[str, ...],
    profiling_tolerations: str,
    bind_delay: str,
    state_namespace: str,
    bias_persist_interval: str,
    risk_target: str,
    move_check_interval: str,
    move_min_stay: str,
    move_horizon: str,
    planned_exit: bool,
    verbose: bool,
) -> None:
    """Run the Gleaner operator: bind OfflineJobs, watch SLAs, evict, reschedule."""
    from gleaner.operator.config import (
        MAX_PEERING_PRIORITY,
        OperatorConfig,
        default_peering_priority,
    )
    from gleaner.scheduler.monitor import SLAMonitorConfig

    if namespaces and all_namespaces:
        fail("--namespace and --all-namespaces are mutually exclusive")
    if not 0 <= http_port <= 65535:
        fail(f"--http-port: {http_port} is not a port")
    if not 0 <= webhook_port <= 65535:
        fail(f"--webhook-port: {webhook_port} is not a port")
    if webhook_port and not webhook_cert_dir:
        fail("--webhook-port needs --webhook-cert-dir (the directory of tls.crt and tls.key)")
    if webhook_port:
        missing = [f for f in ("tls.crt", "tls.key") if not (Path(webhook_cert_dir) / f).is_file()]
        if missing:
            fail(f"--webhook-cert-dir: no {' or '.join(missing)} in {webhook_cert_dir}")
    if not 0 <= batch_api_port <= 65535:
        fail(f"--batch-api-port: {batch_api_port} is not a port")
    if batch_api_port and not (batch_api_dir and batch_api_url):
        fail("--batch-api-port needs --batch-api-dir and --batch-api-url")
    if batch_api_cert_dir:
        cert_dir = Path(batch_api_cert_dir)
        missing = [f for f in ("tls.crt", "tls.key") if not (cert_dir / f).is_file()]
        if missing:
            fail(f"--batch-api-cert-dir: no {' or '.join(missing)} in {batch_api_cert_dir}")
    if batch_api_max_file_mib < 1:
        fail("--batch-api-max-file-mib must be at least 1")
    try:
        k_text, n_text = sla_violations.split("/", 1)
        k, n = int(k_text), int(n_text)
    except ValueError:
        fail(f"--sla-violations: expected K/N, got {sla_violations!r}")
    window = _seconds(sla_window, "--sla-window")
    if window <= 0:
        fail("--sla-window must be positive")
    try:
        sla = SLAMonitorConfig(
            window_seconds=window,
            history_windows=n,
            violation_windows=k,
            grace_seconds=_seconds(sla_grace, "--sla-grace"),
            backoff_base_seconds=_seconds(eviction_backoff, "--eviction-backoff"),
            backoff_max_seconds=_seconds(eviction_backoff_max, "--eviction-backoff-max"),
            max_sla_window_seconds=None
            if max_sla_window is None
            else _seconds(max_sla_window, "--max-sla-window"),
        )
    except ValueError as exc:
        fail(f"SLA monitor: {exc}")
    priority = default_peering_priority()
    if peering_priority is not None:
        try:
            priority = int(peering_priority)
        except ValueError:
            fail(f"--peering-priority: not an integer: {peering_priority!r}")
        if not 1 <= priority <= MAX_PEERING_PRIORITY:
            fail(f"--peering-priority: must be between 1 and {MAX_PEERING_PRIORITY}")
    requeue = _seconds(requeue_interval, "--requeue-interval")
    if requeue <= 0:
        fail("--requeue-interval must be positive")
    risk = parse_risk_target(risk_target)
    if not state_namespace:
        fail("--state-namespace must not be empty")
    config = OperatorConfig(
        namespaces=tuple(namespaces),
        http_port=http_port,
        http_host=http_host,
        webhook_port=webhook_port,
        webhook_host=http_host,
        webhook_cert_dir=webhook_cert_dir,
        batch_api_port=batch_api_port,
        batch_api_host=http_host,
        batch_api_dir=batch_api_dir,
        batch_api_url=batch_api_url,
        batch_api_max_file_bytes=batch_api_max_file_mib << 20,
        batch_api_cert_dir=batch_api_cert_dir,
        prometheus_url=prometheus_url,
        peering=None if standalone else peering,
        peering_lifetime=max(1, round(_seconds(peering_lifetime, "--peering-lifetime"))),
        peering_priority=priority,
        verbose=verbose,
        requeue_interval=requeue,
        min_pass_interval=_seconds(min_pass_interval, "--min-pass-interval"),
        sla=sla,
        unschedulable_backoff=_seconds(unschedulable_backoff, "--unschedulable-backoff"),
        trace_stale_after=_seconds(trace_stale_after, "--trace-stale-after"),
        watch_timeout=_seconds(watch_timeout, "--watch-timeout"),
        record_delay=_seconds(record_delay, "--record-delay"),
        bind_delay=_seconds(bind_delay, "--bind-delay"),
        profiling_pool=_profiling_pool(profiling_node_selector, profiling_tolerations),
        state_namespace=state_namespace,
        bias_persist_interval=_seconds(bias_persist_interval, "--bias-persist-interval"),
        risk_target=risk,
        move_check_interval=_seconds(move_check_interval, "--move-check-interval"),
        move_min_stay=_seconds(move_min_stay, "--move-min-stay"),
        move_horizon=_seconds(move_horizon, "--move-horizon"),
        planned_exit=PlannedExitRule() if planned_exit else None,
    )
    if config.move_horizon <= 0:
        fail("--move-horizon must be > 0")
    from gleaner.operator.main import run

    run(config)
