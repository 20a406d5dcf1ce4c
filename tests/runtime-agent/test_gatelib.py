"""The binding to the native compute gate: where it looks, what it says when it cannot load."""

from __future__ import annotations

from pathlib import Path

import pytest

from gleaner.runtime_agent import gatelib
from gleaner.runtime_agent.policy import ComputeGate, GateConfig


def test_the_environment_variable_comes_first_then_the_package_then_the_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(gatelib.ENV_LIBRARY, str(tmp_path / "mine.so"))
    found = gatelib.candidates()
    assert found[0] == tmp_path / "mine.so"
    # The copy a wheel install carries, beside the binding (hatch_build.NATIVE_PATH).
    assert found[1] == Path(gatelib.__file__).resolve().parent / "_native" / gatelib.LIBRARY_NAME
    assert found[2].name == gatelib.LIBRARY_NAME and found[2].parent.name == "build"
    assert found[2].parent.parent.name == "shim"  # this checkout's `make shim` build
    assert len(found) == 3
    monkeypatch.delenv(gatelib.ENV_LIBRARY)
    assert gatelib.candidates() == found[1:]


def test_a_missing_or_broken_library_says_where_it_looked_and_how_to_build_it(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"not a library")
    with pytest.raises(gatelib.GateLibraryError) as err:
        gatelib.load([tmp_path / "absent.so", broken])
    text = str(err.value)
    assert "make shim" in text and gatelib.ENV_LIBRARY in text
    assert f"{tmp_path / 'absent.so'} (absent)" in text and str(broken) in text


def test_the_checkout_library_loads_and_speaks_this_abi() -> None:
    # The test command builds it (scripts/bootstrap.sh runs the shim's make).
    lib = gatelib.load(gatelib.candidates()[-1:])
    assert lib.gl_gate_abi() == gatelib.ABI


def test_a_bad_configuration_is_refused_by_the_native_rule() -> None:
    with pytest.raises(ValueError, match="cool_factor must be positive"):
        GateConfig(cool_factor=0.0)
    with pytest.raises(ValueError, match="request_timeout_s must be positive"):
        GateConfig(request_timeout_s=-1.0)
    GateConfig(request_timeout_s=None)  # no timeout: fine


def test_the_view_mirrors_the_native_state() -> None:
    g = ComputeGate(5, GateConfig(cool_floor_s=0.01, request_timeout_s=None), start=2.0)
    assert (g.gpu, g.now, g.enabled, g.busy, g.held) == (5, 2.0, False, False, False)
    g.tick(2.5)
    g.online_busy(3.0, "r")
    g.decode_gap(0.02)
    assert (g.now, g.enabled, g.busy, g.preemptions, g.online_requests) == (3.0, False, True, 1, 1)
    assert g.g_max_s == 0.02 and g.inflight() == {"r": 1}
    g.hold(3.1, True)
    assert g.held


def test_the_command_line_says_in_one_line_that_the_library_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gleaner.cli.main import main

    def missing() -> object:
        return gatelib.load([tmp_path / "absent.so"])

    monkeypatch.setattr(gatelib, "gate_library", missing)
    rc = main(["simulate", "--quick", "--no-progress", "--format", "json"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("error: the native compute gate") and "make shim" in err
    assert "Traceback" not in err


def test_the_fast_state_reads_agree_with_the_ctypes_layout() -> None:
    g = ComputeGate(1, GateConfig(cool_floor_s=0.01, request_timeout_s=None))
    g.tick(1.0)
    g.online_busy(2.0, "a")
    g.online_busy(2.0, "b")
    g.decode_gap(0.125)
    g.online_idle(2.5, finished=["a"])
    view = g._v  # the ctypes mirror of gl_gate_view, field by field
    assert (g.enabled, g.busy, g.held) == (bool(view.enabled), bool(view.busy), bool(view.held))
    assert (g.now, g.g_max_s) == (view.now, view.g_max_s) == (2.5, 0.125)
    assert (
        (g.preemptions, g.online_requests, g.max_preemptions_per_request)
        == (
            view.preemptions,
            view.online_requests,
            view.max_preemptions_per_request,
        )
        == (1, 2, 1)
    )
    assert g.has_finished() and view.finished == 1 and g.drain_finished() == [1]
    assert not g.has_finished()
