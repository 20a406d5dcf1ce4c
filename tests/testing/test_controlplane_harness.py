"""The control-plane harness's parts that need no control plane: the binary lookup, the GPU
node manifests, the kubeconfigs and the throw-away PKI (the openssl CLI only).

The harness running for real is e2e/controlplane (docs/controlplane.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gleaner.testing.controlplane import (
    BINARY_ENV,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    KWOK_ANNOTATION,
    ControlPlane,
    ControlPlaneUnavailableError,
    GpuNode,
    KubectlError,
    Pki,
    find_binary,
    gpu_node_manifest,
    kubeconfig_document,
)


def test_find_binary_says_how_to_build_it_when_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(BINARY_ENV, str(tmp_path / "absent"))
    with pytest.raises(ControlPlaneUnavailableError, match=r"scripts/controlplane-build\.sh"):
        find_binary()
    with pytest.raises(ControlPlaneUnavailableError):
        ControlPlane(tmp_path / "plane").start()


def test_find_binary_honours_the_environment_and_wants_an_executable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    binary = tmp_path / "glcluster"
    binary.write_text("#!/bin/sh\n")
    monkeypatch.setenv(BINARY_ENV, str(binary))
    with pytest.raises(ControlPlaneUnavailableError):
        find_binary()  # not executable
    binary.chmod(0o755)
    assert find_binary() == binary


def test_gpu_node_manifest_is_a_kwok_node_with_gpu_capacity_and_labels() -> None:
    node = gpu_node_manifest(GpuNode("gpu-x", gpus=4, product="NVIDIA-L4", labels={"pool": "b"}))
    assert node["kind"] == "Node" and node["metadata"]["name"] == "gpu-x"
    key, value = KWOK_ANNOTATION
    assert node["metadata"]["annotations"] == {key: value}
    labels = node["metadata"]["labels"]
    assert labels[GPU_PRODUCT_LABEL] == "NVIDIA-L4"
    assert labels["pool"] == "b"
    assert labels["kubernetes.io/hostname"] == "gpu-x"
    assert node["status"]["capacity"][GPU_RESOURCE] == "4"
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    assert node["status"]["allocatable"] is not node["status"]["capacity"]


def test_extra_labels_override_the_defaults() -> None:
    node = gpu_node_manifest(GpuNode("n", labels={"type": "real", GPU_PRODUCT_LABEL: "X"}))
    assert node["metadata"]["labels"]["type"] == "real"
    assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == "X"


def test_kubeconfig_document_names_one_cluster_user_and_context(tmp_path: Path) -> None:
    doc = kubeconfig_document(
        "https://127.0.0.1:6443", tmp_path / "ca.crt", tmp_path / "u.crt", tmp_path / "u.key", "u"
    )
    (cluster,) = doc["clusters"]
    assert cluster["cluster"] == {
        "server": "https://127.0.0.1:6443",
        "certificate-authority": str(tmp_path / "ca.crt"),
    }
    (user,) = doc["users"]
    assert user == {
        "name": "u",
        "user": {
            "client-certificate": str(tmp_path / "u.crt"),
            "client-key": str(tmp_path / "u.key"),
        },
    }
    assert doc["current-context"] == "u"
    assert doc["contexts"] == [{"name": "u", "context": {"cluster": cluster["name"], "user": "u"}}]


def _openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


def test_the_pki_signs_what_the_api_server_and_its_clients_need(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki").generate()
    ca = str(pki.path("ca.crt"))
    for name in ("apiserver", "admin", "controller-manager", "scheduler"):
        assert "OK" in _openssl("verify", "-CAfile", ca, str(pki.path(f"{name}.crt")))

    server = _openssl("x509", "-in", str(pki.path("apiserver.crt")), "-noout", "-text")
    assert "TLS Web Server Authentication" in server
    assert "IP Address:127.0.0.1" in server and "DNS:localhost" in server

    admin = _openssl("x509", "-in", str(pki.path("admin.crt")), "-noout", "-subject")
    assert "O = system:masters" in admin
    manager = _openssl("x509", "-in", str(pki.path("controller-manager.crt")), "-noout", "-subject")
    assert "CN = system:kube-controller-manager" in manager
    scheduler = _openssl("x509", "-in", str(pki.path("scheduler.crt")), "-noout", "-subject")
    assert "CN = system:kube-scheduler" in scheduler
    client = _openssl("x509", "-in", str(pki.path("admin.crt")), "-noout", "-text")
    assert "TLS Web Client Authentication" in client

    # The service-account key pair: the public half is derived from the private one.
    derived = _openssl("pkey", "-in", str(pki.path("sa.key")), "-pubout")
    assert derived == pki.path("sa.pub").read_text()


def test_a_loopback_server_pair_is_signed_by_its_own_ca_for_127_0_0_1(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "webhook").loopback_server()
    assert sorted(p.name for p in pki.dir.glob("*.crt")) == ["ca.crt", "tls.crt"]
    assert pki.path("tls.key").is_file()
    assert "OK" in _openssl("verify", "-CAfile", str(pki.path("ca.crt")), str(pki.path("tls.crt")))
    server = _openssl("x509", "-in", str(pki.path("tls.crt")), "-noout", "-text")
    assert "TLS Web Server Authentication" in server
    assert "IP Address:127.0.0.1" in server
    # The key is the certificate's.
    public = _openssl("pkey", "-in", str(pki.path("tls.key")), "-pubout")
    assert public == _openssl("x509", "-in", str(pki.path("tls.crt")), "-noout", "-pubkey")


def test_kubectl_errors_carry_kubectl_stderr() -> None:
    result = subprocess.CompletedProcess(["kubectl", "get"], 1, "", "Error from server: nope\n")
    error = KubectlError(result)
    assert "Error from server: nope" in str(error)
    assert error.returncode == 1
