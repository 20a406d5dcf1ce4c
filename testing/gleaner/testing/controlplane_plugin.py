"""pytest fixtures for tests on the real Kubernetes control plane (docs/controlplane.md).

A pytest plugin (``-p gleaner.testing.controlplane_plugin`` in the project's pytest
options), so that every test directory shares the same session fixtures: one control plane
per pytest(-xdist) worker, whichever folder its tests come from.

- ``control_plane`` (session): etcd, kube-apiserver, kube-controller-manager and KWOK
  (``gleaner.testing.controlplane.ControlPlane``) in a session temporary directory, with
  the KWOK GPU nodes in ``GPU_NODES``; stopped (process groups killed) when the session
  ends. Without the ``glcluster`` binary the tests that use it are skipped, saying how to
  build it, unless ``GLEANER_REQUIRE_CONTROLPLANE=1`` (``scripts/test.sh`` sets it, having
  built the binary): then they fail.
- ``gleaner_crds`` (session): ``crds/*.yaml`` applied with kubectl and Established.
- ``kopf_crds`` (session): kopf's peering CRDs from the Helm chart, Established.
- ``namespace``: a fresh namespace for one test, with its default ServiceAccount; deleted
  afterwards.
- ``tenant``: one test's share of the plane (``gleaner.testing.tenant.Tenant``: its own
  namespace, node names, kopf peering and kubeconfig; what earlier tests left removed).

A failing test that used the control plane gets a report section with each component's
log path and last lines.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gleaner.testing.controlplane import (
    REPO_ROOT,
    ControlPlane,
    ControlPlaneUnavailableError,
    GpuNode,
    find_binary,
)
from gleaner.testing.tenant import Tenant

CRDS = REPO_ROOT / "crds"
KOPF_CRDS = REPO_ROOT / "helm" / "gleaner" / "files" / "kopf"
REQUIRE_ENV = "GLEANER_REQUIRE_CONTROLPLANE"

GPU_NODES = (
    GpuNode("gpu-a", gpus=8, product="NVIDIA-H100-80GB-HBM3", labels={"gleaner.dev/pool": "a"}),
    GpuNode("gpu-b", gpus=2, product="NVIDIA-A100-SXM4-80GB"),
)
"""KWOK GPU nodes every control plane starts with."""

_PLANES: list[ControlPlane] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    if report.failed and "control_plane" in getattr(item, "fixturenames", ()):
        for plane in _PLANES:
            report.sections.append(("control plane: where to look", plane.diagnostics()))


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    try:
        binary = find_binary()
    except ControlPlaneUnavailableError as exc:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    plane = ControlPlane(tmp_path_factory.mktemp("controlplane"), binary=binary)
    _PLANES.append(plane)
    try:
        plane.start()
        plane.add_gpu_nodes(*GPU_NODES)
        yield plane
    finally:
        plane.stop()
        _PLANES.remove(plane)


def _apply_established(plane: ControlPlane, directory: Path) -> list[str]:
    """Apply the CRDs in ``directory``, wait until they are Established and until the API
    server serves each one's resources (for a few seconds after Established it may still
    answer a create with "no matches for kind")."""
    files = sorted(directory.glob("*.yaml"))
    names = [path.name.removesuffix(".yaml") for path in files]
    plane.kubectl("apply", *(f"--filename={path}" for path in files))
    plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        *(f"crd/{name}" for name in names),
    )  # fmt: skip
    for path in files:
        spec = yaml.safe_load(path.read_text())["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("served", True))
        url = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}?limit=1"
        deadline = time.monotonic() + 60.0
        while plane.kubectl("get", "--raw", url, check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the API server does not serve {url} 60 s after Established")
            time.sleep(0.2)
    return names


@pytest.fixture(scope="session")
def gleaner_crds(control_plane: ControlPlane) -> list[str]:
    """The names of the CRDs in crds/, applied and Established."""
    return _apply_established(control_plane, CRDS)


@pytest.fixture(scope="session")
def kopf_crds(control_plane: ControlPlane) -> list[str]:
    """kopf's peering CRDs as the Helm chart installs them, Established."""
    return _apply_established(control_plane, KOPF_CRDS)


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", name)
    # Pods need the namespace's default ServiceAccount (admission), which the
    # serviceaccount controller creates a moment after the namespace.
    control_plane.wait_service_account(name)
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def tenant(
    control_plane: ControlPlane,
    gleaner_crds: list[str],
    kopf_crds: list[str],
    tmp_path: Path,
) -> Iterator[Tenant]:
    with Tenant(control_plane, tmp_path / "tenant") as share:
        yield share
