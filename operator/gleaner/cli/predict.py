"""``gleaner predict``: one job's predicted throughput on one node's GPUs, with reasons.

A thin shell: it reads the OfflineJob YAML (and its profile), loads node summaries from a
trace file or Prometheus, calls ``gleaner.perfmodel.predict`` and prints the three
factors, their product, tokens/s, the SLA and the verdict. JSON output has exactly
DESIGN.md's keys. Bad input (unreadable or invalid job, unknown node, GPU count not
matching the job, empty window, malformed trace, unreachable Prometheus) prints one
``error: ...`` line and exits 2.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from gleaner.cli.common import echo_json, echo_table, fail, format_option


def _load_yaml_documents(path: Path, what: str) -> list[Any]:
    import yaml

    try:
        text = path.read_text()
    except OSError as exc:
        fail(f"{what} {path}: {exc.strerror or exc}")
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        fail(f"{what} {path}: not valid YAML: {str(exc).splitlines()[0]}")


def _validation_message(exc: Exception) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        return f"{where}: {err['msg']}"
    return str(exc)


def _load_job(path: Path) -> Any:
    from pydantic import ValidationError

    from gleaner.api import OfflineJob

    docs = [
        d
        for d in _load_yaml_documents(path, "job")
        if isinstance(d, dict) and d.get("kind", "OfflineJob") == "OfflineJob"
    ]
    if not docs:
        fail(f"job {path}: no OfflineJob in the file")
    if len(docs) > 1:
        fail(f"job {path}: {len(docs)} OfflineJobs in the file; predict takes one")
    try:
        return OfflineJob.model_validate(docs[0])
    except ValidationError as exc:
        fail(f"job {path}: invalid OfflineJob: {_validation_message(exc)}")


def _load_profile(job: Any, profile_path: Path | None) -> Any:
    """The job's Profile: inline, or from ``--profile`` (a profile or a ConfigMap)."""
    import yaml
    from pydantic import ValidationError

    from gleaner.api import Profile

    spec = job.spec
    if profile_path is None:
        if spec.profile is not None:
            return spec.profile
        fail(
            f"job {job.metadata.name}: the profile is in ConfigMap "
            f"{spec.profile_from.name!r}; pass it with --profile FILE"
        )
    docs = _load_yaml_documents(profile_path, "profile")
    if len(docs) != 1 or not isinstance(docs[0], dict):
        fail(f"profile {profile_path}: expected one YAML mapping")
    doc = docs[0]
    if doc.get("kind") == "ConfigMap":
        key = spec.profile_from.key if spec.profile_from is not None else "profile.yaml"
        raw = (doc.get("data") or {}).get(key)
        if raw is None:
            fail(f"profile {profile_path}: ConfigMap has no data key {key!r}")
        try:
            doc = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            fail(f"profile {profile_path}: key {key!r} is not YAML: {str(exc).splitlines()[0]}")
    try:
        return Profile.model_validate(doc)
    except ValidationError as exc:
        fail(f"profile {profile_path}: invalid profile: {_validation_message(exc)}")


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


def _parse_time(text: str) -> datetime:
    try:
        return datetime.fromtimestamp(float(text), tz=UTC)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        fail(f"--at must be an ISO time or epoch seconds, got {text!r}")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@click.command(name="predict")
@click.option(
    "--job",
    "job_path",
    type=click.Path(path_type=Path),
    required=True,
    help="OfflineJob manifest (YAML).",
)
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(path_type=Path),
    help="Trace file (CSV or Parquet, DESIGN.md format).",
)
@click.option("--prometheus", "prometheus_url", help="Prometheus base URL (instead of --trace).")
@click.option("--node", required=True, help="Node to predict on.")
@click.option("--gpus", "gpus_text", required=True, help="Comma-separated GPU indices, e.g. 0,1.")
@click.option(
    "--window",
    help="Use only the last WINDOW of the trace (90s, 15m, 1h, 1d). "
    "Default: the whole file; 1h for Prometheus.",
)
@click.option(
    "--at",
    "at_text",
    help="End of the Prometheus window (ISO time or epoch seconds; default now).",
)
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(path_type=Path),
    help="Profile (YAML/JSON, or the ConfigMap manifest) for jobs that use profileFrom.",
)
@click.option(
    "--step-gib",
    type=click.FloatRange(min=0, min_open=True),
    default=0.5,
    show_default=True,
    help="Harvestable-memory quantization step (the P_memory error bound's unit).",
)
@click.option(
    "--min-pair-overlap",
    type=click.FloatRange(0, 1),
    default=0.95,
    show_default=True,
    help="Admission: smallest busy overlap/union every GPU pair must reach.",
)
@format_option("table", "json")
def command(
    job_path: Path,
    trace_path: Path | None,
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
    from gleaner.perfmodel import (
        FileTraceSource,
        JobProfile,
        ModelConfig,
        TraceSource,
        parse_duration,
        predict,
    )

    if (trace_path is None) == (prometheus_url is None):
        fail("give exactly one of --trace FILE and --prometheus URL")
    gpus = _parse_gpus(gpus_text)
    job = _load_job(job_path)
    if len(gpus) != job.spec.gpus:
        fail(
            f"job {job.metadata.name or job_path.name} runs on {job.spec.gpus} GPU(s) "
            f"but --gpus lists {len(gpus)}"
        )
    profile = JobProfile.from_api(_load_profile(job, profile_path))
    try:
        window_seconds = parse_duration(window) if window else None
    except ValueError as exc:
        fail(f"--window: {exc}")

    source: TraceSource
    if trace_path is not None:
        source = FileTraceSource(trace_path, window_seconds=window_seconds, step_gib=step_gib)
    else:
        from gleaner.operator.sources.prometheus import PrometheusTraceSource

        source = PrometheusTraceSource(
            str(prometheus_url),
            window_seconds=window_seconds or 3600.0,
            end=_parse_time(at_text) if at_text else None,
            step_gib=step_gib,
        )
    try:
        nodes = source.load()
    except (ValueError, RuntimeError) as exc:
        fail(str(exc))
    summary = nodes.get(node)
    if summary is None:
        known = ", ".join(sorted(nodes)[:10]) + (" ..." if len(nodes) > 10 else "")
        fail(f"unknown node {node!r} (the trace has: {known})")
    name = job.metadata.name or job_path.stem
    try:
        result = predict(
            profile,
            job.spec.throughput_sla,
            summary,
            gpus,
            ModelConfig(min_pair_overlap=min_pair_overlap),
            job=name,
        )
    except ValueError as exc:
        fail(str(exc))

    if output_format == "json":
        echo_json(result.to_json())
        return
    rows: list[tuple[str, Any]] = [
        ("compute (P_compute)", result.compute),
        ("memory (P_memory)", result.memory),
        ("multi_gpu (P_multi)", result.multi_gpu),
        ("throughput_fraction", result.throughput_fraction),
        ("tokens_per_second", round(result.tokens_per_second, 1)),
        ("sla", result.sla),
        ("feasible", "yes" if result.feasible else "no"),
    ]
    rows += [("reason", r) for r in result.reasons]
    echo_table(
        ["", "value"],
        rows,
        title=f"{name} on {result.node} GPUs {','.join(map(str, result.gpus))}",
    )
