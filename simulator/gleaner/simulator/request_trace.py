"""Replay a user's own online request trace at the node level, in the public formats users have.

Contract. :func:`parse_requests` turns the text of a request trace into
:class:`~gleaner.simulator.workload.Requests` (arrival s from the window start, prompt and
output tokens), sorted by arrival; :func:`read_requests` reads a file and calls it. Formats
(``format: auto`` picks by the first line, JSONL when it starts with ``{``):

- ``azure`` — the Azure LLM inference traces (2023, 2024): CSV with
  ``TIMESTAMP,ContextTokens,GeneratedTokens``; TIMESTAMP an ISO date-time (any number of
  fractional digits) or seconds;
- ``mooncake`` — the Mooncake traces: JSONL objects with ``timestamp`` (milliseconds),
  ``input_length``, ``output_length`` (other keys, e.g. ``hash_ids``, are ignored);
- ``burstgpt`` — BurstGPT: CSV with ``Timestamp`` (seconds), ``Model``, ``Request tokens``,
  ``Response tokens`` (further columns ignored).

:class:`RequestTraceConfig` (the node scenario's ``requests:`` section) selects a time window
of the trace (``start_s`` after its first request, ``duration_s`` long, in trace time) and a
rate scale (2 = twice the request rate: arrival gaps halved). Requests with 0 prompt or 0
output tokens (failed requests in BurstGPT) are dropped and counted; lengths above the
online engine's caps are clipped and counted. A malformed row raises :class:`TraceError`
with one line naming the file, the line number and the column.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from gleaner.simulator.workload import Requests

Format = Literal["auto", "azure", "mooncake", "burstgpt"]

COLUMNS: dict[str, tuple[str, str, str]] = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "mooncake": ("timestamp", "input_length", "output_length"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
}
"""Per format: the (arrival, prompt tokens, output tokens) columns or keys."""


class TraceError(ValueError):
    """A request trace that cannot be read; the message is one line."""


class RequestTraceConfig(BaseModel):
    """An online request trace to replay instead of the synthetic arrivals."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="The trace file (Azure CSV, Mooncake JSONL or BurstGPT CSV).")
    format: Format = Field(default="auto", description="File format (auto: from its content).")
    rate_scale: float = Field(
        default=1.0, gt=0, description="Request rate multiplier (2: arrival gaps halved)."
    )
    start_s: float = Field(
        default=0.0, ge=0, description="Window start, seconds after the first request."
    )
    duration_s: float | None = Field(
        default=None, gt=0, description="Window length in trace seconds (default: to the end)."
    )


@dataclass(frozen=True)
class ReplayedRequests:
    """The requests of a window and what was done to get them."""

    requests: Requests
    format: str
    rows: int
    dropped: int
    """Rows with 0 prompt or 0 output tokens."""
    clipped: int
    """Requests whose lengths were capped."""
    window_s: float
    """Length of the replayed window on the simulated clock (after rate scaling)."""


def _number(raw: object, where: str, column: str) -> float:
    if isinstance(raw, bool):
        raise TraceError(f"{where}: column {column!r}: not a number ({raw!r})")
    if isinstance(raw, (int, float)):
        value = float(raw)
    else:
        try:
            value = float(str(raw).strip())
        except ValueError:
            raise TraceError(f"{where}: column {column!r}: not a number ({raw!r})") from None
    if not np.isfinite(value) or value < 0:
        raise TraceError(f"{where}: column {column!r}: must be a finite number ≥ 0 ({raw!r})")
    return value


def _azure_time(raw: str, where: str, column: str) -> float:
    text = raw.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise TraceError(
            f"{where}: column {column!r}: not a date-time or seconds ({raw!r})"
        ) from None


def _detect(text: str) -> str:
    head = text.lstrip()[:1]
    if head == "{":
        return "mooncake"
    first = text.splitlines()[0] if text else ""
    cols = [c.strip() for c in first.split(",")]
    for name in ("azure", "burstgpt"):
        if all(c in cols for c in COLUMNS[name]):
            return name
    raise TraceError(
        "unknown request trace format: want a CSV header with "
        f"{','.join(COLUMNS['azure'])} (Azure) or {','.join(COLUMNS['burstgpt'])} (BurstGPT), "
        "or JSONL objects with timestamp, input_length, output_length (Mooncake)"
    )


def _rows(text: str, fmt: str, source: str) -> list[tuple[float, float, float]]:
    t_col, p_col, o_col = COLUMNS[fmt]
    out: list[tuple[float, float, float]] = []
    if fmt == "mooncake":
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{source}:{i}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{where}: not a JSON object ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{where}: not a JSON object")
            for col in (t_col, p_col, o_col):
                if col not in obj:
                    raise TraceError(f"{where}: column {col!r}: missing")
            out.append(
                (
                    _number(obj[t_col], where, t_col) / 1000.0,
                    _number(obj[p_col], where, p_col),
                    _number(obj[o_col], where, o_col),
                )
            )
        return out
    reader = csv.reader(io.StringIO(text))
    header = [c.strip() for c in next(reader, [])]
    missing = [c for c in (t_col, p_col, o_col) if c not in header]
    if missing:
        raise TraceError(f"{source}:1: missing column {missing[0]!r} (header: {','.join(header)})")
    idx = [header.index(c) for c in (t_col, p_col, o_col)]
    for row in reader:
        if not row or all(not c.strip() for c in row):
            continue
        where = f"{source}:{reader.line_num}"
        if len(row) < len(header):
            col = header[len(row)]
            raise TraceError(f"{where}: column {col!r}: missing ({len(row)} of {len(header)})")
        raw_t = row[idx[0]]
        t = _azure_time(raw_t, where, t_col) if fmt == "azure" else _number(raw_t, where, t_col)
        out.append((t, _number(row[idx[1]], where, p_col), _number(row[idx[2]], where, o_col)))
    return out


def parse_requests(
    text: str,
    config: RequestTraceConfig,
    max_prompt: int,
    max_output: int,
    source: str = "trace",
) -> ReplayedRequests:
    """The requests of ``config``'s window of ``text`` (see the module docstring)."""
    fmt = config.format if config.format != "auto" else _detect(text)
    rows = _rows(text, fmt, source)
    if not rows:
        raise TraceError(f"{source}: no requests")
    arr = np.array(rows, dtype=np.float64)
    arr = arr[np.argsort(arr[:, 0], kind="stable")]
    t = arr[:, 0] - arr[0, 0]
    keep = t >= config.start_s
    if config.duration_s is not None:
        keep &= t < config.start_s + config.duration_s
    win = arr[keep]
    t = t[keep] - config.start_s
    ok = (win[:, 1] > 0) & (win[:, 2] > 0)
    dropped = int((~ok).sum())
    win, t = win[ok], t[ok]
    if win.shape[0] == 0:
        raise TraceError(f"{source}: no request with tokens in the window")
    prompt = np.rint(win[:, 1]).astype(np.int64)
    output = np.rint(win[:, 2]).astype(np.int64)
    clipped = int(((prompt > max_prompt) | (output > max_output)).sum())
    span = config.duration_s if config.duration_s is not None else float(t[-1]) + 1e-3
    return ReplayedRequests(
        requests=Requests(
            arrival=t / config.rate_scale,
            prompt=np.clip(prompt, 1, max_prompt),
            output=np.clip(output, 1, max_output),
        ),
        format=fmt,
        rows=len(rows),
        dropped=dropped,
        clipped=clipped,
        window_s=span / config.rate_scale,
    )


def read_requests(config: RequestTraceConfig, max_prompt: int, max_output: int) -> ReplayedRequests:
    """Read ``config.path`` and parse it (see :func:`parse_requests`)."""
    path = Path(config.path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a UTF-8 text file") from None
    return parse_requests(text, config, max_prompt, max_output, source=str(path))


def split_round_robin(requests: Requests, gpus: int) -> list[Requests]:
    """Request ``i`` to GPU ``i mod gpus`` (a load balancer in front of ``gpus`` engines)."""
    return [
        Requests(
            arrival=requests.arrival[g::gpus],
            prompt=requests.prompt[g::gpus],
            output=requests.output[g::gpus],
        )
        for g in range(gpus)
    ]
