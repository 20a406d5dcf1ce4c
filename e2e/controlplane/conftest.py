"""Fixtures for the tests on the real Kubernetes control plane (docs/controlplane.md).

They live in the pytest plugin ``gleaner.testing.controlplane_plugin`` (loaded for every
test directory by the project's pytest options), so that these tests, the operator's
process tests in tests/operator and the e2e scenarios share one control plane per pytest
worker: ``control_plane`` (session, with the KWOK GPU nodes in ``GPU_NODES``),
``gleaner_crds``, ``kopf_crds``, ``namespace`` and ``tenant``.
"""

from __future__ import annotations

from gleaner.testing.controlplane_plugin import GPU_NODES

__all__ = ["GPU_NODES"]
