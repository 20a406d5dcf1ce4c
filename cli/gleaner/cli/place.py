"""``gleaner place``: placements for a queue of OfflineJobs on a cluster trace.

A thin shell around ``gleaner.scheduler.schedule``: it reads OfflineJob manifests from
files and directories (``*.yaml``, ``*.yml``, ``*.json``; a directory's own files, and its
subdirectories too with ``--recursive``, as ``kubectl apply -f DIR [-R]`` reads them; other
kinds of documents are skipped, ConfigMaps are kept to resolve ``spec.profileFrom``),
loads node summaries from a trace file or Prometheus, runs one scheduling cycle and prints
the placements and, for every job that fits nowhere, the reasons per node class. A job
whose profile ConfigMap is not among the given files (or is not a valid profile) is
reported unschedulable with that reason. JSON output (docs/scheduler.md):
``{"placements": [{job, node, gpus, compute, memory, multi_gpu, throughput_fraction}],
"unschedulable": [{job, reasons}]}``. Bad input (unreadable or invalid manifests,
duplicate jobs, malformed trace, unreachable Prometheus) prints one ``error: ...`` line
and exits 2.

The cycle is ``gleaner.scheduler.decide`` on the ``SchedulingSnapshot`` the operator would
build from the same summaries (:func:`snapshot_of`: GPUs the summaries report held by jobs
outside the queue are occupied, nodes whose last report is older than the operator's
staleness limit at the newest report are unavailable). Each placement comes with the
scheduler's explanation: the table's ``why`` column is its SLA line, and ``--explain``
adds ``reasons`` (every rule's verdict on the chosen set) and ``runner_ups`` (``node: why
not``, every other node, the closest first: ``explain_runner_ups``, the call the operator's
``NotChosen`` Event comes from) to each placement in JSON.
``--bias FILE`` applies the corrections the operator learned (its ConfigMap ``gleaner-bias``
as ``kubectl get -o yaml`` prints it, or that ConfigMap's ``bias.json``), judged with
``--risk-target`` as the operator judges them, so the placements, reasons and bias factors
are the operator's; without it every bias is 1.
Node labels and GPU products come from ``--nodes FILE`` or the trace's ``gpu_product``
column; an unschedulable job whose gpuSelector was judged without them gets a plain
``note:`` line on stderr (as ``gleaner predict`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gleaner.api.contract import BIAS_CONFIGMAP
from gleaner.cli.common import (
    echo_json,
    echo_table,
    fail,
    format_option,
    parse_risk_target,
    risk_target_option,
)
from gleaner.cli.inputs import (
    load_nodes,
    load_yaml,
    profile_from_configmap,
    selector_notes,
    spinner,
    trace_options,
    validation_message,
    yaml_error,
)

if TYPE_CHECKING:
    from gleaner.api import OfflineJob, Profile
    from gleaner.perfmodel import NodeSummary
    from gleaner.scheduler import BiasTable, JobRequest, SchedulingSnapshot

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
STALE_AFTER_SECONDS = 600.0
"""The operator's default ``trace_stale_after``: older reports are not used."""


@dataclass
class Manifests:
    """OfflineJobs (in file order) and ConfigMaps by (namespace, name)."""

    jobs: list[tuple[str, OfflineJob]] = field(default_factory=list)
    configmaps: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)


def _files(paths: list[Path], recursive: bool = False) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            listing = path.rglob("*") if recursive else path.iterdir()
            found = sorted(p for p in listing if p.suffix.lower() in MANIFEST_SUFFIXES)
            out.extend(p for p in found if p.is_file())
        elif path.is_file():
            out.append(path)
        else:
            fail(f"--jobs {path}: no such file or directory")
    return out


def load_manifests(paths: list[Path], recursive: bool = False) -> Manifests:
    """Read every document of ``paths`` (directories: their files; with ``recursive``, their
    whole tree); fail (exit 2) on unreadable or invalid ones."""
    import yaml
    from pydantic import ValidationError

    from gleaner.api import OfflineJob

    out = Manifests()
    seen: set[str] = set()
    for path in _files(paths, recursive):
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except OSError as exc:
            fail(f"{path}: {exc.strerror or exc}")
        except yaml.YAMLError as exc:
            fail(f"{path}: not valid YAML: {yaml_error(exc)}")
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "List":
                items = doc.get("items") or []
            else:
                items = [doc]
            for item in items:
                if not isinstance(item, dict):
                    continue
                kind = item.get("kind")
                meta = item.get("metadata") or {}
                namespace = str(meta.get("namespace") or "default")
                if kind == "ConfigMap":
                    out.configmaps[(namespace, str(meta.get("name", "")))] = item
                    continue
                if kind != "OfflineJob":
                    continue
                try:
                    job = OfflineJob.model_validate(item)
                except ValidationError as exc:
                    name = meta.get("name", "?")
                    fail(f"{path}: invalid OfflineJob {name}: {validation_message(exc)}")
                key = f"{job.metadata.namespace or 'default'}/{job.metadata.name}"
                if not job.metadata.name:
                    fail(f"{path}: an OfflineJob has no metadata.name")
                if key in seen:
                    fail(f"{path}: OfflineJob {key} is given twice")
                seen.add(key)
                out.jobs.append((key, job))
    return out


def resolve_profile(job: OfflineJob, manifests: Manifests) -> Profile | str:
    """The job's profile, or why it cannot be had (a reason for ``unschedulable``)."""
    spec = job.spec
    if spec.profile is not None:
        return spec.profile
    ref = spec.profile_from
    assert ref is not None  # the model guarantees exactly one of profile and profileFrom
    namespace = job.metadata.namespace or "default"
    cm = manifests.configmaps.get((namespace, ref.name))
    if cm is None:
        return f"profile ConfigMap {namespace}/{ref.name} not found in the given files"
    return profile_from_configmap(job.to_k8s(), cm)


def snapshot_of(
    requests: list[JobRequest],
    nodes: dict[str, NodeSummary],
    stale_after_seconds: float = STALE_AFTER_SECONDS,
    bias: BiasTable | None = None,
) -> SchedulingSnapshot:
    """The snapshot the operator would schedule ``requests`` on, from summaries alone.

    The time of the decision is the newest report among the nodes (a trace has no other
    clock); GPUs the summaries report held are occupied unless by a job of the queue (a
    queued job holds nothing, as in the operator).
    """
    from gleaner.scheduler import BiasTable, SchedulingSnapshot, occupied_from_summaries

    queued = {r.key for r in requests}
    occupied = {
        node: {gpu: job for gpu, job in held.items() if job not in queued}
        for node, held in occupied_from_summaries(nodes).items()
    }
    reports = [s.last_report_time for s in nodes.values() if s.last_report_time is not None]
    return SchedulingSnapshot(
        jobs=requests,
        nodes=nodes,
        now=max(reports) if reports else None,
        occupied={n: h for n, h in occupied.items() if h},
        stale_after_seconds=stale_after_seconds,
        bias=bias if bias is not None else BiasTable(),
    )


def load_bias(path: Path, risk_target: float | None) -> BiasTable:
    """The operator's learned corrections from ``path`` (its ConfigMap, or its bias.json)."""
    from gleaner.operator.bias import from_configmap
    from gleaner.scheduler import BiasTable
    from gleaner.scheduler.risk import AdmissionRisk

    config = AdmissionRisk(risk_target).bias_config()  # the operator's and the simulator's
    (doc,) = load_yaml(path, "bias table")[:1] or [None]
    if not isinstance(doc, dict):
        fail(f"--bias: {path} holds no bias table")
    try:
        if doc.get("kind") == "ConfigMap":
            return from_configmap(doc, config)
        return BiasTable.from_json(doc, config)
    except ValueError as exc:
        fail(f"--bias: {path}: {exc}")


@click.command(name="place")
@click.option(
    "--jobs",
    "job_paths",
    type=click.Path(path_type=Path),
    multiple=True,
    help="OfflineJob manifests: a file or a directory (repeatable; more may follow as arguments).",
)
@click.argument("more_paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "-R",
    "--recursive",
    is_flag=True,
    help="Also read the manifests in subdirectories of a directory (as kubectl -R).",
)
@click.option(
    "--explain",
    is_flag=True,
    help="JSON: list each placement's reasons (every rule's verdict on the chosen set).",
)
@click.option(
    "--bias",
    "bias_path",
    type=click.Path(path_type=Path),
    help="The operator's learned prediction corrections: kubectl get configmap "
    f"{BIAS_CONFIGMAP} -n NAMESPACE -o yaml > FILE.",
)
@risk_target_option("With --bias: the operator's --risk-target ('off': the mean rule).")
@trace_options
@format_option("table", "json")
def command(
    job_paths: tuple[Path, ...],
    more_paths: tuple[Path, ...],
    recursive: bool,
    explain: bool,
    bias_path: Path | None,
    risk_target: str,
    trace_path: Path | None,
    nodes_path: Path | None,
    prometheus_url: str | None,
    window: str | None,
    at_text: str | None,
    step_gib: float,
    min_pair_overlap: float,
    output_format: str,
) -> None:
    """Place a queue of OfflineJobs on the nodes of a trace (or of Prometheus)."""
    from gleaner.perfmodel import JobProfile, ModelConfig
    from gleaner.scheduler import (
        JobRequest,
        SchedulerConfig,
        Unschedulable,
        decide,
        explain_runner_ups,
    )

    paths = [*job_paths, *more_paths]
    if not paths:
        fail("give the jobs with --jobs FILE_OR_DIR")
    if (trace_path is None) == (prometheus_url is None):
        fail("give exactly one of --trace FILE and --prometheus URL")
    manifests = load_manifests(paths, recursive)
    if not manifests.jobs:
        fail(f"no OfflineJob found in {', '.join(str(p) for p in paths)}")
    nodes = load_nodes(trace_path, prometheus_url, window, at_text, step_gib, nodes_path)

    requests: list[JobRequest] = []
    missing: list[Unschedulable] = []
    for order, (key, job) in enumerate(manifests.jobs):
        profile = resolve_profile(job, manifests)
        if isinstance(profile, str):
            missing.append(Unschedulable(key, (profile,)))
            continue
        requests.append(JobRequest.from_offlinejob(job, JobProfile.from_api(profile), order))
    config = SchedulerConfig(model=ModelConfig(min_pair_overlap=min_pair_overlap))
    bias = None if bias_path is None else load_bias(bias_path, parse_risk_target(risk_target))
    snapshot = snapshot_of(requests, nodes, bias=bias)
    with spinner(f"placing {len(requests)} jobs on {len(nodes)} nodes"):
        result = decide(snapshot, config)
    unschedulable = [*result.unschedulable, *missing]
    by_key = {r.key: r for r in requests}
    for u in result.unschedulable:
        r = by_key.get(u.job)
        if r is not None:
            for line in selector_notes(nodes, r.node_selector, r.products):
                click.echo(f"note: {u.job}: {line}", err=True)

    if output_format == "json":
        data = result.to_json()
        if explain:
            by_key = {r.key: r for r in requests}
            judged = [
                (by_key[p.job], p.explanation)
                for p in result.placements
                if p.explanation is not None
            ]
            why_not = dict(
                zip(
                    (job.key for job, _ in judged),
                    explain_runner_ups(snapshot, judged, config),
                    strict=True,
                )
            )
            for row, placed in zip(data["placements"], result.placements, strict=True):
                row["reasons"] = list(placed.reasons)
                if placed.job in why_not:
                    row["runner_ups"] = list(why_not[placed.job])
        data["unschedulable"] = [u.to_json() for u in unschedulable]
        echo_json(data)
        return
    sla = {key: job.spec.throughput_sla for key, job in manifests.jobs}
    echo_table(
        ["job", "node", "gpus", "compute", "memory", "multi_gpu", "predicted", "sla", "why"],
        [
            (
                p.job,
                p.node,
                ",".join(map(str, p.gpus)),
                p.prediction.compute,
                p.prediction.memory,
                p.prediction.multi_gpu,
                p.throughput_fraction,
                sla[p.job],
                p.explanation.why if p.explanation is not None else "",
            )
            for p in result.placements
        ],
        title=f"{len(result.placements)} placed",
    )
    if unschedulable:
        echo_table(
            ["job", "why not"],
            [(u.job, u.message) for u in unschedulable],
            title=f"{len(unschedulable)} unschedulable",
        )
