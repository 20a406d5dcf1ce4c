"""The Batch API over HTTPS: the official ``openai`` client, unchanged but for trusting a
test CA, against the operator's Batch API server with a certificate from files; a rotated
certificate (a Secret updated in place) is served without a restart.

The Kubernetes side is test_batchapi_openai's in-memory stand-in (TokenReview and
SubjectAccessReview by tables); the server, TLS and certificate reload are the real ones.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import httpx
import openai
import pytest
import yaml

from gleaner.batch.runner import main as runner_main
from gleaner.clients.kube import SyncKubeClient
from gleaner.operator.batchapi.files import FileStore
from gleaner.operator.batchapi.server import BatchApiServer
from gleaner.testing.net import free_port
from gleaner.testing.openai_engine import FakeOpenAIEngine, batch_api_spec

NS = "team"


class Kube:
    """Just what authentication, authorization and a create need."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, object]] = {
            f"/api/v1/namespaces/{NS}/configmaps/batch-api": {
                "data": {"spec.yaml": yaml.safe_dump(batch_api_spec("m"))}
            }
        }

    def get(self, path: str) -> dict[str, object] | None:
        return self.objects.get(path)

    def create(self, path: str, body: dict[str, object]) -> dict[str, object]:
        spec = cast(dict[str, object], body.get("spec") or {})
        if path.endswith("/tokenreviews"):
            ok = spec.get("token") == "alice"
            user = {"username": "system:serviceaccount:team:alice"} if ok else {}
            return {"status": {"authenticated": ok, "user": user}}
        if path.endswith("/subjectaccessreviews"):
            return {"status": {"allowed": True}}
        meta = cast(dict[str, str], body["metadata"])
        self.objects[f"{path}/{meta['name']}"] = body
        return body

    def delete(self, path: str) -> bool:
        return self.objects.pop(path, None) is not None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def issue(directory: Path, name: str) -> Path:
    """A fresh test CA and a server certificate it signed for 127.0.0.1, written the way
    the kubelet updates a Secret volume (made elsewhere, moved into place); returns the
    CA's certificate, which a client must trust."""
    work = directory / name
    work.mkdir()
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
             "-subj", f"/CN=test CA {name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=work)  # fmt: skip
    _openssl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=batch-api",
             cwd=work)  # fmt: skip
    (work / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "tls.crt", "-days", "1", "-extfile", "san.ext",
             cwd=work)  # fmt: skip
    (work / "tls.key").replace(directory / "tls.key")
    (work / "tls.crt").replace(directory / "tls.crt")
    return work / "ca.crt"


def trusting(ca: Path) -> openai.DefaultHttpxClient:
    """The openai client's own HTTP client, trusting ``ca``."""
    return openai.DefaultHttpxClient(verify=ssl.create_default_context(cafile=str(ca)))


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "tls"
    directory.mkdir()
    return directory


@pytest.fixture
def served(tmp_path: Path, tls_dir: Path) -> Iterator[tuple[str, BatchApiServer, Path]]:
    ca = issue(tls_dir, "first")
    port = free_port()
    server = BatchApiServer(
        FileStore(tmp_path / "files", max_file_bytes=1 << 20),
        cast(SyncKubeClient, Kube()),
        f"https://127.0.0.1:{port}",
        "127.0.0.1",
        port,
        cert_dir=str(tls_dir),
        reload_interval_s=0.05,
    ).start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "the Batch API never started"
            time.sleep(0.05)
        yield f"https://127.0.0.1:{port}", server, ca
    finally:
        server.stop()


LINE = {
    "custom_id": "r0",
    "method": "POST",
    "url": "/v1/chat/completions",
    "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
}


def test_the_openai_client_over_https_with_a_test_ca(
    served: tuple[str, BatchApiServer, Path],
) -> None:
    url, _, ca = served
    with trusting(ca) as http:
        alice = openai.OpenAI(base_url=f"{url}/v1", api_key="alice", http_client=http)
        uploaded = alice.files.create(
            file=("in.jsonl", (json.dumps(LINE) + "\n").encode()), purpose="batch"
        )
        batch = alice.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        assert alice.batches.retrieve(batch.id).status == "validating"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(
                base_url=f"{url}/v1", api_key="forged", http_client=http, max_retries=0
            ).batches.list()
    # A client that does not trust the CA refuses the server; plain HTTP is not served.
    untrusting = openai.OpenAI(base_url=f"{url}/v1", api_key="alice", max_retries=0)
    with pytest.raises(openai.APIConnectionError):
        untrusting.files.list()
    with pytest.raises(httpx.HTTPError):
        httpx.get(url.replace("https", "http") + "/v1/files", timeout=5)


def test_a_rotated_certificate_is_served_without_a_restart(
    served: tuple[str, BatchApiServer, Path], tls_dir: Path
) -> None:
    url, server, first = served
    with trusting(first) as http:
        assert http.get(f"{url}/v1/files").status_code == 401  # TLS fine, no token
    assert server.tls is not None
    watch = server.tls.certificate
    watch.reloaded.clear()
    second = issue(tls_dir, "second")
    assert watch.reloaded.wait(30), "the rotated certificate was never loaded"
    with trusting(second) as http:
        alice = openai.OpenAI(base_url=f"{url}/v1", api_key="alice", http_client=http)
        assert list(alice.files.list()) == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/v1/files", verify=ssl.create_default_context(cafile=str(first)))


def test_the_runner_fetches_and_uploads_over_https(
    served: tuple[str, BatchApiServer, Path], tmp_path: Path
) -> None:
    """The job's runner in remote mode against the https Batch API, trusting the test CA
    (``--remote-ca``; in a Pod, the cluster's CA beside its token): input fetched, every
    request answered by the fake engine, results uploaded, downloaded by the client."""
    url, _, ca = served
    with trusting(ca) as http:
        alice = openai.OpenAI(base_url=f"{url}/v1", api_key="alice", http_client=http)
        uploaded = alice.files.create(
            file=("in.jsonl", (json.dumps(LINE) + "\n").encode()), purpose="batch"
        )
        batch = alice.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        token = tmp_path / "token"
        token.write_text("alice")
        remote = f"{url}/gleaner/v1/namespaces/{NS}/batches/{batch.id}"
        with FakeOpenAIEngine() as engine:
            base = [
                "--input", str(tmp_path / "in.jsonl"),
                "--state-dir", str(tmp_path / "run"),
                "--engine-url", engine.url,
                "--remote", remote,
                "--token-file", str(token),
            ]  # fmt: skip
            # Without the CA the runner cannot verify the server, and says so.
            assert runner_main([*base, "--remote-ca", str(tmp_path / "none.pem"),
                                "--remote-patience", "0"]) == 1  # fmt: skip
            assert runner_main([*base, "--remote-ca", str(ca)]) == 0
        output_id = alice.batches.retrieve(batch.id).output_file_id
        assert output_id is not None
        (line,) = alice.files.content(output_id).text.splitlines()
        assert json.loads(line)["custom_id"] == "r0"
