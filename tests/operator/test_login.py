"""kopf logs in with what gleaner.clients.kube loads: one loader for both connections."""

from __future__ import annotations

from pathlib import Path

import pytest

from gleaner.clients.kube import Credentials
from gleaner.operator.main import connection_info
from gleaner.testing.kube import KubeEmulator


def test_connection_info_carries_every_credential() -> None:
    creds = Credentials(
        server="https://k8s.example:6443",
        token="t0ken",
        ca_path="/ca.crt",
        cert_path="/tls.crt",
        key_path="/tls.key",
        insecure=False,
        namespace="team",
    )
    info = connection_info(creds)
    assert info.server == "https://k8s.example:6443"
    assert (info.scheme, info.token) == ("Bearer", "t0ken")
    assert (info.ca_path, info.certificate_path, info.private_key_path) == (
        "/ca.crt",
        "/tls.crt",
        "/tls.key",
    )
    assert info.insecure is False and info.default_namespace == "team"
    anonymous = connection_info(Credentials(server="http://127.0.0.1:1", insecure=True))
    assert anonymous.scheme is None and anonymous.token is None and anonymous.insecure


def test_kopf_and_the_client_read_the_same_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with KubeEmulator(tmp_path, namespaces=("team",), default_namespace="team") as kube:
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
        info = connection_info(Credentials.load())
        assert info.server == kube.url and info.token == "kmock-test-token"
        assert info.default_namespace == "team"
