"""The CPU wakeup-latency request (gleaner.runtime_agent.cpulatency, ``gleaner cpu-latency``).

The last tests use the machine's real PM QoS device when this process may write it (root):
they hold a request, read the bound the kernel has in force, and check that it ends.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gleaner.runtime_agent.cpulatency import (
    DEVICE,
    MAX_REQUEST_US,
    CpuLatencyError,
    CpuLatencyRequest,
    effective_latency_us,
    encode_request,
)


def test_a_request_is_the_kernels_native_integer() -> None:
    assert encode_request(0) == struct.pack("=i", 0)
    assert encode_request(20) == struct.pack("=i", 20)
    assert encode_request(MAX_REQUEST_US) == struct.pack("=i", MAX_REQUEST_US)


@pytest.mark.parametrize("bad", [-1, MAX_REQUEST_US + 1, True, 1.5, "10"])
def test_a_request_outside_the_kernels_range_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"microseconds|between 0"):
        encode_request(bad)  # type: ignore[arg-type]


def test_a_missing_device_is_named_with_what_to_do(tmp_path: Path) -> None:
    missing = tmp_path / "cpu_dma_latency"
    with pytest.raises(CpuLatencyError, match=r"cpu_dma_latency does not exist.*container"):
        CpuLatencyRequest.hold(0, missing)
    with pytest.raises(CpuLatencyError, match="does not exist"):
        effective_latency_us(missing)


def test_a_device_that_is_not_a_file_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(CpuLatencyError, match=r"cannot open .*: Is a directory"):
        CpuLatencyRequest.hold(0, tmp_path)


def _open_files() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


def test_the_request_is_written_once_and_held_until_closed(tmp_path: Path) -> None:
    device = tmp_path / "qos"
    device.touch()
    fds_before = _open_files()
    with CpuLatencyRequest.hold(25, device) as request:
        held_inside = request.held
        assert device.read_bytes() == encode_request(25)
        assert effective_latency_us(device) == 25
        assert _open_files() == fds_before + 1  # the file stays open
    assert held_inside
    assert not request.held
    assert _open_files() == fds_before
    request.close()  # idempotent
    assert not request.held


def _may_write_device() -> bool:
    return DEVICE.exists() and os.access(DEVICE, os.R_OK | os.W_OK)


needs_device = pytest.mark.skipif(
    not _may_write_device(), reason=f"{DEVICE} missing or not writable here (needs root)"
)


@pytest.fixture
def bound_before() -> Iterator[int]:
    before = effective_latency_us()
    if before == 0:
        pytest.skip("another process holds a 0 µs request: a new one would not show")
    yield before


@needs_device
def test_the_kernel_applies_the_request_while_it_is_held(bound_before: int) -> None:
    with CpuLatencyRequest.hold(0):
        assert effective_latency_us() == 0
    assert effective_latency_us() == bound_before


@needs_device
def test_the_command_holds_the_bound_until_sigterm(bound_before: int) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gleaner.cli.main", "cpu-latency", "--max-wakeup-us", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # written once the request is in force
        assert "holding a CPU wakeup latency of at most 0 µs (in force now: 0 µs)" in first
        assert effective_latency_us() == 0
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 0
        assert "SIGTERM: request ended" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert effective_latency_us() == bound_before


def test_the_command_explains_a_request_it_cannot_make(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gleaner.cli.main", "cpu-latency", "--device", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'x'} does not exist (a kernel without PM QoS, or a container "
        "without the device)"
    ]
