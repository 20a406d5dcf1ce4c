"""Fixtures for the tests on the real Kubernetes control plane (docs/controlplane.md).

- ``control_plane`` (session): etcd, kube-apiserver, kube-controller-manager and KWOK
  (``gleaner.testing.controlplane.ControlPlane``) in a session temporary directory, with the
  KWOK GPU nodes in ``GPU_NODES``; stopped (process groups killed) when the session ends.
  Without the ``glcluster`` binary the tests are skipped, saying how to build it, unless
  ``GLEANER_REQUIRE_CONTROLPLANE=1`` (``scripts/test.sh`` sets it, having built the
  binary): then they fail.
- ``gleaner_crds`` (session): ``crds/*.yaml`` applied with kubectl and Established.
- ``namespace``: a fresh namespace for one test, with its default ServiceAccount;
  deleted afterwards.

A failing test's report gets a section with each component's log path and last lines.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from gleaner.testing.controlplane import (
    ControlPlane,
    ControlPlaneUnavailableError,
    GpuNode,
    find_binary,
)

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
REQUIRE_ENV = "GLEANER_REQUIRE_CONTROLPLANE"

GPU_NODES = (
    GpuNode("gpu-a", gpus=8, product="NVIDIA-H100-80GB-HBM3", labels={"gleaner.dev/pool": "a"}),
    GpuNode("gpu-b", gpus=2, product="NVIDIA-A100-SXM4-80GB"),
)

_PLANES: list[ControlPlane] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    if report.failed:
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


@pytest.fixture(scope="session")
def gleaner_crds(control_plane: ControlPlane) -> list[str]:
    """The names of the CRDs in crds/, applied and Established."""
    files = sorted(CRDS.glob("*.yaml"))
    names = [path.name.removesuffix(".yaml") for path in files]
    control_plane.kubectl("apply", *(f"--filename={path}" for path in files))
    control_plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        *(f"crd/{name}" for name in names),
    )  # fmt: skip
    return names


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
