"""The ``gleaner`` wheel's build hook: the native compute gate, compiled into the wheel.

Contract. Building the ``gleaner`` wheel (not an editable install) compiles
``libgleaner_gate.so`` from the shim's ``src/gate.c`` with the shim's Makefile (one compile
rule, the one ``make shim`` uses, into a temporary folder, so a checkout's own build is left
alone) and puts it at ``gleaner/runtime_agent/_native/libgleaner_gate.so`` (``NATIVE_PATH``),
where :mod:`gleaner.runtime_agent.gatelib` looks first after ``$GLEANER_GATE_LIBRARY``. The
library holds machine code, so the wheel is tagged ``py3-none-<platform>`` (any Python 3: the
binding is ctypes, the library has no Python dependency). Needs ``make`` and a C compiler
(``$CC``, by default ``cc``); without them the build stops with one line saying so.
Editable installs skip the hook: in a checkout the binding finds ``make shim``'s build.
"""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

LIBRARY_NAME = "libgleaner_gate.so"
NATIVE_PATH = f"gleaner/runtime_agent/_native/{LIBRARY_NAME}"
"""The library's path inside the wheel (``gatelib.PACKAGE_LIBRARY``)."""
SHIM_DIR = Path("runtime-agent") / "shim"


class GateBuildError(RuntimeError):
    """The gate library could not be compiled; the message is one line."""


def platform_tag() -> str:
    """This interpreter's platform as a wheel tag (``linux_x86_64``, ``linux_aarch64``)."""
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def compile_gate(shim_dir: Path, into: Path) -> Path:
    """``libgleaner_gate.so`` built by the shim's Makefile into ``into``; its path."""
    if shutil.which("make") is None:
        raise GateBuildError(
            "building the gleaner wheel compiles its native compute gate and needs make and a "
            "C compiler (Debian/Ubuntu: apt-get install make gcc libc6-dev)"
        )
    target = into / LIBRARY_NAME
    done = subprocess.run(
        ["make", "-s", "-C", str(shim_dir), f"BUILD={into}", str(target)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or not target.is_file():
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise GateBuildError(
            "could not compile the native compute gate (needs a C compiler, $CC or cc; "
            "Debian/Ubuntu: apt-get install gcc libc6-dev): "
            + (" / ".join(detail[-3:]) if detail else f"make exited with {done.returncode}")
        )
    return target


class GateLibraryHook(BuildHookInterface):  # type: ignore[type-arg]
    """Compiles the gate into the wheel and tags the wheel for this platform."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        self._tmp = tempfile.TemporaryDirectory(prefix="gleaner-gate-")
        library = compile_gate(Path(self.root) / SHIM_DIR, Path(self._tmp.name))
        build_data["force_include"][str(library)] = NATIVE_PATH
        build_data["pure_python"] = False
        build_data["tag"] = f"py3-none-{platform_tag()}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            tmp.cleanup()
