"""The OpenAI batch file formats: input lines in, output and error lines out (pure).

Contract (docs/batch.md, "Formats"). An input file is JSON Lines, one request a line:
``{"custom_id": str, "method": "POST", "url": "/v1/chat/completions", "body": {...}}``.
``custom_id`` is unique within the file (the OpenAI Batch API refuses duplicates, and the
runner's exactly-once promise is stated per ``custom_id``). ``url`` is one of
:data:`SUPPORTED_URLS`. A malformed line is refused with its line number, before any
request is sent.

Each answered request gives one output line, as the OpenAI Batch API writes them:
``{"id": "batch_req_…", "custom_id": …, "response": {"status_code": …, "request_id": …,
"body": {…}}, "error": null}``. A request the engine refused (a 4xx, or a 5xx that stayed
after the retries) goes to the error file instead, with its status and the engine's error.

Only the standard library: the runner that uses this runs in the job's Pod beside the
engine.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SUPPORTED_URLS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
"""The endpoints a batch line may target (those vLLM's OpenAI server serves)."""

MAX_CUSTOM_ID_LENGTH = 512


class InputError(ValueError):
    """A batch input file that cannot be run, with the line that says why."""


@dataclass(frozen=True)
class BatchRequest:
    """One line of a batch input file."""

    custom_id: str
    method: str
    url: str
    body: Mapping[str, Any]
    line: int

    def expected_tokens(self, default_max_tokens: int) -> int:
        """Tokens this request may generate at most, for estimates before any answer."""
        value = self.body.get("max_completion_tokens", self.body.get("max_tokens"))
        return value if isinstance(value, int) and value > 0 else default_max_tokens


def parse_line(text: str, line: int) -> BatchRequest:
    """One input line; ``InputError`` naming the line and the field when it is malformed."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"line {line}: not JSON ({e.msg})") from None
    if not isinstance(raw, dict):
        raise InputError(f"line {line}: a request must be a JSON object")
    custom_id = raw.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise InputError(f"line {line}: custom_id must be a non-empty string")
    if len(custom_id) > MAX_CUSTOM_ID_LENGTH:
        raise InputError(f"line {line}: custom_id longer than {MAX_CUSTOM_ID_LENGTH} characters")
    method = raw.get("method", "POST")
    if method != "POST":
        raise InputError(f"line {line}: method must be POST, not {method!r}")
    url = raw.get("url")
    if url not in SUPPORTED_URLS:
        raise InputError(f"line {line}: url must be one of {', '.join(SUPPORTED_URLS)}")
    body = raw.get("body")
    if not isinstance(body, dict):
        raise InputError(f"line {line}: body must be a JSON object")
    return BatchRequest(custom_id=custom_id, method=method, url=url, body=body, line=line)


def parse_input(lines: Iterable[str]) -> list[BatchRequest]:
    """Every request of an input file, in file order; blank lines are skipped.

    Refuses a repeated ``custom_id``: output is keyed by it, so two requests with one id
    could not both be answered exactly once.
    """
    requests: list[BatchRequest] = []
    first_seen: dict[str, int] = {}
    for n, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        req = parse_line(text, n)
        if req.custom_id in first_seen:
            raise InputError(
                f"line {n}: custom_id {req.custom_id!r} repeats line {first_seen[req.custom_id]}"
            )
        first_seen[req.custom_id] = n
        requests.append(req)
    return requests


def request_line_id(custom_id: str) -> str:
    """The ``batch_req_…`` id of a request's output line: derived from its custom_id, so a
    request answered again after a crash gets the same id."""
    return "batch_req_" + hashlib.sha256(custom_id.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Usage:
    """Tokens one answer used (0 where the engine did not say)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def usage_of(body: Mapping[str, Any] | None) -> Usage:
    """The ``usage`` block of an engine answer, tolerant of its absence."""
    usage = body.get("usage") if isinstance(body, Mapping) else None
    if not isinstance(usage, Mapping):
        return Usage()
    prompt = usage.get("prompt_tokens", 0)
    completion = usage.get("completion_tokens", 0)
    return Usage(
        prompt_tokens=prompt if isinstance(prompt, int) else 0,
        completion_tokens=completion if isinstance(completion, int) else 0,
    )


@dataclass(frozen=True)
class Result:
    """The final answer to one request: what goes to the output or the error file."""

    custom_id: str
    status_code: int
    body: Mapping[str, Any]
    request_id: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status_code < 300

    def to_line(self) -> dict[str, Any]:
        """The OpenAI batch output (or error) line for this answer."""
        error: dict[str, Any] | None = None
        if not self.ok:
            message = self.body.get("message") if isinstance(self.body, Mapping) else None
            nested = self.body.get("error") if isinstance(self.body, Mapping) else None
            if isinstance(nested, Mapping):
                message = nested.get("message", message)
            error = {
                "code": str(self.status_code),
                "message": str(message) if message else f"engine answered {self.status_code}",
            }
        return {
            "id": request_line_id(self.custom_id),
            "custom_id": self.custom_id,
            "response": {
                "status_code": self.status_code,
                "request_id": self.request_id,
                "body": dict(self.body),
            },
            "error": error,
        }


def encode_line(line: Mapping[str, Any]) -> bytes:
    """One JSON Lines record: compact, UTF-8, newline-terminated (the newline marks it whole)."""
    return (json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def decode_output_line(data: bytes) -> tuple[str, Usage] | None:
    """The custom_id and usage of one output or error line; None for a torn or foreign line."""
    if not data.endswith(b"\n"):
        return None
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("custom_id"), str):
        return None
    response = raw.get("response")
    body = response.get("body") if isinstance(response, dict) else None
    return raw["custom_id"], usage_of(body if isinstance(body, dict) else None)
