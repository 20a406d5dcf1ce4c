"""The resumable batch runner: an OpenAI batch file through the engine, each answer kept once.

Contract (docs/batch.md). ``python -m gleaner.batch.runner --input FILE --state-dir DIR
--engine-url URL`` reads the batch input file (:mod:`gleaner.batch.records`), waits for the
engine (vLLM's OpenAI server in the same Pod) to answer ``GET /v1/models``, and sends every
request not yet answered in ``DIR`` (:mod:`gleaner.batch.store`), ``--concurrency`` at a time.
Each answer is appended to ``DIR`` as soon as it arrives. A restarted runner (the Pod was
evicted, killed, or the node died) finds the answers on disk and sends only the rest, so the
output holds every request exactly once, whatever point the last attempt was stopped at.

What counts as an answer: a 2xx (output file), or a 4xx other than 408/429 (error file: the
request itself is wrong and sending it again cannot help). A refused connection, a timeout,
408, 429 and 5xx are the engine's trouble, not the request's: they are retried, with capped
exponential backoff; a 5xx or 429 that persists ``--max-attempts`` times is recorded in the
error file so one poisonous request cannot stall the batch. An engine that is down is
waited for without limit (the Pod's own restart policy and the operator decide when to give
up).

Exit status: 0 when every request has an answer (``checkpoint.json`` then says
``complete``), 2 for an input file that cannot be run, 1 when stopped (SIGTERM) or on any
other failure. While it runs, ``--progress-port`` serves ``GET /progress`` (the checkpoint's
counts as JSON) for the operator.

With ``--remote URL`` (a job the Batch API created) the input is fetched from the Batch
API first and the result files uploaded to it at the end (:mod:`gleaner.batch.remote`); a
failed upload exits 1. With ``--stop-at`` too (the end of the batch's completion window),
the runner stops sending at that time, uploads the answers so far, ends the batch as
``expired`` and exits 0.

Standard library only: the runner runs beside the engine, in the Gleaner image.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from gleaner.batch.records import BatchRequest, InputError, Result, parse_input
from gleaner.batch.remote import (
    DEFAULT_CA_FILE,
    DEFAULT_TOKEN_FILE,
    RemoteError,
    fetch_input,
    upload_results,
)
from gleaner.batch.store import ERROR_FILE, OUTPUT_FILE, Progress, ProgressStore, StoreError

RETRIED_STATUSES = frozenset({408, 429})
"""Client-error statuses that say "not now" rather than "never"."""


class EngineUnavailableError(ConnectionError):
    """The engine did not answer at all (refused, reset, timed out)."""


@dataclass(frozen=True)
class EngineAnswer:
    status: int
    body: Mapping[str, Any]
    request_id: str


class EngineClient:
    """A small HTTP/1.1 client for the engine's OpenAI server (one connection per call)."""

    def __init__(self, base_url: str, *, timeout: float = 600.0, api_key: str = "") -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"engine URL must be http(s)://host[:port], not {base_url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        self._api_key = api_key

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None) -> EngineAnswer:
        conn_type = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = conn_type(self._host, self._port, timeout=self._timeout)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            payload = json.dumps(body).encode() if body is not None else None
            conn.request(method, self._prefix + path, body=payload, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            request_id = resp.getheader("x-request-id", "") or ""
        except (OSError, http.client.HTTPException) as e:
            raise EngineUnavailableError(f"{method} {path}: {e}") from e
        finally:
            conn.close()
        try:
            parsed = json.loads(data) if data else {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            parsed = {"message": data[:2000].decode("utf-8", "replace")}
        if not isinstance(parsed, dict):
            parsed = {"value": parsed}
        return EngineAnswer(resp.status, parsed, request_id)

    def post(self, path: str, body: Mapping[str, Any]) -> EngineAnswer:
        return self._call("POST", path, body)

    def ready(self) -> bool:
        try:
            return self._call("GET", "/v1/models", None).status == 200
        except EngineUnavailableError:
            return False


@dataclass(frozen=True)
class RetryPolicy:
    """How the runner retries what is the engine's trouble (see the module docstring)."""

    max_attempts: int = 5
    first_backoff: float = 0.5
    max_backoff: float = 15.0

    def backoff(self, attempt: int) -> float:
        return min(self.max_backoff, self.first_backoff * 2.0 ** max(0, attempt - 1))


def answer(
    request: BatchRequest,
    client: EngineClient,
    policy: RetryPolicy,
    stop: threading.Event,
) -> Result | None:
    """Send one request until it has an answer; None when stopped first."""
    failures = 0  # answers that were the engine's trouble (429/5xx), not refused connections
    waits = 0
    while not stop.is_set():
        try:
            got = client.post(request.url, request.body)
        except EngineUnavailableError:
            waits += 1
            stop.wait(policy.backoff(waits))
            continue
        retry = got.status >= 500 or got.status in RETRIED_STATUSES
        if not retry:
            return Result(request.custom_id, got.status, got.body, got.request_id)
        failures += 1
        if failures >= policy.max_attempts:
            return Result(request.custom_id, got.status, got.body, got.request_id)
        stop.wait(policy.backoff(failures))
    return None


def wait_for_engine(
    client: EngineClient, stop: threading.Event, log: Callable[[str], None]
) -> bool:
    """Poll the engine until it serves; False when stopped first."""
    polls = 0
    while not stop.is_set():
        if client.ready():
            return True
        polls += 1
        if polls % 30 == 1:
            log("waiting for the engine to serve /v1/models")
        stop.wait(1.0)
    return False


def run_batch(
    requests: Sequence[BatchRequest],
    store: ProgressStore,
    client: EngineClient,
    *,
    concurrency: int = 8,
    policy: RetryPolicy | None = None,
    stop: threading.Event | None = None,
) -> bool:
    """Answer every request not yet in ``store``; True when all of them are answered.

    Workers send, this thread alone writes to the store (its writes are not thread-safe,
    and one writer keeps each line whole).
    """
    policy = policy or RetryPolicy()
    stop = stop or threading.Event()
    pending: queue.SimpleQueue[BatchRequest | None] = queue.SimpleQueue()
    results: queue.SimpleQueue[Result | None] = queue.SimpleQueue()
    todo = [r for r in requests if not store.is_done(r.custom_id)]
    for r in todo:
        pending.put(r)
    workers = max(1, min(concurrency, len(todo)))
    for _ in range(workers):
        pending.put(None)

    def work() -> None:
        while not stop.is_set():
            req = pending.get()
            if req is None:
                break
            got = answer(req, client, policy, stop)
            if got is not None:
                results.put(got)
        results.put(None)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers if todo else 0)]
    for t in threads:
        t.start()
    running = len(threads)
    while running:
        item = results.get()
        if item is None:
            running -= 1
        else:
            store.record(item)
    answered = all(store.is_done(r.custom_id) for r in requests)
    if answered:
        store.mark_complete()
    else:
        store.checkpoint()
    return answered


class _ProgressServer:
    """``GET /progress``: the store's counts, for the operator (read-only, best effort)."""

    def __init__(self, port: int, progress: Callable[[], Progress]) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/progress":
                    self.send_error(404)
                    return
                data = json.dumps(asdict(outer._progress())).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._progress = progress
        # All interfaces: the operator reads it at the Pod's IP.
        self.server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _ProgressServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gleaner.batch.runner",
        description="Run an OpenAI batch input file through the engine; resumable (docs/batch.md).",
    )
    p.add_argument("--input", type=Path, required=True, help="batch input file (JSON Lines)")
    p.add_argument(
        "--state-dir",
        type=Path,
        required=True,
        help="directory that outlives the Pod (the job's PVC): output, errors, checkpoint",
    )
    p.add_argument("--engine-url", default="http://127.0.0.1:8000", help="the engine's base URL")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight at once")
    p.add_argument("--max-attempts", type=int, default=5, help="tries of a request on 429/5xx")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--checkpoint-every", type=int, default=64, help="answers per checkpoint")
    p.add_argument("--progress-port", type=int, default=0, help="serve GET /progress (0: off)")
    p.add_argument(
        "--remote",
        default="",
        help="the batch's URL in the Batch API: fetch --input from it, upload the results",
    )
    p.add_argument(
        "--token-file",
        type=Path,
        default=Path(DEFAULT_TOKEN_FILE),
        help="bearer token for --remote (the Pod's ServiceAccount token)",
    )
    p.add_argument(
        "--remote-ca",
        type=Path,
        default=Path(DEFAULT_CA_FILE),
        help="PEM file of CAs to trust for an https --remote besides the system's (the "
        "cluster's CA)",
    )
    p.add_argument(
        "--stop-at",
        type=_time,
        default=None,
        help="with --remote: at this time (RFC 3339) stop sending, upload the answers so far "
        "and end the batch as expired (the end of its completion window)",
    )
    p.add_argument(
        "--remote-patience",
        type=float,
        default=600.0,
        help="seconds to keep retrying an unreachable Batch API",
    )
    return p


def _time(text: str) -> float:
    """An RFC 3339 time (``2026-01-01T00:00:00Z``) as Unix seconds."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 time: {text!r}") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone (end it with Z)")
    return when.timestamp()


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.stop_at is not None and not args.remote:
        parser.error("--stop-at needs --remote (only a Batch API batch expires)")

    def log(msg: str) -> None:
        print(f"gleaner-batch: {msg}", file=sys.stderr, flush=True)

    if args.remote:
        try:
            if fetch_input(
                args.remote,
                args.token_file,
                args.input,
                patience=args.remote_patience,
                ca_file=args.remote_ca,
            ):
                log(f"fetched the input from {args.remote}")
        except (OSError, RemoteError) as e:
            log(f"error: {e}")
            return 1
    try:
        with args.input.open(encoding="utf-8") as f:
            requests = parse_input(f)
    except (OSError, InputError) as e:
        log(f"error: {e}")
        return 2
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    expired = threading.Event()
    if args.stop_at is not None:

        def expire() -> None:
            expired.set()
            stop.set()

        window = threading.Timer(max(0.0, args.stop_at - time.time()), expire)
        window.daemon = True
        window.start()
    client = EngineClient(args.engine_url, timeout=args.request_timeout)
    store = ProgressStore(args.state_dir, checkpoint_every=args.checkpoint_every)
    try:
        progress = store.open()
    except (OSError, StoreError, ValueError, KeyError) as e:
        log(f"error: cannot use {args.state_dir}: {e}")
        return 1
    try:
        store.set_total(len(requests))
        log(f"start {progress.starts}: {progress.done} of {len(requests)} already answered")
        with contextlib.ExitStack() as stack:
            if args.progress_port:
                stack.enter_context(_ProgressServer(args.progress_port, lambda: store.progress))
            if not wait_for_engine(client, stop, log) and not expired.is_set():
                return 1
            started = time.monotonic()
            complete = run_batch(
                requests,
                store,
                client,
                concurrency=args.concurrency,
                policy=RetryPolicy(max_attempts=args.max_attempts),
                stop=stop,
            )
        done = store.progress
        how = "complete" if complete else "window closed" if expired.is_set() else "stopped"
        log(
            f"{how}: {done.succeeded} answered, "
            f"{done.failed} refused, of {len(requests)} "
            f"({time.monotonic() - started:.1f} s this attempt)"
        )
    finally:
        store.close()
    if not complete and not expired.is_set():
        return 1
    if args.remote:
        ending = None
        if not complete:  # the window closed: the answers so far, and the batch expires
            ending = {
                "expired": True,
                "request_counts": {
                    "total": len(requests),
                    "completed": done.succeeded,
                    "failed": done.failed,
                },
            }
        try:
            results = {"output": OUTPUT_FILE, "errors": ERROR_FILE}
            upload_results(
                args.remote, args.token_file, args.state_dir, results,
                patience=args.remote_patience, finalize=ending, ca_file=args.remote_ca,
            )  # fmt: skip
        except (OSError, RemoteError) as e:
            log(f"error: uploading the results: {e}")
            return 1
        log(f"uploaded the results to {args.remote}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
