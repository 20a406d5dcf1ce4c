"""Inputs shared by the commands that read traces and OfflineJob manifests.

Contract: ``gleaner predict`` and ``gleaner place`` (and any later command that reads node
traces) take the same trace options (``trace_options``), turn them into node summaries the
same way (``load_nodes``: a file, or Prometheus with the agent metrics and the DCGM
fallback, with a nodes file's labels and GPU products applied to either), and report bad
input the same way: one ``error: ...`` line, exit 2; a YAML error names its line and column
(``load_yaml``). ``selector_notes`` says, in plain words, when a job's gpuSelector is judged
on labels or GPU products the input never gave. Profiles kept in ConfigMaps are resolved by
``profile_from_configmap`` with the messages the operator uses.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gleaner.cli.common import fail

if TYPE_CHECKING:
    from gleaner.api import Profile
    from gleaner.perfmodel import NodeSummary
    from gleaner.perfmodel.inventory import NodeInfo

F = TypeVar("F", bound=Callable[..., Any])


def trace_options(func: F) -> F:
    """``--trace``/``--prometheus`` (exactly one), ``--nodes``, ``--window``, ``--at``,
    ``--step-gib`` and ``--min-pair-overlap``, passed as ``trace_path, nodes_path,
    prometheus_url, window, at_text, step_gib, min_pair_overlap``."""
    options = [
        click.option(
            "--trace",
            "trace_path",
            type=click.Path(path_type=Path),
            help="Trace file: CSV or Parquet, or DCGM metrics saved from Prometheus "
            "(formats in docs/formats.md), or NodeTraces and NodeHistories saved with "
            "kubectl get nodetraces,nodehistories -o yaml (predicted as the operator does).",
        ),
        click.option(
            "--nodes",
            "nodes_path",
            type=click.Path(path_type=Path),
            help="Nodes file: labels, GPU product and memory per node, for gpuSelector "
            "(YAML, or kubectl get nodes -o yaml; format in docs/architecture.md).",
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


def yaml_error(exc: Exception) -> str:
    """A YAML parse error as ``line L, column C: problem`` (one line)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    if mark is None:
        return " ".join(str(exc).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem or 'not valid YAML'}"


def load_yaml(path: Path, what: str) -> list[Any]:
    """Every non-empty document of the YAML file ``path``; fail with the line and column of
    a syntax error (``what`` names the file's role in the message)."""
    import yaml

    try:
        text = path.read_text()
    except OSError as exc:
        fail(f"{what} {path}: {exc.strerror or exc}")
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        fail(f"{what} {path}: not valid YAML: {yaml_error(exc)}")


def load_inventory(nodes_path: Path) -> dict[str, NodeInfo]:
    """The nodes file's information per node (``gleaner.perfmodel.inventory``)."""
    from gleaner.perfmodel.inventory import InventoryError, parse_nodes

    try:
        return parse_nodes(load_yaml(nodes_path, "--nodes"))
    except InventoryError as exc:
        fail(f"--nodes {nodes_path}: {exc}")


def load_nodes(
    trace_path: Path | None,
    prometheus_url: str | None,
    window: str | None,
    at_text: str | None,
    step_gib: float,
    nodes_path: Path | None = None,
) -> dict[str, NodeSummary]:
    """Node summaries from exactly one of a trace file and Prometheus, with the nodes file's
    labels and GPU specs applied; fail on bad input."""
    from gleaner.api.units import parse_duration
    from gleaner.perfmodel import FileTraceSource, TraceSource
    from gleaner.perfmodel.inventory import apply_inventory

    if (trace_path is None) == (prometheus_url is None):
        fail("give exactly one of --trace FILE and --prometheus URL")
    try:
        window_seconds = parse_duration(window) if window else None
    except ValueError as exc:
        fail(f"--window: {exc}")
    inventory = load_inventory(nodes_path) if nodes_path is not None else {}
    objects = nodetrace_objects(trace_path) if trace_path is not None else None
    if objects is not None:
        nodes = nodes_from_nodetraces(*objects, parse_time(at_text) if at_text else None)
        if not nodes:
            fail(f"{trace_path}: no NodeTrace could be read")
        return apply_inventory(nodes, inventory)
    source: TraceSource
    if trace_path is not None:
        source = FileTraceSource(
            trace_path, window_seconds=window_seconds, step_gib=step_gib, inventory=inventory
        )
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
    return apply_inventory(nodes, inventory)


NODETRACE_SUFFIXES = (".yaml", ".yml", ".json")


def nodetrace_objects(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """(NodeTraces, NodeHistories) of a YAML or JSON file of them, as ``kubectl get
    nodetraces,nodehistories -o yaml`` writes it (a ``List`` or separate documents); None
    when the file holds no NodeTrace (a trace file of another format)."""
    import yaml

    if path.suffix.lower() not in NODETRACE_SUFFIXES or not path.is_file():
        return None
    if path.suffix.lower() != ".json":
        parsed = load_yaml(path, "--trace")
    else:
        try:
            parsed = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            # Not one JSON document (e.g. Prometheus answers saved one object per line): the
            # file is read as a trace of another format, whose reader says what is wrong.
            return None
    docs: list[Any] = []
    for doc in parsed:
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else None
        docs.extend(items if isinstance(items, list) else [doc])
    objects = [d for d in docs if isinstance(d, dict)]
    traces = [d for d in objects if d.get("kind") == "NodeTrace"]
    if not traces:
        return None
    return traces, [d for d in objects if d.get("kind") == "NodeHistory"]


def nodes_from_nodetraces(
    traces: Sequence[dict[str, Any]],
    histories: Sequence[dict[str, Any]],
    at: datetime | None,
) -> dict[str, NodeSummary]:
    """The summaries the operator's scheduling pass would predict from, at ``at`` (None: the
    newest report): each NodeTrace with its node's hours of the day joined, judged by the
    hours ahead where there are hours (``gleaner.operator.traces``, the same code)."""
    from gleaner.operator.tracecache import HistoryCache
    from gleaner.operator.traces import summaries_from_nodetraces, with_histories

    cache = HistoryCache()
    for history in histories:
        cache.update("ADDED", history)
    joined = with_histories(list(traces), cache)
    if at is None:
        reported = summaries_from_nodetraces(joined)
        times = [s.last_report_time for s in reported.values() if s.last_report_time]
        at = max(times) if times else datetime.now(UTC)
    return summaries_from_nodetraces(joined, at)


def selector_notes(
    nodes: Mapping[str, NodeSummary], node_selector: Mapping[str, str], products: Sequence[str]
) -> list[str]:
    """Plain words for a gpuSelector judged on what the input never gave: node labels that
    no node reports, GPU products that some node does not report."""
    notes = []
    if node_selector and not any(s.labels for s in nodes.values()):
        wanted = ", ".join(f"{k}={v}" for k, v in sorted(node_selector.items()))
        notes.append(
            f"the job asks for nodes labelled {wanted}, but the input gives no node labels: "
            "give them with --nodes FILE (docs/architecture.md, Nodes file)"
        )
    if products and any(not g.product for s in nodes.values() for g in s.gpus):
        notes.append(
            f"the job asks for GPU product {', '.join(products)}, but the input does not say "
            "which GPUs some nodes have: add a gpu_product column to the trace or give "
            "--nodes FILE (docs/architecture.md)"
        )
    return notes


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
