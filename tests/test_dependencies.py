"""Every third-party module the product imports is a declared dependency, and back.

Each product folder's ``gleaner/`` tree is parsed (``ast``: every ``import`` statement,
the lazy ones inside functions included); each top-level name that is neither the standard
library nor ``gleaner`` is mapped to the distributions that install it
(``importlib.metadata.packages_distributions()``), and one of them must be named in the
``dependencies`` of the pyproject.toml that ships the folder: the root one for the
``gleaner`` wheel, protocol/'s and vllm-hook/'s for theirs. A module that works only
because some other package happens to pull its distribution in fails here. The other way
round, every dependency of the wheel is imported by some product module, except the few
listed in ``INDIRECT`` with the reason.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterable, Mapping
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
WHEEL_FOLDERS = (
    "api",
    "clients",
    "perfmodel",
    "scheduler",
    "operator",
    "cli",
    "dashboard",
    "runtime-agent",
    "simulator",
    "batch",
)
OWN_DISTRIBUTIONS = {"protocol": ROOT / "protocol", "vllm-hook": ROOT / "vllm-hook"}
INDIRECT = {
    "pyarrow": "pandas' Parquet engine (DataFrame.to_parquet / read_parquet), never imported",
}


def declared(pyproject: Path) -> set[str]:
    """Canonical names of the runtime dependencies of ``pyproject``."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    return {canonicalize_name(Requirement(r).name) for r in data["project"]["dependencies"]}


def imported_names(files: Iterable[Path]) -> dict[str, Path]:
    """Top-level names of absolute imports -> the first file importing each."""
    found: dict[str, Path] = {}
    for path in sorted(files):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.setdefault(alias.name.split(".")[0], path)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.setdefault(node.module.split(".")[0], path)
    return found


def third_party(names: Mapping[str, Path]) -> dict[str, Path]:
    return {n: p for n, p in names.items() if n not in sys.stdlib_module_names and n != "gleaner"}


def undeclared(
    names: Mapping[str, Path], dependencies: set[str], distributions: Mapping[str, list[str]]
) -> list[str]:
    """One line per third-party import whose distribution is not a declared dependency."""
    problems = []
    for name, path in sorted(third_party(names).items()):
        dists = {canonicalize_name(d) for d in distributions.get(name, [])}
        if not dists:
            problems.append(f"{path.relative_to(ROOT)}: {name}: no installed distribution")
        elif not dists & dependencies:
            problems.append(f"{path.relative_to(ROOT)}: {name}: {sorted(dists)} not declared")
    return problems


def product_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder / "gleaner").rglob("*.py"))


def test_every_import_of_the_wheel_is_a_declared_dependency() -> None:
    names: dict[str, Path] = {}
    for folder in WHEEL_FOLDERS:
        for name, path in imported_names(product_files(folder)).items():
            names.setdefault(name, path)
    assert undeclared(names, declared(ROOT / "pyproject.toml"), packages_distributions()) == []


@pytest.mark.parametrize("folder", sorted(OWN_DISTRIBUTIONS))
def test_every_import_of_the_protocol_and_hook_is_declared(folder: str) -> None:
    names = imported_names(product_files(folder))
    deps = declared(OWN_DISTRIBUTIONS[folder] / "pyproject.toml")
    assert undeclared(names, deps, packages_distributions()) == []


def test_every_dependency_of_the_wheel_is_imported() -> None:
    distributions = packages_distributions()
    used: set[str] = set()
    for folder in WHEEL_FOLDERS:
        for name in third_party(imported_names(product_files(folder))):
            used |= {canonicalize_name(d) for d in distributions.get(name, [])}
    own = {canonicalize_name("gleaner-protocol")}  # imported as gleaner.protocol
    unused = declared(ROOT / "pyproject.toml") - used - own - set(INDIRECT)
    assert unused == set(), f"declared but imported by no product module: {sorted(unused)}"


def test_the_walk_sees_lazy_imports_and_flags_undeclared_ones(tmp_path: Path) -> None:
    module = ROOT / "clients" / "gleaner" / "probe_for_test.py"  # only its path is used
    source = tmp_path / "m.py"
    source.write_text(
        "import os\nfrom . import sibling\nfrom gleaner.api import GROUP\n"
        "def f() -> None:\n    import yaml.constructor\n    from numpy import array\n",
        encoding="utf-8",
    )
    names = {n: module for n in imported_names([source])}
    assert set(third_party(names)) == {"yaml", "numpy"}
    distributions = {"yaml": ["PyYAML"], "numpy": ["numpy"]}
    assert undeclared(names, {"pyyaml", "numpy"}, distributions) == []
    problems = undeclared(names, {"numpy"}, distributions)
    assert problems == ["clients/gleaner/probe_for_test.py: yaml: ['pyyaml'] not declared"]
