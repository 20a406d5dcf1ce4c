"""``gleaner report evictions``: the SLA eviction reports stored in the cluster.

The operator writes one ConfigMap per SLA eviction, labelled ``LABEL_REPORT`` =
``REPORT_SLA_EVICTION`` and ``LABEL_JOB`` = the job's name, with the scheduler's
``EvictionReport`` as JSON under ``REPORT_KEY`` (names of ``gleaner.api.contract``). This
command lists them (``gleaner.clients.kube``; in-cluster or ``KUBECONFIG``, or
``--kubeconfig``/``--context``; the namespace of the context by default), newest first,
filtered by age, as a table, CSV, JSON or a Markdown table. ``--from`` reads the same
reports from a simulation's output (``gleaner simulate --out DIR``: its dashboard record),
where age counts back from the newest report, for the simulation keeps its own clock.
Unreadable reports are skipped with a warning on stderr.
"""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from gleaner.api.contract import EVICTION_REPORT_SELECTOR, REPORT_KEY, is_eviction_report
from gleaner.cli.common import echo_json, echo_table, fail, format_option, parse_seconds
from gleaner.clients.kube import (
    Credentials,
    KubeConfigError,
    KubeError,
    SyncKubeClient,
    configmaps_path,
)

HEADERS = (
    "TIME",
    "NAMESPACE",
    "JOB",
    "NODE",
    "GPUS",
    "SLA",
    "PREDICTED",
    "OBSERVED",
    "EVICTION",
    "OUTCOME",
    "REASON",
)


@dataclass(frozen=True)
class Row:
    namespace: str
    configmap: str
    report: Any  # gleaner.scheduler.EvictionReport

    def cells(self) -> list[Any]:
        r = self.report
        return [
            datetime.fromtimestamp(r.time, UTC).strftime("%Y-%m-%d %H:%M:%SZ"),
            self.namespace,
            r.job.split("/", 1)[-1],
            r.node,
            ",".join(str(g) for g in r.gpus),
            f"{r.sla:.2f}",
            f"{r.predicted.throughput_fraction:.2f}",
            f"{r.observed.mean:.2f}",
            r.eviction_count,
            "failed" if r.failed else "requeued",
            r.reason,
        ]


def parse_since(text: str) -> float:
    """``24h``, ``30m``, ``7d``, ``90s`` or plain seconds -> seconds (``gleaner.api.units``)."""
    return parse_seconds(text, "--since")


def _rows(
    entries: list[tuple[str, str, Any]], since_seconds: float, now: float | None
) -> list[Row]:
    """Rows of (namespace, ConfigMap name, report JSON) entries at most ``since_seconds``
    older than ``now`` (None: than the newest report), newest first."""
    from gleaner.scheduler import EvictionReport

    reports: list[tuple[str, str, Any]] = []
    for namespace, name, raw in entries:
        try:
            report = EvictionReport.from_json(raw or "")
        except ValueError as exc:
            click.echo(f"warning: {namespace}/{name}: {exc}", err=True)
            continue
        reports.append((namespace, name, report))
    if now is None:
        now = max((r.time for _, _, r in reports), default=0.0)
    cutoff = now - since_seconds
    rows = [Row(ns, name, r) for ns, name, r in reports if r.time >= cutoff]
    rows.sort(key=lambda r: r.report.time, reverse=True)
    return rows


def read_reports(
    client: SyncKubeClient, namespace: str | None, since_seconds: float, now: datetime
) -> list[Row]:
    """The reports of ``namespace`` (None: all) at most ``since_seconds`` old, newest first."""
    items = client.list(configmaps_path(namespace), label_selector=EVICTION_REPORT_SELECTOR)
    entries: list[tuple[str, str, Any]] = []
    for cm in items:
        meta = cm.get("metadata") or {}
        name, cm_namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        if not is_eviction_report(meta.get("labels")):
            continue  # a server that ignores label selectors must not fool us
        entries.append((cm_namespace, name, (cm.get("data") or {}).get(REPORT_KEY)))
    return _rows(entries, since_seconds, now.timestamp())


def record_reports(record: Any, namespace: str | None, since_seconds: float) -> list[Row]:
    """The reports of a simulation's dashboard record (``evictionReports``) in ``namespace``
    (None: all), at most ``since_seconds`` older than its newest report, newest first: a
    simulation keeps its own clock, so "recent" is measured on it."""
    import json

    if not isinstance(record, dict) or not isinstance(record.get("evictionReports"), list):
        raise ValueError("not a simulation's dashboard record (no evictionReports list)")
    entries: list[tuple[str, str, Any]] = []
    for entry in record["evictionReports"]:
        if not isinstance(entry, dict):
            continue
        ns = str(entry.get("namespace") or "default")
        if namespace is None or ns == namespace:
            raw = entry.get("report")
            text = raw if isinstance(raw, str) else json.dumps(raw)
            entries.append((ns, str(entry.get("configMap") or ""), text))
    return _rows(entries, since_seconds, None)


def _load_record(path: Path) -> Any:
    """A simulation's dashboard record: the file, or DIR/dashboard.json of ``--out DIR``."""
    import json

    file = path / "dashboard.json" if path.is_dir() else path
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"--from {file}: {exc.strerror or exc}")
    except ValueError as exc:
        fail(f"--from {file}: not JSON: {exc}")


def _markdown(rows: list[Row]) -> str:
    def esc(v: Any) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(esc(c) for c in row.cells()) + " |" for row in rows]
    return "\n".join(lines)


def _csv(rows: list[Row]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([h.lower() for h in HEADERS])
    for row in rows:
        writer.writerow(row.cells())
    return buf.getvalue()


def _cluster_rows(
    namespace: str | None,
    all_namespaces: bool,
    since_seconds: float,
    kubeconfig: str | None,
    context: str | None,
) -> tuple[str | None, list[Row]]:
    try:
        credentials = Credentials.load(kubeconfig, context)
    except KubeConfigError as exc:
        fail(f"no cluster configuration: {exc}")
    target = None if all_namespaces else (namespace or credentials.namespace)
    with SyncKubeClient(credentials) as client:
        try:
            return target, read_reports(client, target, since_seconds, datetime.now(UTC))
        except KubeError as exc:
            if exc.status == 0:
                fail(f"cannot reach the cluster: {exc.message}")
            fail(f"cannot list ConfigMaps: {exc.status} {exc.message}")
        except Exception as exc:  # timeouts
            fail(f"cannot reach the cluster: {str(exc).splitlines()[0] if str(exc) else exc!r}")


@click.group(name="report")
def command() -> None:
    """Reports from the cluster."""


@command.command(name="evictions")
@click.option("--namespace", "-n", default=None, help="Namespace (default: the context's).")
@click.option("--all-namespaces", "-A", is_flag=True, help="Reports of every namespace.")
@click.option("--since", default="24h", show_default=True, help="Only evictions this recent.")
@click.option(
    "--kubeconfig",
    default=None,
    help="Kubeconfig file (default: in-cluster, then $KUBECONFIG or ~/.kube/config).",
)
@click.option("--context", default=None, help="Kubeconfig context (default: the current one).")
@click.option(
    "--from",
    "record_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Read a simulation's reports instead of a cluster's: the --out DIR of "
    "gleaner simulate, or its dashboard.json (--since then counts back from its last report).",
)
@format_option("table", "csv", "json", "markdown")
def evictions(
    namespace: str | None,
    all_namespaces: bool,
    since: str,
    kubeconfig: str | None,
    context: str | None,
    record_path: Path | None,
    output_format: str,
) -> None:
    """SLA eviction reports: where each job missed its SLA, and what happens next."""
    since_seconds = parse_since(since)
    if namespace and all_namespaces:
        fail("--namespace and --all-namespaces are mutually exclusive")
    if record_path is not None:
        if kubeconfig or context:
            fail("--from reads a file: --kubeconfig and --context do not apply")
        target = None if all_namespaces else namespace
        try:
            rows = record_reports(_load_record(record_path), target, since_seconds)
        except ValueError as exc:
            fail(f"--from {record_path}: {exc}")
    else:
        target, rows = _cluster_rows(namespace, all_namespaces, since_seconds, kubeconfig, context)

    if output_format == "json":
        echo_json(
            [
                {"namespace": r.namespace, "configMap": r.configmap, **r.report.to_json()}
                for r in rows
            ]
        )
    elif output_format == "csv":
        sys.stdout.write(_csv(rows))
    elif output_format == "markdown":
        click.echo(_markdown(rows))
    else:
        where = "all namespaces" if target is None else f"namespace {target}"
        if record_path is not None:
            where = f"{record_path} ({where})"
        echo_table(
            HEADERS,
            [r.cells() for r in rows],
            title=f"SLA evictions in {where}, last {since}: {len(rows)}",
        )
