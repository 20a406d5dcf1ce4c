"""Fixtures shared by the shim, protocol and vLLM hook tests: the C shim built once per
session (``shim_build``), a Unix-socket path short enough for ``sun_path`` (``sock_path``)
and a stub agent listening there (``agent``).

Hypothesis: under CI (``CI`` set) the property tests draw a fixed sequence of examples
(``derandomize``), so a landing is judged on the same cases every time; on a developer's
machine they draw new ones each run and keep what failed in ``.hypothesis/``, which is
where new counterexamples are found (and then pinned with ``@example``). Neither profile has
a per-example deadline: how long an example takes is no property of the code under test.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from gleaner.testing.shim import AgentStub, build_shim

# No per-example deadline anywhere: hypothesis's default (200 ms) is a timing assertion, and
# on a loaded machine (CI runs two workers on two cores) an example that took longer failed a
# test that promises nothing about time. Speed is the benchmarks' business.
settings.register_profile("gleaner", deadline=None)
settings.register_profile("ci", parent=settings.get_profile("gleaner"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "gleaner")


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


@pytest.fixture
def agent(sock_path: Path) -> Iterator[AgentStub]:
    """A stub agent listening on ``sock_path``, its gate open until a test closes it."""
    with AgentStub(sock_path, gate_open=True) as stub:
        yield stub
