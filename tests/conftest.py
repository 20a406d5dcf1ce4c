"""Fixtures shared by the shim, protocol and vLLM hook tests: the C shim built once per
session (``shim_build``) and a Unix-socket path short enough for ``sun_path``
(``sock_path``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gleaner.testing.shim import build_shim


@pytest.fixture(scope="session")
def shim_build() -> Path:
    if shutil.which("make") is None or shutil.which("gcc") is None:
        pytest.fail("the shim tests need make and gcc (scripts/bootstrap.sh installs them)")
    return build_shim()


@pytest.fixture
def sock_path(shim_build: Path) -> Iterator[Path]:
    # sun_path holds 108 bytes: pytest's tmp_path can be longer than that.
    d = Path(tempfile.mkdtemp(prefix="gl", dir="/tmp"))
    try:
        yield d / "agent.sock"
    finally:
        shutil.rmtree(d, ignore_errors=True)
