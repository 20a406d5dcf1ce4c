"""README.md's "Layout" table matches the folders, and its Quickstart keeps its two commands.

Contract: every top-level folder that holds a ``pyproject.toml`` or a ``gleaner/`` package is
named in the first column of the Layout table; every path named there exists (rows marked
"(planned)" may name a folder that is not there yet); each component row's import name is
the package its folder holds; the Quickstart still says ``make simulate`` and ``make test``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


@dataclass(frozen=True)
class LayoutRow:
    paths: tuple[str, ...]
    import_name: str
    planned: bool


def section(title: str) -> str:
    """The text of one ``## title`` section of the README."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.MULTILINE | re.DOTALL)
    assert m is not None, f"README.md has no '## {title}' section"
    return m.group(1)


def layout_rows(text: str) -> list[LayoutRow]:
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("Folder", "---") or set(cells[0]) <= {"-"}:
            continue
        rows.append(
            LayoutRow(
                paths=tuple(re.findall(r"`([^`]+)`", cells[0])),
                import_name=cells[1].strip("`"),
                planned="(planned)" in cells[0],
            )
        )
    return rows


ROWS = layout_rows(section("Layout"))


def top_level_folders_named() -> set[str]:
    return {p.split("/", 1)[0] for row in ROWS for p in row.paths if "/" in p}


def test_the_layout_table_is_found() -> None:
    assert len(ROWS) >= 15
    assert all(row.paths for row in ROWS)


def test_every_package_or_distribution_folder_is_in_the_layout() -> None:
    folders = {
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and ((p / "pyproject.toml").is_file() or (p / "gleaner").is_dir())
    }
    assert {"api", "protocol", "vllm-hook", "testing", "cli", "dashboard"} <= folders
    missing = folders - top_level_folders_named()
    assert not missing, f"README.md's Layout table does not name {sorted(missing)}"


def test_every_path_in_the_layout_exists() -> None:
    missing = []
    for row in ROWS:
        if row.planned:
            continue
        for path in row.paths:
            found = list(ROOT.glob(path)) if "*" in path else [ROOT / path]
            if not any(p.exists() for p in found):
                missing.append(path)
    assert not missing, f"README.md's Layout table names what does not exist: {missing}"


def test_import_names_match_the_folders() -> None:
    # `<folder>/gleaner/<package>/` is imported as gleaner.<package>.
    checked = 0
    for row in ROWS:
        for path in row.paths:
            m = re.fullmatch(r"[\w.-]+/gleaner/(\w+)/", path)
            if m:
                assert row.import_name == f"gleaner.{m.group(1)}", row
                checked += 1
    assert checked >= 11


def test_crds_holds_only_generated_manifests() -> None:
    # The Layout row says so; the API models live in api/.
    assert [p.name for p in (ROOT / "crds").iterdir() if p.suffix != ".yaml"] == []
    assert not (ROOT / "crds" / "gleaner").exists()


def test_the_distributions_paragraph_names_all_four() -> None:
    text = section("Layout")
    for dist in ("gleaner", "gleaner-protocol", "gleaner-vllm-hook", "gleaner-testing"):
        assert f"**`{dist}`**" in text, dist
    assert "One Python distribution" not in README


def test_quickstart_keeps_its_two_commands() -> None:
    text = section("Quickstart")
    block = re.search(r"```sh\n(.*?)```", text, re.DOTALL)
    assert block is not None
    assert block.group(1).split("\n")[:2] == ["make simulate", "make test"]
