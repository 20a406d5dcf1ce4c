"""``gleaner predict``: one job's predicted throughput on one node's GPUs, with reasons.

A thin shell: it reads the OfflineJob YAML and its profile (inline, from ``--profile``, or
from the ConfigMap that ``spec.profileFrom`` names when the job's own file holds it), loads
node summaries from a trace file or Prometheus, calls ``gleaner.perfmodel.predict`` and
prints the three factors, their product, tokens/s, the SLA and the verdict. JSON output
has docs/perfmodel.md's keys. Bad input (unreadable or invalid job, unknown node, GPU count
not matching the job, empty window, malformed trace, unreachable Prometheus, a profile
ConfigMap that is missing or names another) prints one ``error: ...`` line and exits 2.

``predict`` gives the factors; the verdict (``feasible``, ``reasons``) is the scheduler's,
from ``gleaner.scheduler.explain_set``: its own rules and wording, the SLA line first, then
every rule the set fails (e.g. a gpuSelector the node does not match). When the selector
was judged on node labels or GPU products the input never gave (a trace without
``--nodes``), a ``note:`` line on stderr says so in plain words.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from gleaner.cli.common import echo_json, echo_table, fail, format_option
from gleaner.cli.inputs import (
    load_nodes,
    load_yaml,
    profile_from_configmap,
    selector_notes,
    trace_options,
    validation_message,
)


def _load_job(path: Path) -> tuple[Any, list[Any]]:
    """The one OfflineJob of ``path``, and every document of the file (for its ConfigMaps)."""
    from pydantic import ValidationError

    from gleaner.api import OfflineJob

    documents = load_yaml(path, "job")
    docs = [
        d for d in documents if isinstance(d, dict) and d.get("kind", "OfflineJob") == "OfflineJob"
    ]
    if not docs:
        fail(f"job {path}: no OfflineJob in the file")
    if len(docs) > 1:
        fail(f"job {path}: {len(docs)} OfflineJobs in the file; predict takes one")
    try:
        return OfflineJob.model_validate(docs[0]), documents
    except ValidationError as exc:
        fail(f"job {path}: invalid OfflineJob: {validation_message(exc)}")


def _named_configmaps(docs: list[Any], job: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The ConfigMaps among ``docs`` that ``job``'s ``profileFrom`` names, and every name seen.

    A ConfigMap matches by name, and by namespace when both it and the job state one.
    """
    ref = job.spec.profile_from
    job_ns = job.metadata.namespace
    matches: list[dict[str, Any]] = []
    names: list[str] = []
    for doc in docs:
        if not (isinstance(doc, dict) and doc.get("kind") == "ConfigMap"):
            continue
        meta = doc.get("metadata") or {}
        names.append(str(meta.get("name", "")))
        cm_ns = meta.get("namespace")
        if (
            ref is not None
            and meta.get("name") == ref.name
            and not (cm_ns and job_ns and cm_ns != job_ns)
        ):
            matches.append(doc)
    return matches, names


def _resolve_configmap(job: Any, configmap: dict[str, Any], where: Path) -> Any:
    if job.spec.profile_from is None:
        fail(f"profile {where}: job {job.metadata.name} has an inline profile")
    resolved = profile_from_configmap(job.to_k8s(), configmap)
    if isinstance(resolved, str):
        fail(f"profile {where}: {resolved}")
    return resolved


def _load_profile(job: Any, job_path: Path, job_docs: list[Any], profile_path: Path | None) -> Any:
    """The job's Profile: inline; from ``--profile`` (a profile, or a file holding the
    ConfigMap that ``profileFrom`` names); or from that ConfigMap in the job's own file."""
    from pydantic import ValidationError

    from gleaner.api import Profile

    spec = job.spec
    if profile_path is None:
        if spec.profile is not None:
            return spec.profile
        in_job_file, _ = _named_configmaps(job_docs, job)
        if len(in_job_file) == 1:
            return _resolve_configmap(job, in_job_file[0], job_path)
        fail(
            f"job {job.metadata.name}: the profile is in ConfigMap "
            f"{spec.profile_from.name!r}; pass it with --profile FILE"
        )
    docs = load_yaml(profile_path, "profile")
    if not docs or not all(isinstance(d, dict) for d in docs):
        fail(f"profile {profile_path}: expected YAML mappings (a profile or ConfigMaps)")
    if len(docs) == 1 and docs[0].get("kind") not in ("ConfigMap", "OfflineJob"):
        try:
            return Profile.model_validate(docs[0])
        except ValidationError as exc:
            fail(f"profile {profile_path}: invalid profile: {validation_message(exc)}")
    if spec.profile_from is None:
        fail(f"profile {profile_path}: job {job.metadata.name} has an inline profile")
    matches, names = _named_configmaps(docs, job)
    if len(matches) != 1:
        seen = ", ".join(repr(n) for n in names) or "none"
        problem = "no" if not matches else f"{len(matches)}"
        fail(
            f"profile {profile_path}: {problem} ConfigMap named {spec.profile_from.name!r} "
            f"for job {job.metadata.name} (ConfigMaps in the file: {seen})"
        )
    return _resolve_configmap(job, matches[0], profile_path)


def _parse_gpus(text: str) -> list[int]:
    try:
        gpus = [int(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        fail(f"--gpus must be comma-separated GPU indices, got {text!r}")
    if not gpus:
        fail("--gpus needs at least one GPU index")
    if len(set(gpus)) != len(gpus):
        fail(f"--gpus lists a GPU twice: {text}")
    return gpus


@click.command(name="predict")
@click.option(
    "--job",
    "job_path",
    type=click.Path(path_type=Path),
    required=True,
    help="OfflineJob manifest (YAML).",
)
@click.option("--node", required=True, help="Node to predict on.")
@click.option("--gpus", "gpus_text", required=True, help="Comma-separated GPU indices, e.g. 0,1.")
@trace_options
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(path_type=Path),
    help="Profile (YAML/JSON, or a manifest file holding the ConfigMap) for jobs that use "
    "profileFrom (docs/formats.md); default: that ConfigMap when the job's own file holds it.",
)
@format_option("table", "json")
def command(
    job_path: Path,
    trace_path: Path | None,
    nodes_path: Path | None,
    prometheus_url: str | None,
    node: str,
    gpus_text: str,
    window: str | None,
    at_text: str | None,
    profile_path: Path | None,
    step_gib: float,
    min_pair_overlap: float,
    output_format: str,
) -> None:
    """Predict a job's throughput on GPUS of NODE from a trace or Prometheus."""
    from gleaner.perfmodel import JobProfile, ModelConfig, predict
    from gleaner.perfmodel.admission import no_memory_samples
    from gleaner.scheduler import JobRequest, SchedulerConfig, SchedulingSnapshot, explain_set

    if (trace_path is None) == (prometheus_url is None):
        fail("give exactly one of --trace FILE and --prometheus URL")
    gpus = _parse_gpus(gpus_text)
    job, job_docs = _load_job(job_path)
    if len(gpus) != job.spec.gpus:
        fail(
            f"job {job.metadata.name or job_path.name} runs on {job.spec.gpus} GPU(s) "
            f"but --gpus lists {len(gpus)}"
        )
    profile = JobProfile.from_api(_load_profile(job, job_path, job_docs, profile_path))
    nodes = load_nodes(trace_path, prometheus_url, window, at_text, step_gib, nodes_path)
    summary = nodes.get(node)
    if summary is None:
        known = ", ".join(sorted(nodes)[:10]) + (" ..." if len(nodes) > 10 else "")
        fail(f"unknown node {node!r} (the trace has: {known})")
    name = job.metadata.name or job_path.stem
    model = ModelConfig(min_pair_overlap=min_pair_overlap)
    try:
        result = predict(profile, job.spec.throughput_sla, summary, gpus, model, job=name)
        request = JobRequest.from_offlinejob(job, profile, arrival=0.0)
        snapshot = SchedulingSnapshot(jobs=[request], nodes={node: summary})
        verdict = explain_set(snapshot, request, node, gpus, SchedulerConfig(model=model))
    except ValueError as exc:
        fail(str(exc))
    note = no_memory_samples(summary)
    reasons = verdict.reasons + ((note,) if note else ())
    result = replace(result, feasible=verdict.feasible, reasons=reasons)

    for line in selector_notes({node: summary}, request.node_selector, request.products):
        click.echo(f"note: {line}", err=True)
    if output_format == "json":
        echo_json(result.to_json())
        return
    rows: list[tuple[str, Any]] = [
        ("compute (P_compute)", result.compute),
        ("memory (P_memory)", result.memory),
        ("multi_gpu (P_multi)", result.multi_gpu),
        ("throughput_fraction", result.throughput_fraction),
        ("tokens_per_second", f"{result.tokens_per_second:.1f}"),
        ("sla", result.sla),
        ("feasible", "yes" if result.feasible else "no"),
    ]
    rows += [("reason", r) for r in result.reasons]
    echo_table(
        ["", "value"],
        rows,
        title=f"{name} on {result.node} GPUs {','.join(map(str, result.gpus))}",
    )
