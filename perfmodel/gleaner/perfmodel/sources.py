"""Trace sources: where node summaries come from, behind one ``TraceSource`` protocol.

Contract. A source's ``load()`` returns ``{node name: NodeSummary}`` and raises
``TraceFormatError`` (a ValueError) with a one-line message for malformed input.

- ``FileTraceSource``: a CSV or Parquet file in the trace file format (the format
  is told by the suffix, else by Parquet's ``PAR1`` magic), or NVIDIA DCGM exporter
  metrics saved from Prometheus (a ``/api/v1/query_range`` JSON answer or the text
  exposition format with timestamps, told by the first bytes; ``gleaner.perfmodel.dcgm``
  turns them into trace rows), optionally with a nodes file's
  ``NodeInfo`` per node (labels, GPU product and memory; ``gleaner.perfmodel.inventory``);
- ``NodeTraceListSource``: NodeTrace objects (models or the API server's dicts), the
  embedded default in a cluster;
- the Prometheus source does I/O through prometheus-api-client, so it lives in the
  operator layer (``gleaner.operator.sources.prometheus``) and feeds
  ``NodeSummary.from_totals`` / ``from_samples`` here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gleaner.perfmodel.dcgm import dcgm_trace_frame, is_dcgm_text, read_dcgm_text
from gleaner.perfmodel.frames import summarize_samples
from gleaner.perfmodel.sketch import DEFAULT_MAX_STATES, DEFAULT_STEP_GIB
from gleaner.perfmodel.summary import NodeSummary, TraceFormatError

if TYPE_CHECKING:
    import pandas as pd

    from gleaner.api import NodeTrace
    from gleaner.perfmodel.inventory import NodeInfo


@runtime_checkable
class TraceSource(Protocol):
    """Anything that yields the node summaries of one window."""

    def load(self) -> dict[str, NodeSummary]:
        """Summaries by node name; TraceFormatError on malformed input."""
        ...


def read_trace_frame(path: str | Path) -> pd.DataFrame:
    """Read a trace file into a DataFrame (not yet validated): CSV or Parquet in the trace
    file format, or DCGM exporter metrics saved from Prometheus (``read_dcgm_file``)."""
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise TraceFormatError(f"{p}: no such trace file")
    suffixes = [s.lower() for s in p.suffixes]
    if suffixes and suffixes[-1] in (".parquet", ".pq"):
        parquet = True
    elif suffixes and (suffixes[-1] == ".csv" or suffixes[-2:] == [".csv", ".gz"]):
        parquet = False
    else:
        with p.open("rb") as fh:
            head = fh.read(4096)
        if is_dcgm_text(head):
            return read_dcgm_file(p)
        parquet = head[:4] == b"PAR1"
    try:
        if parquet:
            return pd.read_parquet(p)
        return pd.read_csv(p)
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        kind = "Parquet" if parquet else "CSV"
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceFormatError(f"{p}: not a readable {kind} trace: {detail}") from exc
    except Exception as exc:  # pyarrow raises its own error types
        kind = "Parquet" if parquet else "CSV"
        raise TraceFormatError(f"{p}: not a readable {kind} trace: {type(exc).__name__}") from exc


def read_dcgm_file(path: Path) -> pd.DataFrame:
    """Trace rows from DCGM exporter metrics saved from Prometheus: a query_range JSON answer
    or the text exposition format with timestamps (``gleaner.perfmodel.dcgm``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"{path}: not a readable trace: {exc}") from exc
    try:
        return dcgm_trace_frame(read_dcgm_text(text))
    except TraceFormatError as exc:
        raise TraceFormatError(f"{path}: {exc}") from exc


class FileTraceSource:
    """Node summaries from a CSV or Parquet trace file (docs/architecture.md)."""

    def __init__(
        self,
        path: str | Path,
        *,
        window_seconds: float | None = None,
        step_gib: float = DEFAULT_STEP_GIB,
        max_states: int = DEFAULT_MAX_STATES,
        inventory: Mapping[str, NodeInfo] | None = None,
    ) -> None:
        self.path = Path(path)
        self.window_seconds = window_seconds
        self.step_gib = step_gib
        self.max_states = max_states
        self.inventory = inventory

    def load(self) -> dict[str, NodeSummary]:
        frame = read_trace_frame(self.path)
        try:
            return summarize_samples(
                frame,
                self.step_gib,
                max_states=self.max_states,
                window_seconds=self.window_seconds,
                inventory=self.inventory,
            )
        except TraceFormatError as exc:
            raise TraceFormatError(f"{self.path}: {exc}") from exc


class NodeTraceListSource:
    """Node summaries from NodeTrace objects (pydantic models or API-server dicts)."""

    def __init__(
        self,
        objects: Iterable[NodeTrace | Mapping[str, Any]],
        labels: Mapping[str, Mapping[str, str]] | None = None,
        max_states: int = DEFAULT_MAX_STATES,
    ) -> None:
        self.objects = list(objects)
        self.labels = labels or {}
        self.max_states = max_states

    def load(self) -> dict[str, NodeSummary]:
        from pydantic import ValidationError

        from gleaner.api import NodeTrace as NodeTraceModel
        from gleaner.api.nodetrace import without_hours

        out: dict[str, NodeSummary] = {}
        for i, obj in enumerate(self.objects):
            try:
                nt = (
                    obj
                    if isinstance(obj, NodeTraceModel)
                    else NodeTraceModel.model_validate(without_hours(obj))
                )
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(x) for x in first["loc"])
                raise TraceFormatError(
                    f"NodeTrace #{i}: invalid at {where}: {first['msg']}"
                ) from exc
            name = nt.spec.node_name or nt.metadata.name
            if not name:
                raise TraceFormatError(f"NodeTrace #{i}: no node name (metadata.name)")
            summary = NodeSummary.from_nodetrace(
                nt, labels=self.labels.get(name), max_states=self.max_states
            )
            out[name] = out[name].merge(summary, self.max_states) if name in out else summary
        return out
