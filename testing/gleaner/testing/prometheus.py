"""A real Prometheus server on loopback with backfilled history, for tests and demos.

Contract. ``PrometheusServer(series)`` writes the given time series as OpenMetrics text,
turns it into TSDB blocks with ``promtool tsdb create-blocks-from openmetrics`` in a
fresh temporary data directory, starts the ``prometheus`` binary on a free
127.0.0.1 port with a minimal configuration (no scrape targets), waits until
``/-/ready`` answers, and on exit stops the process and removes the directory.
``url`` is the server's base URL. Retention is set far out (100y) so fixed historical
timestamps stay queryable; query the range you backfilled (``end=`` a datetime).

    series = [Series("gleaner_gpu_online_busy_seconds_total", {"node": "n1", "gpu": "0"},
                     [(t0, 0.0), (t0 + 15, 3.0)], kind="counter")]
    with PrometheusServer(series) as prom:
        PrometheusConnect(prom.url).custom_query("up")

Raises ``PrometheusUnavailableError`` when the binaries are missing or the server does not
become ready (the message carries the tail of its log).
"""

from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

from gleaner.testing.net import free_port

MetricKind = Literal["counter", "gauge", "unknown"]


class PrometheusUnavailableError(RuntimeError):
    """The prometheus/promtool binaries are missing or the server did not start."""


@dataclass(frozen=True)
class Series:
    """One time series: metric name (counters end in ``_total``), labels, (time s, value)."""

    name: str
    labels: Mapping[str, str]
    samples: Sequence[tuple[float, float]]
    kind: MetricKind = "gauge"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def to_openmetrics(series: Iterable[Series]) -> str:
    """OpenMetrics text for ``series``: families grouped, samples in time order, ``# EOF``."""
    families: dict[str, tuple[MetricKind, list[Series]]] = {}
    for s in series:
        family = s.name.removesuffix("_total") if s.kind == "counter" else s.name
        kind, members = families.setdefault(family, (s.kind, []))
        if kind != s.kind:
            raise ValueError(f"metric family {family} given as both {kind} and {s.kind}")
        members.append(s)
    lines: list[str] = []
    for family, (kind, members) in families.items():
        lines.append(f"# TYPE {family} {kind}")
        for s in members:
            label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items()))
            head = f"{s.name}{{{label_text}}}" if label_text else s.name
            for ts, value in sorted(s.samples):
                lines.append(f"{head} {_number(value)} {ts:.3f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@dataclass
class PrometheusServer:
    """A backfilled Prometheus on loopback; use as a context manager."""

    series: Sequence[Series] = ()
    startup_timeout: float = 60.0
    prometheus_binary: str = "prometheus"
    promtool_binary: str = "promtool"
    url: str = field(default="", init=False)
    _tmp: Path | None = field(default=None, init=False, repr=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def _binary(self, name: str) -> str:
        found = shutil.which(name)
        if found is None:
            raise PrometheusUnavailableError(
                f"{name} not found on PATH (Debian: apt install prometheus)"
            )
        return found

    def start(self) -> Self:
        prometheus = self._binary(self.prometheus_binary)
        promtool = self._binary(self.promtool_binary)
        self._tmp = Path(tempfile.mkdtemp(prefix="gleaner-prom-"))
        data = self._tmp / "data"
        data.mkdir()
        if self.series:
            source = self._tmp / "history.om.txt"
            source.write_text(to_openmetrics(self.series))
            done = subprocess.run(
                [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
            if done.returncode != 0:
                self.stop()
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                raise PrometheusUnavailableError(f"promtool backfill failed: {' | '.join(tail)}")
        config = self._tmp / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\n")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        log = (self._tmp / "prometheus.log").open("wb")
        self._proc = subprocess.Popen(
            [
                prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        tail = self.log_tail()
        self.stop()
        raise PrometheusUnavailableError(f"prometheus did not become ready: {tail}")

    def log_tail(self, lines: int = 5) -> str:
        if self._tmp is None:
            return ""
        path = self._tmp / "prometheus.log"
        if not path.exists():
            return ""
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
            self._proc = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
