"""A fake engine that serves the OpenAI API the batch runner drives (vLLM's OpenAI server).

``gleaner.testing.vllm_fake`` models vLLM's scheduler for the KV hook; it serves no HTTP.
This one serves ``GET /v1/models``, ``POST /v1/chat/completions``, ``/v1/completions`` and
``/v1/embeddings`` on a local port, in a thread, with answers that are a pure function of
the request body, so a test can check every output line against what the engine would say:

- the answer's text is :func:`expected_text` of the body;
- ``usage``: ``prompt_tokens`` = :func:`prompt_tokens` of the body, ``completion_tokens`` =
  the body's ``max_tokens`` (16 when absent);
- a body with ``"refuse": true`` gets a 400 (a request error: never retried);
- with ``flaky_every=k``, the first try of every k-th distinct body gets a 503 (retried).

``delay`` seconds (a float, or a function of the body) slow each answer, so a test can
stop the runner while requests are in flight. ``served`` counts the answers per body
fingerprint: a test sees how many answers were sent more than once (allowed: the runner
resends what it had not recorded) apart from how many output lines there are (exactly one).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-model"
DEFAULT_MAX_TOKENS = 16


def fingerprint(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def expected_text(body: Mapping[str, Any]) -> str:
    """The text the fake answers ``body`` with."""
    return f"answer-{fingerprint(body)}"


def prompt_tokens(body: Mapping[str, Any]) -> int:
    return 1 + len(json.dumps(body.get("messages", body.get("prompt", body.get("input", "")))))


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A runner killed mid-request leaves a broken pipe behind: expected, not news.
        return


class FakeOpenAIEngine:
    """The fake engine on ``127.0.0.1:<port>``; ``with`` starts and stops it."""

    def __init__(
        self,
        *,
        delay: float | Callable[[Mapping[str, Any]], float] = 0.0,
        flaky_every: int = 0,
        port: int = 0,
    ) -> None:
        self.delay = delay
        self.flaky_every = flaky_every
        self.served: Counter[str] = Counter()
        self.tries: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._order: dict[str, int] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _send(self, status: int, doc: Mapping[str, Any]) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-request-id", f"req-{time.monotonic_ns()}")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                try:
                    body = json.loads(self.rfile.read(length))
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                status, doc = outer.answer(self.path, body)
                self._send(status, doc)

        self._server = _QuietServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def answer(self, path: str, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """What the fake answers (also usable without HTTP)."""
        fp = fingerprint(body)
        with self._lock:
            self.tries[fp] += 1
            order = self._order.setdefault(fp, len(self._order) + 1)
            first_try = self.tries[fp] == 1
        wait = self.delay(body) if callable(self.delay) else self.delay
        if wait > 0:
            time.sleep(wait)
        if body.get("refuse"):
            return 400, {"error": {"message": "refused by request", "type": "invalid_request"}}
        if self.flaky_every and first_try and order % self.flaky_every == 0:
            return 503, {"error": {"message": "engine busy"}}
        completion = body.get("max_tokens", DEFAULT_MAX_TOKENS)
        usage = {
            "prompt_tokens": prompt_tokens(body),
            "completion_tokens": completion,
            "total_tokens": prompt_tokens(body) + completion,
        }
        text = expected_text(body)
        with self._lock:
            self.served[fp] += 1
        if path == "/v1/chat/completions":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
            return 200, {
                "id": f"chatcmpl-{fp}",
                "object": "chat.completion",
                "model": MODEL,
                "choices": [choice],
                "usage": usage,
            }
        if path == "/v1/completions":
            return 200, {
                "id": f"cmpl-{fp}",
                "object": "text_completion",
                "model": MODEL,
                "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                "usage": usage,
            }
        if path == "/v1/embeddings":
            return 200, {
                "object": "list",
                "model": MODEL,
                "data": [{"object": "embedding", "index": 0, "embedding": [0.0, 1.0]}],
                "usage": usage,
            }
        return 404, {"error": {"message": f"no route {path}"}}

    def __enter__(self) -> FakeOpenAIEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def batch_api_spec(model: str) -> dict[str, Any]:
    """The OfflineJob spec a namespace's Batch API ConfigMap (key ``spec.yaml``) gives the
    tests: one GPU, a small profile, and a ``spec.batch`` for ``model`` whose input and
    output the API fills in per batch."""
    return {
        "gpus": 1,
        "throughputSLA": 0.2,
        "profile": {
            "standaloneTokensPerSecond": 1000,
            "requiredMemoryGiB": 10,
            "memoryCurve": [
                {"memoryGiB": 5, "tokensPerSecond": 500},
                {"memoryGiB": 10, "tokensPerSecond": 1000},
            ],
        },
        "batch": {
            "model": model,
            "engineImage": "vllm/vllm-openai:v0.8.5",
            "claimName": "batch-data",
            "input": "unused.jsonl",
            "output": "unused",
        },
    }
