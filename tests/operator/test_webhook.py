"""gleaner.operator.webhook: AdmissionReview in, AdmissionReview out (no cluster; the real
kube-apiserver calls it in e2e/controlplane/test_webhook.py)."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from gleaner.api.contract import ANNOTATION_INJECTED, FINALIZER, LABEL_ROLE, ROLE_ONLINE
from gleaner.operator.config import OperatorConfig
from gleaner.operator.main import start_webhook
from gleaner.operator.webhook import MUTATE_PATH, WebhookServer, build_webhook_app
from gleaner.testing.net import free_port


def _review(obj: Any, kind: str = "Pod") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "namespace": "serving",
            "operation": "CREATE",
            "object": obj,
        },
    }


def _post(body: Any) -> dict[str, Any]:
    client = TestClient(build_webhook_app())
    answer = client.post(MUTATE_PATH, content=json.dumps(body))
    assert answer.status_code == 200
    review: dict[str, Any] = answer.json()
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    response: dict[str, Any] = review["response"]
    return response


POD = {
    "metadata": {"name": "s", "labels": {LABEL_ROLE: ROLE_ONLINE}},
    "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
}


def test_an_online_pod_gets_a_json_patch() -> None:
    response = _post(_review(POD))
    assert response["uid"] == "u-1" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    paths = [op["path"] for op in patch]
    assert paths == ["/spec/containers", "/spec/volumes", "/metadata/annotations"]
    assert patch[-1]["value"] == {ANNOTATION_INJECTED: ROLE_ONLINE}


def test_a_pod_that_cannot_be_instrumented_is_refused() -> None:
    pod = {
        "metadata": {"name": "s"},
        "spec": {"containers": [{"name": "a", "env": [{"name": "LD_PRELOAD", "valueFrom": {}}]}]},
    }
    response = _post(_review(pod))
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 403
    assert "LD_PRELOAD from valueFrom" in response["status"]["message"]


def _job_review(obj: Any, operation: str = "CREATE") -> dict[str, Any]:
    review = _review(obj)
    review["request"].update(
        kind={"group": "gleaner.dev", "version": "v1alpha1", "kind": "OfflineJob"},
        resource={"group": "gleaner.dev", "version": "v1alpha1", "resource": "offlinejobs"},
        operation=operation,
    )
    return review


JOB = {"apiVersion": "gleaner.dev/v1alpha1", "kind": "OfflineJob", "metadata": {"name": "j"}}


def test_an_offline_job_gets_the_finalizer_patch() -> None:
    response = _post(_job_review(JOB))
    assert response["uid"] == "u-1" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    assert patch == [{"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]


@pytest.mark.parametrize(
    "body",
    [
        _job_review({**JOB, "metadata": {"name": "j", "finalizers": [FINALIZER]}}),
        _job_review(JOB, operation="UPDATE"),
        _job_review(None),
        _job_review({"metadata": "unreadable"}),  # whatever the object looks like
    ],
)
def test_an_offline_job_is_admitted_unchanged_when_there_is_nothing_to_add(body: Any) -> None:
    response = _post(body)
    assert response["allowed"] is True
    assert "patch" not in response and "status" not in response


def test_a_pod_shaped_like_a_job_still_goes_to_the_pod_decision() -> None:
    # The review's kind routes, not the object: a Pod is instrumented, never finalized.
    response = _post(_review({**POD, "kind": "OfflineJob"}))
    patch = json.loads(base64.b64decode(response["patch"]))
    assert "/metadata/finalizers" not in {op["path"] for op in patch}
    assert "/spec/containers" in {op["path"] for op in patch}


def _other_group_pod() -> dict[str, Any]:
    review = _review(POD)
    review["request"]["kind"]["group"] = "example.io"
    return review


@pytest.mark.parametrize(
    "body", [_review(POD, kind="Deployment"), _other_group_pod(), _review(None), ["x"]]
)
def test_anything_but_a_pod_or_offline_job_review_is_refused(body: Any) -> None:
    response = _post(body)
    assert response["allowed"] is False
    assert "Gleaner" in response["status"]["message"]


def test_the_server_refuses_to_start_without_its_certificate(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        WebhookServer(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), "127.0.0.1", 0)


def _self_signed(directory: Path) -> None:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", "tls.key", "-out", "tls.crt", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        cwd=directory, check=True, capture_output=True,
    )  # fmt: skip


def test_the_operator_serves_the_webhook_over_tls_when_configured(tmp_path: Path) -> None:
    assert start_webhook(OperatorConfig()) is None  # off by default
    _self_signed(tmp_path)
    port = free_port()
    config = OperatorConfig(
        webhook_port=port, webhook_host="127.0.0.1", webhook_cert_dir=str(tmp_path)
    )
    server = start_webhook(config)
    assert server is not None
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        url = f"https://127.0.0.1:{port}{MUTATE_PATH}"
        with httpx.Client(verify=ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))) as c:
            answer = c.post(url, content=json.dumps(_review(POD)))
        assert answer.status_code == 200
        assert answer.json()["response"]["allowed"] is True
        with pytest.raises(httpx.HTTPError):
            httpx.post(url.replace("https", "http"), content=b"{}", timeout=5)
    finally:
        server.stop()


def _rotate(directory: Path, name: str) -> Path:
    """A new self-signed pair, written the way the kubelet updates a Secret volume: both
    files made elsewhere, then moved into place. Returns the new certificate (the CA)."""
    staging = directory / name
    staging.mkdir()
    _self_signed(staging)
    ca = directory / f"{name}.pem"
    ca.write_bytes((staging / "tls.crt").read_bytes())
    (staging / "tls.key").replace(directory / "tls.key")
    (staging / "tls.crt").replace(directory / "tls.crt")
    return ca


def _handshake(port: int, cafile: Path) -> int:
    url = f"https://127.0.0.1:{port}{MUTATE_PATH}"
    with httpx.Client(verify=ssl.create_default_context(cafile=str(cafile)), timeout=10) as c:
        return c.post(url, content=json.dumps(_review(POD))).status_code


def _first_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate directory with its first pair; the directory and that pair's CA."""
    cert_dir = tmp_path / "tls"
    cert_dir.mkdir()
    return cert_dir, _rotate(cert_dir, "first")


@contextmanager
def _serving(cert_dir: Path, port: int, reload_interval_s: float) -> Iterator[WebhookServer]:
    """The webhook on ``port`` with ``cert_dir``'s pair, once it serves (stopped on exit)."""
    server = WebhookServer(
        str(cert_dir / "tls.crt"), str(cert_dir / "tls.key"), "127.0.0.1", port,
        reload_interval_s=reload_interval_s,
    ).start()  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        yield server
    finally:
        server.stop()


def test_the_webhook_reloads_a_rotated_certificate_without_a_restart(tmp_path: Path) -> None:
    cert_dir, first = _first_pair(tmp_path)
    port = free_port()
    with _serving(cert_dir, port, reload_interval_s=0.05) as server:
        assert _handshake(port, first) == 200
        watch = server.certificate
        watch.reloaded.clear()
        second = _rotate(cert_dir, "second")
        assert watch.reloaded.wait(30), "the rotated certificate was never loaded"
        assert watch.reloads == 1 and server.thread.is_alive()
        assert _handshake(port, second) == 200
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            _handshake(port, first)  # the old certificate is no longer served


def test_a_broken_certificate_pair_is_not_loaded_and_the_old_one_stays(tmp_path: Path) -> None:
    cert_dir, first = _first_pair(tmp_path)
    port = free_port()
    with _serving(cert_dir, port, reload_interval_s=3600) as server:
        watch = server.certificate
        assert not watch.check()  # nothing changed
        # A new certificate beside the old key: they do not match.
        other = tmp_path / "other"
        other.mkdir()
        _self_signed(other)
        (cert_dir / "tls.crt").write_bytes((other / "tls.crt").read_bytes())
        assert not watch.check() and watch.failures == 1
        assert not watch.check() and watch.failures == 1  # reported once per pair
        assert _handshake(port, first) == 200  # still the old pair
        (cert_dir / "tls.key").unlink()
        assert not watch.check() and watch.failures == 1  # mid-swap: wait, keep serving
        (cert_dir / "tls.key").write_bytes((other / "tls.key").read_bytes())
        assert watch.check() and watch.reloads == 1
        assert _handshake(port, other / "tls.crt") == 200
