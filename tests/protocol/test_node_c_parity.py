"""The shim's C headers and gleaner.protocol.node agree on every node-level name.

gleaner_node.h repeats the names the shim reads (``GLEANER_NODE_<NAME>`` mirrors
``gleaner.protocol.node.<NAME>``); gleaner_shim.h declares the KV page API the vLLM hook binds.
The macros' values come from the compiler (a generated program prints them), so what is
checked is what the shim is built with. The shim's sources must name these strings only
through the macros, so that the header is the one C declaration.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gleaner.protocol import node
from gleaner.testing.shim import SHIM_DIR

INCLUDE = SHIM_DIR / "include"
PREFIX = "GLEANER_NODE_"


def _macro_names(header: Path, prefix: str) -> list[str]:
    return re.findall(rf"^#define ({prefix}[A-Z0-9_]+) ", header.read_text(), flags=re.M)


def _compiled_values(tmp: Path, header: str, names: list[str]) -> dict[str, str]:
    """Each macro's value as the compiler sees it (all are strings: -Wformat checks it)."""
    if shutil.which("gcc") is None:
        pytest.fail("this test needs gcc (scripts/bootstrap.sh installs it)")
    lines = [f'#include "{header}"', "#include <stdio.h>", "int main(void) {"]
    lines += [f'  printf("%s=%s\\n", "{name}", {name});' for name in names]
    lines += ["  return 0;", "}"]
    src = tmp / "dump.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp / "dump"
    subprocess.run(
        ["gcc", "-std=c11", "-Wall", "-Werror", f"-I{INCLUDE}", "-o", str(exe), str(src)],
        check=True,
        capture_output=True,
    )
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def test_every_node_macro_equals_its_python_constant(tmp_path: Path) -> None:
    names = _macro_names(INCLUDE / "gleaner_node.h", PREFIX)
    assert names, "gleaner_node.h defines no GLEANER_NODE_ macro"
    values = _compiled_values(tmp_path, "gleaner_node.h", names)
    for name in names:
        attr = name.removeprefix(PREFIX)
        assert hasattr(node, attr), f"{name} has no gleaner.protocol.node.{attr}"
        assert values[name] == getattr(node, attr), name


def test_the_names_the_operator_writes_are_mirrored() -> None:
    mirrored = {n.removeprefix(PREFIX) for n in _macro_names(INCLUDE / "gleaner_node.h", PREFIX)}
    needed = {"ENV_ROLE", "ENV_SOCKET", "ENV_JOB", "ENV_GPU_INDICES", "SOCKET_PATH"}
    needed |= {"ROLE_OFFLINE", "ROLE_ONLINE", "ENV_KV_PAGE_BYTES"}
    assert needed <= mirrored, needed - mirrored


def test_kv_page_api_matches_the_hook() -> None:
    header = (INCLUDE / "gleaner_shim.h").read_text()
    states = dict(re.findall(r"^#define GLEANER_KV_PAGE_([A-Z]+) (\d+)$", header, flags=re.M))
    assert int(states["BACKED"]) == node.KV_PAGE_BACKED
    assert int(states["QUARANTINED"]) == node.KV_PAGE_QUARANTINED
    for symbol in (node.KV_MALLOC_SYMBOL, node.KV_FREE_SYMBOL):
        assert re.search(rf"\b{symbol}\(", header), symbol


def test_shim_sources_name_node_strings_only_through_the_header() -> None:
    values = {
        v
        for k, v in vars(node).items()
        if k.isupper() and isinstance(v, str) and k not in ("ROLE_OFFLINE", "ROLE_ONLINE")
    }
    found: list[str] = []
    for path in sorted((SHIM_DIR / "src").glob("*.[ch]")):
        literals = re.findall(r'"((?:[^"\\\n]|\\.)*)"', path.read_text())
        found += [
            f"{path.name}: {s!r}"
            for s in literals
            if s in values or re.fullmatch(r"GLEANER_[A-Z0-9_]+", s)
        ]
    assert not found, found
