"""One rule, one place: every rule in docs/architecture.md's "Where each rule lives" table is
defined once, in the module the table names, and every part the table says calls it imports
it from there (directly, or through its package's re-exports), so no part carries a copy.

The table is the list: a rule added to it is checked without touching this file."""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"

# Where each part's code lives (the product's folders, and the test harnesses that model
# an engine), by the word the table's "Called by" column uses.
PARTS: dict[str, str] = {
    "operator": "operator",
    "simulator": "simulator",
    "CLI": "cli",
    "dashboard": "dashboard",
    "agent": "runtime-agent",
    "scheduler": "scheduler",
    "perfmodel": "perfmodel",
    "batch": "batch",
    "hook": "vllm-hook",
    "test fake": "testing",
}
# Every folder with a gleaner namespace portion: the gleaner wheel's (pyproject.toml) and the
# three sibling distributions'.
SOURCE_FOLDERS = (
    *tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"][
        "wheel"
    ]["sources"],
    "protocol",
    "vllm-hook",
    "testing",
)


@dataclass(frozen=True)
class RuleRow:
    rule: str
    module: str
    names: tuple[str, ...]
    callers: tuple[str, ...]


def rule_rows(text: str) -> list[RuleRow]:
    """The rows of the "Where each rule lives" table."""
    section = text.split("## Where each rule lives", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[1].startswith("`gleaner."):
            continue
        rule, module, names, callers = cells
        rows.append(
            RuleRow(
                rule=rule,
                module=module.strip("`"),
                names=tuple(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", names)),
                callers=tuple(c.strip() for c in callers.split(",") if c.strip()),
            )
        )
    return rows


def module_name(path: Path, root: Path) -> str:
    """``scheduler/gleaner/scheduler/monitor.py`` → ``gleaner.scheduler.monitor``."""
    rel = path.relative_to(root).parts
    parts = list(rel[rel.index("gleaner") :])
    parts[-1] = parts[-1].removesuffix(".py")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@dataclass
class Tree:
    """Top-level definitions and imports of every source file under ``root``."""

    root: Path
    files: dict[str, Path]
    defines: dict[str, set[str]]
    imports: dict[str, set[tuple[str, str]]]
    """module → {(imported module, name)}; ``name`` "" for ``import module``."""

    @classmethod
    def scan(cls, root: Path, folders: tuple[str, ...]) -> Tree:
        files: dict[str, Path] = {}
        defines: dict[str, set[str]] = {}
        imports: dict[str, set[tuple[str, str]]] = {}
        for folder in folders:
            for path in sorted((root / folder).rglob("*.py")):
                if "gleaner" not in path.relative_to(root).parts:
                    continue
                mod = module_name(path, root)
                tree = ast.parse(path.read_text(), str(path))
                files[mod] = path
                defines[mod] = _top_level_names(tree)
                imports[mod] = _imports(tree)
        return cls(root, files, defines, imports)

    def origin(self, module: str, name: str, depth: int = 0) -> str:
        """The module that defines ``name`` as seen from ``module`` (re-exports followed)."""
        if depth > 5 or module not in self.files or name in self.defines[module]:
            return module
        for src, imported in self.imports[module]:
            if imported == name:
                return self.origin(src, name, depth + 1)
        return module

    def uses(self, part_folder: str, rule: RuleRow) -> list[str]:
        """The modules of a part that import the rule's module or one of its names."""
        out = []
        for mod, path in self.files.items():
            if path.relative_to(self.root).parts[0] != part_folder:
                continue
            for src, name in self.imports[mod]:
                if src == rule.module and (name == "" or name in rule.names):
                    out.append(mod)
                elif name and f"{src}.{name}" == rule.module:
                    out.append(mod)  # from gleaner.scheduler import monitor
                elif name in rule.names and self.origin(src, name) == rule.module:
                    out.append(mod)
        return out


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _imports(tree: ast.Module) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {(node.module, a.name) for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {(a.name, "") for a in node.names}
    return out


def duplicates(tree: Tree, row: RuleRow) -> dict[str, list[str]]:
    """Each of the rule's names that a module other than its own defines, with those modules."""
    out: dict[str, list[str]] = {}
    for name in row.names:
        others = [m for m, names in tree.defines.items() if name in names and m != row.module]
        if others:
            out[name] = others
    return out


ROWS = rule_rows(DOC.read_text())
TREE = Tree.scan(ROOT, SOURCE_FOLDERS)


def test_the_table_lists_the_rules() -> None:
    assert len(ROWS) >= 10
    for row in ROWS:
        assert row.names, row.rule
        assert row.callers, row.rule
        assert set(row.callers) <= set(PARTS), row.callers


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.rule)
def test_each_rule_is_defined_once_in_its_module(row: RuleRow) -> None:
    assert row.module in TREE.files, f"{row.module} does not exist"
    missing = [n for n in row.names if n not in TREE.defines[row.module]]
    assert not missing, f"{row.module} does not define {missing}"
    copies = duplicates(TREE, row)
    assert not copies, f"defined again elsewhere: {copies}"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.rule)
def test_each_caller_imports_the_rule_from_its_module(row: RuleRow) -> None:
    missing = [c for c in row.callers if not TREE.uses(PARTS[c], row)]
    assert not missing, f"{missing} do not import {row.names} from {row.module}"


def test_the_scan_finds_a_copy_and_a_missing_caller(tmp_path: Path) -> None:
    """The checks above can fail: a second definition and a caller that does not import the
    rule are both found in a small tree."""
    home = tmp_path / "scheduler" / "gleaner" / "scheduler"
    home.mkdir(parents=True)
    (home / "__init__.py").write_text("from gleaner.scheduler.rules import judge\n")
    (home / "rules.py").write_text("def judge(x: float) -> bool:\n    return x > 0\n")
    sim = tmp_path / "simulator" / "gleaner" / "simulator"
    sim.mkdir(parents=True)
    (sim / "a.py").write_text("from gleaner.scheduler import judge\n")
    op = tmp_path / "operator" / "gleaner" / "operator"
    op.mkdir(parents=True)
    (op / "b.py").write_text("def judge(x: float) -> bool:\n    return x >= 0\n")
    tree = Tree.scan(tmp_path, ("scheduler", "simulator", "operator"))
    row = RuleRow("judging", "gleaner.scheduler.rules", ("judge",), ("simulator", "operator"))
    assert duplicates(tree, row) == {"judge": ["gleaner.operator.b"]}
    assert tree.uses("simulator", row) == ["gleaner.simulator.a"]  # through the re-export
    assert tree.uses("operator", row) == []
    text = (
        "## Where each rule lives\n\n| Rule | Module | Names | Called by |\n|---|---|---|---|\n"
        "| judging | `gleaner.scheduler.rules` | `judge` | simulator, operator |\n\n## Next\n"
    )
    assert rule_rows(text) == [row]
