"""gleaner.api.nodetrace.gpu_uuid: the one synthetic GPU UUID (agent's simulated backend,
cluster simulator, test harnesses all report the same UUID for the same node and index)."""

from __future__ import annotations

import uuid

from gleaner.api import GpuInfo
from gleaner.api.nodetrace import gpu_uuid


def test_format_is_a_gpu_uuid() -> None:
    value = gpu_uuid("node-a", 1)
    assert value.startswith("GPU-")
    parsed = uuid.UUID(value.removeprefix("GPU-"))
    assert parsed.version == 5
    assert value == f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, '1.node-a.gleaner.dev')}"
    assert GpuInfo(index=1, uuid=value, memory_gi_b=80).uuid == value


def test_deterministic_and_distinct() -> None:
    assert gpu_uuid("node-a", 0) == gpu_uuid("node-a", 0)
    names = {gpu_uuid(node, i) for node in ("node-a", "node-b", "gpu-node-0001") for i in range(8)}
    assert len(names) == 24
