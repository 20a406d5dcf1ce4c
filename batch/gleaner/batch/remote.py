"""The runner's remote mode: its input from the Batch API, its results back to it.

Contract (docs/batch.md, "The Batch API"). A job the Batch API created names its batch's
URL (``--remote URL``, from the job's ``gleaner.dev/batch-api`` annotation). Then the
runner

- before it starts, fetches ``GET URL/input`` into ``--input`` unless that file exists
  already (a restarted attempt reuses it; written to a temporary name, ``fsync``-ed and
  renamed, so a killed download leaves no half file);
- once every request has an answer, uploads ``output.jsonl`` (``PUT URL/output``) and
  ``errors.jsonl`` (``PUT URL/errors``) from the state directory and says so
  (``POST URL/finalize``). Uploads replace: an attempt killed between them repeats them.
- with ``--stop-at`` (the end of the batch's completion window), stops sending at that
  time, uploads the answers so far and finalizes with ``{"expired": true,
  "request_counts": {...}}``: the batch ends ``expired`` with its partial results.

An ``https`` URL is verified against the system's CAs plus ``--remote-ca`` (default: the
cluster's CA mounted beside the token). Each call carries the Pod's ServiceAccount token
(``--token-file``, re-read per call as the kubelet rotates it) as ``Authorization: Bearer``.
A refused connection, a timeout or a 5xx is retried with capped exponential backoff for
``patience`` seconds; a 4xx is final.

Standard library only, like the rest of the runner.
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

DEFAULT_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
"""Where the kubelet mounts a Pod's ServiceAccount token (a path, not a secret)."""
DEFAULT_CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
"""The cluster's CA, mounted beside the token: trusted for an ``https`` Batch API besides
the system's CAs, so a certificate the cluster's CA issued needs nothing more."""


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    """The system's trusted CAs, plus ``ca_file`` (PEM) when it exists."""
    context = ssl.create_default_context()
    if ca_file is not None and ca_file.is_file():
        context.load_verify_locations(cafile=str(ca_file))
    return context


class RemoteError(Exception):
    """The Batch API refused a call, or did not answer within the patience."""


def _call(
    url: str,
    token_file: Path,
    method: str,
    body: bytes | None,
    *,
    patience: float,
    sleep: Callable[[float], None] = time.sleep,
    timeout: float = 300.0,
    ca_file: Path | None = None,
) -> bytes:
    context = tls_context(ca_file) if url.startswith("https:") else None
    give_up = time.monotonic() + patience
    attempt = 0
    while True:
        token = token_file.read_text().strip()
        request = urllib.request.Request(
            url, data=body, method=method, headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                data: bytes = response.read()
                return data
        except urllib.error.HTTPError as e:
            if e.code < 500:
                raise RemoteError(f"{method} {url}: {e.code} {e.read()[:500]!r}") from e
            problem = f"{e.code}"
        except (urllib.error.URLError, OSError) as e:
            problem = str(e)
        attempt += 1
        if time.monotonic() >= give_up:
            raise RemoteError(f"{method} {url}: gave up after {attempt} tries ({problem})")
        sleep(min(30.0, 0.5 * 2**attempt))


def fetch_input(
    url: str,
    token_file: Path,
    dest: Path,
    *,
    patience: float = 600.0,
    ca_file: Path | None = None,
) -> bool:
    """Download the batch's input to ``dest`` unless it is there; True when it downloaded."""
    if dest.exists():
        return False
    data = _call(f"{url}/input", token_file, "GET", None, patience=patience, ca_file=ca_file)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    with tmp.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(dest)
    return True


def upload_results(
    url: str,
    token_file: Path,
    state_dir: Path,
    files: dict[str, str],
    *,
    patience: float = 600.0,
    finalize: Mapping[str, object] | None = None,
    ca_file: Path | None = None,
) -> None:
    """Upload the result files (``{kind: file name in state_dir}``), then finalize (with
    ``finalize`` as its JSON body: ``{"expired": true, "request_counts": {...}}`` when the
    completion window closed first)."""
    for kind, name in files.items():
        path = state_dir / name
        body = path.read_bytes() if path.exists() else b""
        _call(f"{url}/{kind}", token_file, "PUT", body, patience=patience, ca_file=ca_file)
    ending = json.dumps(dict(finalize)).encode() if finalize is not None else b""
    _call(f"{url}/finalize", token_file, "POST", ending, patience=patience, ca_file=ca_file)
