"""Inputs shared by the commands that read traces and OfflineJob manifests.

Contract: ``gleaner predict`` and ``gleaner place`` (and any later command that reads node
traces) take the same trace options (``trace_options``), turn them into node summaries the
same way (``load_nodes``: a file, or Prometheus with the agent metrics and the DCGM
fallback), and report bad input the same way: one ``error: ...`` line, exit 2. Profiles kept
in ConfigMaps are resolved by ``profile_from_configmap`` with the messages the operator uses.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gleaner.cli.common import fail

if TYPE_CHECKING:
    from gleaner.api import Profile
    from gleaner.perfmodel import NodeSummary

F = TypeVar("F", bound=Callable[..., Any])


def trace_options(func: F) -> F:
    """``--trace``/``--prometheus`` (exactly one), ``--window``, ``--at``, ``--step-gib`` and
    ``--min-pair-overlap``, passed as ``trace_path, prometheus_url, window, at_text,
    step_gib, min_pair_overlap``."""
    options = [
        click.option(
            "--trace",
            "trace_path",
            type=click.Path(path_type=Path),
            help="Trace file (CSV or Parquet; format in docs/architecture.md).",
        ),
        click.option(
            "--prometheus", "prometheus_url", help="Prometheus base URL (instead of --trace)."
        ),
        click.option(
            "--window",
            help="Use only the last WINDOW of the trace (90s, 15m, 1h, 1d). "
            "Default: the whole file; 1h for Prometheus.",
        ),
        click.option(
            "--at",
            "at_text",
            help="End of the Prometheus window (ISO time or epoch seconds; default now).",
        ),
        click.option(
            "--step-gib",
            type=click.FloatRange(min=0, min_open=True),
            default=0.5,
            show_default=True,
            help="Harvestable-memory quantization step, GiB (the P_memory error bound's unit).",
        ),
        click.option(
            "--min-pair-overlap",
            type=click.FloatRange(0, 1),
            default=0.95,
            show_default=True,
            help="Admission: smallest busy overlap/union every GPU pair of a job must reach.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def validation_message(exc: Exception) -> str:
    """The first problem of a pydantic error as ``field.path: message``."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        return f"{where}: {err['msg']}"
    return str(exc)


def parse_time(text: str) -> datetime:
    """An ISO time or epoch seconds (UTC when no zone is given)."""
    try:
        return datetime.fromtimestamp(float(text), tz=UTC)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        fail(f"--at must be an ISO time or epoch seconds, got {text!r}")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@contextmanager
def spinner(message: str) -> Iterator[None]:
    """A spinner on stderr while slow work runs (only on a terminal)."""
    if sys.stderr.isatty():
        from rich.console import Console

        with Console(stderr=True).status(message):
            yield
    else:
        yield


def load_nodes(
    trace_path: Path | None,
    prometheus_url: str | None,
    window: str | None,
    at_text: str | None,
    step_gib: float,
) -> dict[str, NodeSummary]:
    """Node summaries from exactly one of a trace file and Prometheus; fail on bad input."""
    from gleaner.api.units import parse_duration
    from gleaner.perfmodel import FileTraceSource, TraceSource

    if (trace_path is None) == (prometheus_url is None):
        fail("give exactly one of --trace FILE and --prometheus URL")
    try:
        window_seconds = parse_duration(window) if window else None
    except ValueError as exc:
        fail(f"--window: {exc}")
    source: TraceSource
    if trace_path is not None:
        source = FileTraceSource(trace_path, window_seconds=window_seconds, step_gib=step_gib)
    else:
        try:
            from gleaner.operator.sources.prometheus import PrometheusTraceSource
        except ImportError as exc:
            fail(f"--prometheus is not available in this installation ({exc})")
        source = PrometheusTraceSource(
            str(prometheus_url),
            window_seconds=window_seconds or 3600.0,
            end=parse_time(at_text) if at_text else None,
            step_gib=step_gib,
        )
    try:
        with spinner("loading node summaries"):
            nodes = source.load()
    except (ValueError, RuntimeError) as exc:
        fail(str(exc))
    if not nodes:
        fail("the trace has no nodes")
    return nodes


def profile_from_configmap(
    job_body: Mapping[str, Any], configmap: Mapping[str, Any] | None
) -> Profile | str:
    """The profile a job names in ``spec.profileFrom``, or why it cannot be had.

    The same rules and messages as the operator (``gleaner.operator.validation``).
    """
    from gleaner.operator.validation import ValidJob, validate_job

    result = validate_job(job_body, configmap)
    if not isinstance(result, ValidJob):
        return result.message
    return result.profile
