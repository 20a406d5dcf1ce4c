"""Static checks of the Dockerfile (no Docker here): it matches the cross-component contract.

Two stages (shim built with gcc + make, wheels installed into a slim runtime), a non-root
final user, entry point ``gleaner``, the shim at /opt/gleaner/lib/libgleaner_shim.so, every
wheel source folder of pyproject copied, and nothing copied that .dockerignore drops.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    parsed: list[tuple[str, str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        keyword, _, rest = stripped.partition(" ")
        parsed.append((keyword.upper(), rest.strip()))
    return parsed


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


def ignored(path: str) -> bool:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return any(
        fnmatch.fnmatch(path, pattern) or path.startswith(pattern.rstrip("/") + "/")
        for pattern in patterns
    )


def test_two_stages_build_the_shim_and_install_the_wheel() -> None:
    steps = instructions()
    assert [k for k, _ in steps].count("FROM") == 2
    build_runs = " ".join(rest for keyword, rest in steps if keyword == "RUN")
    assert "gcc" in build_runs and "make -C runtime-agent/shim" in build_runs
    assert "pip wheel" in build_runs
    assert any(keyword == "RUN" and "pip install" in rest for keyword, rest in final_stage())


def test_runtime_stage_is_non_root_with_the_gleaner_entry_point() -> None:
    stage = final_stage()
    users = [rest for keyword, rest in stage if keyword == "USER"]
    assert users and users[-1].split(":")[0] not in {"0", "root"}
    entry = [rest for keyword, rest in stage if keyword == "ENTRYPOINT"]
    assert [json.loads(e) for e in entry] == [["gleaner"]]
    copies = [rest for keyword, rest in stage if keyword == "COPY"]
    assert any(c.endswith(" /opt/gleaner/lib/libgleaner_shim.so") for c in copies)
    exposed = " ".join(rest for keyword, rest in stage if keyword == "EXPOSE").split()
    assert {"8080", "9464"} <= set(exposed)


def test_build_context_copies_every_wheel_source_and_nothing_ignored() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    sources = set(pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["sources"])
    copied: set[str] = set()
    for keyword, rest in instructions():
        if keyword != "COPY" or rest.startswith("--from"):
            continue
        *paths, _destination = rest.split()
        copied.update(paths)
    assert sources <= copied
    # The wheel's build hook (it compiles the native compute gate into the wheel).
    hooks = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]
    assert hooks["custom"]["path"] in copied
    for path in copied:
        assert (ROOT / path).exists(), f"COPY {path}: no such path"
        assert not ignored(path), f"COPY {path}: excluded by .dockerignore"
    assert ignored(".venv") and ignored(".git") and ignored("tests")
    assert not re.search(r"ADD\s+https?://", (ROOT / "Dockerfile").read_text())


def test_the_shim_lands_where_the_agent_copies_it_from() -> None:
    from gleaner.protocol.node import SHIM_IMAGE_PATH

    copies = [rest for keyword, rest in final_stage() if keyword == "COPY"]
    assert any(c.endswith(f" {SHIM_IMAGE_PATH}") for c in copies)
