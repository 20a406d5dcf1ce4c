"""The wheels hold what docs/architecture.md says each distribution holds, and no more.

Contract, checked on wheels built from this checkout (offline: ``pip wheel --no-deps
--no-build-isolation`` with the dev environment's hatchling):

- ``gleaner`` ships the component packages and none of the other three distributions'
  (``gleaner/testing``, ``gleaner/vllm_hook``, ``gleaner/protocol``), no test files, and its
  METADATA requires no kmock (a test-only dependency of gleaner-testing), not even in an extra;
- ``gleaner-protocol`` and ``gleaner-vllm-hook`` install into a bare virtual environment
  from their two wheels alone (``--no-index``, so nothing else can come in); there the vLLM
  plugin imports and its ``register()`` is a no-op without ``GLEANER_ROLE``, vLLM's plugin
  group finds it, and ``pip list`` shows pip/setuptools and the two;
- ``gleaner-vllm-hook`` (and no other distribution) declares the ``vllm.general_plugins``
  entry point ``gleaner_kv``;
- ``gleaner`` carries the native compute gate, compiled from the shim's ``gate.c`` when the
  wheel is built, at ``hatch_build.NATIVE_PATH``, and is tagged ``py3-none-<platform>``;
  installed into a fresh virtual environment with the checkout off the path (its third-party
  dependencies borrowed, read-only, from the dev environment's site-packages), it loads that
  copy, steps a ComputeGate, and ``gleaner simulate --quick`` runs.
"""

from __future__ import annotations

import email.parser
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest

from gleaner.runtime_agent import gatelib

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_GROUP = "vllm.general_plugins"
PLUGIN_TARGET = "gleaner.vllm_hook.plugin:register"
COMPONENTS = (
    "api",
    "perfmodel",
    "scheduler",
    "runtime_agent",
    "operator",
    "dashboard",
    "simulator",
    "cli",
    "batch",
)


def run(
    cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=cwd)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three product wheels, built from this checkout without the network."""
    pytest.importorskip("hatchling", reason="hatchling comes with gleaner[dev]")
    out = tmp_path_factory.mktemp("wheels")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
            "-w",
            str(out),
            str(ROOT),
            str(ROOT / "protocol"),
            str(ROOT / "vllm-hook"),
        ]
    )
    found = {w.name.split("-", 1)[0].replace("_", "-"): w for w in out.glob("*.whl")}
    assert set(found) == {"gleaner", "gleaner-protocol", "gleaner-vllm-hook"}, found
    return found


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(zf.read(name).decode())


def wheel_files(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


@pytest.mark.slow
def test_gleaner_wheel_holds_the_components_only(wheels: dict[str, Path]) -> None:
    files = wheel_files(wheels["gleaner"])
    for package in COMPONENTS:
        assert any(f.startswith(f"gleaner/{package}/") for f in files), package
    for other in ("testing", "vllm_hook", "protocol"):
        assert not [f for f in files if f.startswith(f"gleaner/{other}/")], other
    assert "gleaner/__init__.py" not in files  # a namespace package, shared with the others
    tests = [
        f
        for f in files
        if "/tests/" in f
        or f.startswith("tests/")
        or Path(f).name.startswith("test_")
        or Path(f).name == "conftest.py"
    ]
    assert not tests


@pytest.mark.slow
def test_gleaner_wheel_requires_no_kmock(wheels: dict[str, Path]) -> None:
    meta = wheel_metadata(wheels["gleaner"])
    requires = meta.get_all("Requires-Dist") or []
    assert any(r.startswith("gleaner-protocol") for r in requires)
    assert not [r for r in requires if "kmock" in r.lower()]


@pytest.mark.slow
def test_hook_and_protocol_wheels_depend_on_nothing_else(wheels: dict[str, Path]) -> None:
    assert wheel_metadata(wheels["gleaner-protocol"]).get_all("Requires-Dist") is None
    hook_requires = wheel_metadata(wheels["gleaner-vllm-hook"]).get_all("Requires-Dist") or []
    assert [r.replace(" ", "") for r in hook_requires] == ["gleaner-protocol==0.1.0"]
    assert {
        f.split("/")[1]
        for f in wheel_files(wheels["gleaner-vllm-hook"])
        if f.startswith("gleaner/")
    } == {"vllm_hook"}
    assert {
        f.split("/")[1] for f in wheel_files(wheels["gleaner-protocol"]) if f.startswith("gleaner/")
    } == {"protocol"}


PROBE = f"""
import importlib.metadata as md, json
import gleaner.vllm_hook.plugin as plugin
plugin.register()
eps = [(ep.name, ep.value, ep.dist.name if ep.dist else None)
       for ep in md.entry_points(group={PLUGIN_GROUP!r})]
print(json.dumps({{"feed": plugin._feed is None, "reporter": plugin._reporter is None,
                  "enabled": plugin.enabled(), "entry_points": eps}}))
"""


@pytest.mark.slow
def test_the_hook_installs_alone_into_a_bare_venv(wheels: dict[str, Path], tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    wheel_dir = wheels["gleaner-vllm-hook"].parent
    run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-index",
            "--find-links",
            str(wheel_dir),
            str(wheels["gleaner-protocol"]),
            str(wheels["gleaner-vllm-hook"]),
        ]
    )
    listed = json.loads(
        run(
            [str(python), "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"]
        ).stdout
    )
    names = {d["name"].lower().replace("_", "-") for d in listed}
    assert names - {"pip", "setuptools"} == {"gleaner-protocol", "gleaner-vllm-hook"}

    # Without GLEANER_ROLE the plugin must not connect anywhere or start a thread.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLEANER_", "PYTHON"))}
    probe = json.loads(run([str(python), "-I", "-c", PROBE], env=env, cwd=tmp_path).stdout)
    assert probe["enabled"] is False
    assert probe["feed"] is True and probe["reporter"] is True
    assert probe["entry_points"] == [["gleaner_kv", PLUGIN_TARGET, "gleaner-vllm-hook"]]


def test_vllm_plugin_entry_point_is_declared_by_the_hook_distribution() -> None:
    eps = [ep for ep in metadata.entry_points(group=PLUGIN_GROUP) if ep.name == "gleaner_kv"]
    assert len(eps) == 1
    assert eps[0].value == PLUGIN_TARGET
    assert eps[0].dist is not None and eps[0].dist.name == "gleaner-vllm-hook"
    for dist in ("gleaner", "gleaner-protocol", "gleaner-testing"):
        declared = [
            ep for ep in metadata.distribution(dist).entry_points if ep.group == PLUGIN_GROUP
        ]
        assert declared == [], dist


NATIVE_PATH = "gleaner/runtime_agent/_native/libgleaner_gate.so"
"""Where the wheel carries the gate (``hatch_build.NATIVE_PATH``; checked below)."""


def build_hook() -> ModuleType:
    """The gleaner wheel's build hook module (hatch_build.py)."""
    pytest.importorskip("hatchling", reason="hatchling comes with gleaner[dev]")
    spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "hatch_build.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


def test_the_build_hook_and_the_binding_agree_on_where_the_gate_lies() -> None:
    assert build_hook().NATIVE_PATH == NATIVE_PATH
    assert gatelib.PACKAGE_LIBRARY.as_posix().endswith("/" + NATIVE_PATH)


def test_without_a_c_compiler_the_wheel_build_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hook = build_hook()
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(hook.GateBuildError) as err:
        hook.compile_gate(ROOT / "runtime-agent" / "shim", tmp_path)
    text = str(err.value)
    assert "C compiler" in text and "no-such-cc" in text and "\n" not in text
    assert not (tmp_path / "libgleaner_gate.so").exists()


@pytest.mark.slow
def test_the_gleaner_wheel_carries_the_native_gate_for_this_platform(
    wheels: dict[str, Path],
) -> None:
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheels["gleaner"].name == f"gleaner-0.1.0-py3-none-{platform}.whl"
    with zipfile.ZipFile(wheels["gleaner"]) as zf:
        wheel_info = zf.read("gleaner-0.1.0.dist-info/WHEEL").decode()
        library = zf.read(NATIVE_PATH)
    assert "Root-Is-Purelib: false" in wheel_info
    assert f"Tag: py3-none-{platform}" in wheel_info
    assert library.startswith(b"\x7fELF")
    assert b"gl_gate_online_busy" in library  # the gate's entry points, exported
    # The other two stay pure Python.
    assert wheels["gleaner-protocol"].name.endswith("-py3-none-any.whl")


GATE_PROBE = """
import json, sys
from gleaner.runtime_agent import gatelib
from gleaner.runtime_agent.policy import ComputeGate, GateConfig
g = ComputeGate(0, GateConfig(cool_floor_s=0.01, request_timeout_s=None), start=0.0)
opened = g.tick(1.0)
g.online_busy(2.0, "r")
print(json.dumps({
    "opened": [type(a).__name__ for a in opened],
    "enabled": g.enabled, "busy": g.busy, "preemptions": g.preemptions,
    "library": gatelib.gate_library()._name,
    "binding": gatelib.__file__,
    "path": sys.path,
}))
"""


@pytest.mark.slow
def test_the_wheel_alone_runs_the_gate_without_the_checkout(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            str(wheels["gleaner"]),
            str(wheels["gleaner-protocol"]),
        ]
    )
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    # Third-party dependencies from the dev environment: a path line, so its own .pth files
    # (the editable installs that put this checkout on the path) are not read.
    dev_site = next(Path(p) for p in sys.path if p.endswith("site-packages"))
    (site / "_dev_dependencies.pth").write_text(f"{dev_site}\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLEANER_", "PYTHON"))}
    probe = json.loads(run([str(python), "-I", "-c", GATE_PROBE], env=env, cwd=tmp_path).stdout)
    assert not [p for p in probe["path"] if p.startswith(str(ROOT)) and ".venv" not in p]
    assert Path(probe["binding"]).is_relative_to(site)
    assert Path(probe["library"]) == site / NATIVE_PATH
    assert probe["opened"] == ["Enable"]  # closed at start, opened after a cooldown
    assert (probe["enabled"], probe["busy"], probe["preemptions"]) == (False, True, 1)

    done = run(
        [str(venv / "bin" / "gleaner"), "simulate", "--quick", "--no-progress", "--format", "json"],
        env=env,
        cwd=tmp_path,
    )
    gated = json.loads(done.stdout)["node"]["runs"]["gleaner"]  # the channel gate's run
    assert gated["compute"] == "gleaner" and gated["offline_tokens"] > 0
    assert gated["preemptions"] > 0 and gated["max_preemptions_per_request"] == 1
