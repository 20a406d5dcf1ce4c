"""Real processes for end-to-end tests: start, watch, diagnose and always clean up.

Contract.

- ``ManagedProcess(name, argv, log_path, env=...)`` runs one command in its own session
  (``start_new_session``), so ``kill()`` (SIGKILL, a crash) and ``stop()`` (SIGTERM, then
  SIGKILL after a grace period) reach the whole process group, children included. Its
  stdout and stderr go to ``log_path``; ``log_tail(n)`` reads the last lines back.
- ``ProcessSet`` owns every process a test starts (``add``), stops them all in reverse
  order (``stop_all``; safe to call twice, never raises) and writes ``diagnostics()``: for
  each process its command, state, log path and the last lines of its log. Tests print
  that when they fail, so a failure always says where to look.
- ``ScrapingPrometheus`` is the real ``prometheus`` binary on a free loopback port with a
  short scrape interval and file-based service discovery: ``set_targets(job, [host:port])``
  rewrites a target file that Prometheus picks up without a restart (agents can come and
  go during a test). Its data directory lives under the given work directory.
- ``wait_http(url)`` polls until a URL answers 200; ``http_json(url)`` GETs JSON;
  ``free_port()`` finds a free loopback port.

Nothing here knows Gleaner; ``gleaner.testing.system`` builds the whole system from it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from gleaner.testing.net import free_port
from gleaner.testing.prometheus import PrometheusUnavailableError

__all__ = [
    "ManagedProcess",
    "ProcessSet",
    "PrometheusUnavailableError",
    "ScrapingPrometheus",
    "http_json",
    "wait_http",
]


class ManagedProcess:
    """One command in its own process group, logging to a file (see the module docstring)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self) -> Self:
        if self.alive():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"==== start #{self.starts}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole group (a crash: no cleanup handlers run) and reap it."""
        if self.proc is None:
            return
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM the group, wait ``grace`` seconds, then SIGKILL what is left."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace)
        # Children that outlived their parent still belong to the group.
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 20) -> list[str]:
        return self.log().splitlines()[-lines:]

    def state(self) -> str:
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        return f"running (pid {self.proc.pid})" if code is None else f"exited with {code}"


class ProcessSet:
    """Every process of one test: started through ``add``, stopped by ``stop_all``."""

    def __init__(self) -> None:
        self.processes: list[ManagedProcess] = []
        self.notes: list[str] = []

    def add(self, process: ManagedProcess) -> ManagedProcess:
        self.processes.append(process)
        return process

    def get(self, name: str) -> ManagedProcess:
        for process in self.processes:
            if process.name == name:
                return process
        raise KeyError(name)

    def stop_all(self, grace: float = 5.0) -> None:
        for process in reversed(self.processes):
            with contextlib.suppress(Exception):
                process.stop(grace)

    def diagnostics(self, lines: int = 25) -> str:
        out = ["Where to look (each process' log, last lines):"]
        for process in self.processes:
            out.append(f"--- {process.name}: {process.state()}; log: {process.log_path}")
            out.append(f"    command: {' '.join(process.argv)}")
            out.extend(f"    | {line}" for line in process.log_tail(lines))
        out.extend(self.notes)
        return "\n".join(out)


def http_json(url: str, *, method: str = "GET", timeout: float = 5.0) -> Any:
    """GET (or ``method``) ``url`` and decode JSON; raises on HTTP errors."""
    request = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return json.loads(resp.read().decode() or "null")


def http_text(url: str, *, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


def http_status(url: str, *, timeout: float = 5.0) -> int:
    """The HTTP status of a GET (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


def wait_http(
    url: str,
    *,
    timeout: float = 60.0,
    process: ManagedProcess | None = None,
) -> None:
    """Poll ``url`` until it answers 200; fail early if ``process`` exits meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        if http_status(url, timeout=2.0) == 200:
            return
        if process is not None and process.proc is not None and not process.alive():
            tail = "\n".join(process.log_tail(15))
            raise RuntimeError(f"{process.name} exited ({process.state()}) before {url}:\n{tail}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer 200 within {timeout:.0f} s")
        time.sleep(0.1)


class ScrapingPrometheus:
    """The real Prometheus scraping loopback targets found through a file (module doc)."""

    def __init__(
        self,
        workdir: Path,
        *,
        scrape_interval: str = "1s",
        binary: str = "prometheus",
        startup_timeout: float = 60.0,
    ) -> None:
        self.workdir = Path(workdir)
        self.scrape_interval = scrape_interval
        self.binary = binary
        self.startup_timeout = startup_timeout
        self.port = 0
        self.url = ""
        self.targets: dict[str, list[str]] = {}
        self.process: ManagedProcess | None = None

    @property
    def targets_file(self) -> Path:
        return self.workdir / "targets.json"

    def config_text(self) -> str:
        return (
            "global:\n"
            f"  scrape_interval: {self.scrape_interval}\n"
            f"  scrape_timeout: {self.scrape_interval}\n"
            f"  evaluation_interval: {self.scrape_interval}\n"
            "scrape_configs:\n"
            "  - job_name: gleaner\n"
            # The agents' per-job counter has a ``job`` label (the OfflineJob); keep it
            # instead of renaming it ``exported_job`` (the operator queries ``job=...``).
            "    honor_labels: true\n"
            "    file_sd_configs:\n"
            f"      - files: ['{self.targets_file}']\n"
            "        refresh_interval: 1s\n"
        )

    def set_targets(self, job: str, targets: Sequence[str]) -> None:
        """Scrape ``targets`` (``host:port``) under label ``role=<job>`` from now on."""
        self.targets[job] = list(targets)
        groups = [
            {"targets": list(t), "labels": {"role": name}} for name, t in self.targets.items() if t
        ]
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.targets_file)  # atomic: Prometheus never reads half a file

    def build(self) -> ManagedProcess:
        exe = shutil.which(self.binary)
        if exe is None:
            raise PrometheusUnavailableError(
                f"{self.binary} not found on PATH (Debian: apt install prometheus)"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.targets_file.exists():
            self.set_targets("none", [])
        config = self.workdir / "prometheus.yml"
        config.write_text(self.config_text())
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = ManagedProcess(
            "prometheus",
            [
                exe,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            self.workdir / "prometheus.log",
        )
        return self.process

    def wait_ready(self) -> None:
        try:
            wait_http(f"{self.url}/-/ready", timeout=self.startup_timeout, process=self.process)
        except (TimeoutError, RuntimeError) as exc:
            raise PrometheusUnavailableError(str(exc)) from exc

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query; the ``result`` list of the answer."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        payload = http_json(url)
        if payload.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed: {payload}")
        return list(payload["data"]["result"])

    def active_targets(self) -> list[dict[str, Any]]:
        payload = http_json(f"{self.url}/api/v1/targets?state=active")
        return list(payload["data"]["activeTargets"])
