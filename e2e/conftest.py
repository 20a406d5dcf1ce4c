"""End-to-end scenarios: real processes (the real Kubernetes control plane, agents,
Prometheus, operator) on loopback.

Fixtures:

- ``start_system(nodes=NODES, emulated=False, **kwargs)`` starts a whole ``GleanerSystem``
  (``gleaner.testing.system``) in the test's ``tmp_path`` and returns it: on the worker's
  real control plane (docs/controlplane.md) through a ``Tenant`` with the fixed namespaces
  ``default`` and ``batch`` that the scenarios name (emptied afterwards), or, with
  ``emulated``, on kmock's emulator (only for a scenario the real API server cannot run,
  which says why). Every system a test started is stopped when the test ends, pass or fail
  (process groups killed, the emulator thread stopped, the tenant's objects removed).
- ``examples``: the repository's ``examples/`` directory.

When a test fails, its report gets a section "gleaner e2e: where to look" with each
process' log path and last lines and the objects in the emulator (see e2e/README.md).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

import pytest

from gleaner.testing.controlplane import ControlPlane
from gleaner.testing.system import NAMESPACES, GleanerSystem, SimNode
from gleaner.testing.tenant import Tenant

REPO = Path(__file__).resolve().parents[1]

NODES: tuple[SimNode, ...] = (
    # Quiet GPUs that do not move together: good for one-GPU jobs, no aligned pair.
    SimNode("node-a", busy=(0.05, 0.12), free_gib=70.0),
    # Busy GPUs with little free memory: no example fits here.
    SimNode("node-b", busy=(0.55, 0.65), free_gib=30.0),
    # Two GPUs busy at the same moments (one online service over both): an aligned pair.
    SimNode("node-c", busy=(0.3, 0.3), free_gib=76.0, aligned=True),
)
"""The default cluster: three nodes with distinct online traces."""

SYSTEMS_ATTR = "_gleaner_systems"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    if report.failed:
        for system in getattr(item, SYSTEMS_ATTR, []):
            report.sections.append(("gleaner e2e: where to look", system.diagnostics()))


@pytest.fixture
def start_system(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Generator[Callable[..., GleanerSystem]]:
    systems: list[GleanerSystem] = []
    tenants: list[Tenant] = []
    setattr(request.node, SYSTEMS_ATTR, systems)

    def start(
        nodes: Sequence[SimNode] = NODES, *, emulated: bool = False, **kwargs: Any
    ) -> GleanerSystem:
        workdir = tmp_path / f"system-{len(systems)}"
        tenant = None
        if not emulated:
            plane: ControlPlane = request.getfixturevalue("control_plane")
            request.getfixturevalue("gleaner_crds")
            request.getfixturevalue("kopf_crds")
            tenant = Tenant(plane, workdir / "tenant", namespaces=NAMESPACES).open()
            tenants.append(tenant)
        system = GleanerSystem(workdir, nodes, tenant=tenant, **kwargs)
        systems.append(system)
        return system.start()

    try:
        yield start
    finally:
        for system in systems:
            system.stop()
        for tenant in tenants:
            tenant.close()


@pytest.fixture
def examples() -> Path:
    return REPO / "examples"
