"""Product code, help text and the docs point only at documentation a user can open.

Contract: nothing a user can read (the product folders' sources, help text, chart and
examples; README.md and docs/*.md) cites a team-internal design note (``DESIGN.md``, a bare
"DESIGN" as a name), an issue number ("issue 8") or a file outside the repository. Every
``docs/<name>.md`` and every repository path (``tests/.../x.py``) it mentions exists; every
section it quotes as ``docs/<name>.md, "Section"`` opens a heading or a paragraph of that
page; every relative Markdown link in README.md and docs/*.md resolves to a file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Folders that ship or that a user reads; component folders are found by their gleaner/
# package, so a new component is covered without editing this list.
EXTRA_PRODUCT_FOLDERS = ("helm", "examples", "bench", "scripts")
TEXT_SUFFIXES = {
    ".py",
    ".c",
    ".h",
    ".md",
    ".yaml",
    ".yml",
    ".tpl",
    ".txt",
    ".json",
    ".sh",
    ".toml",
    ".html",
    ".js",
    ".css",
    ".j2",
    ".cu",
}
TEXT_NAMES = {"Makefile", "Dockerfile"}
SKIP_DIRS = {"__pycache__", "build", "dist", ".venv", "node_modules", ".mypy_cache"}

DESIGN_RE = re.compile(r"\bDESIGN\b")
# "issue 8", "Issue #8", "issues #3"; not the verb ("the shim issues 2 controls").
ISSUE_RE = re.compile(r"\bissue\s+#?\d+|\bissues\s+#\d+", re.IGNORECASE)
OUTSIDE_RE = re.compile(r"(?:\.\./)+shared/|/work/")
DOC_PATH_RE = re.compile(r"(?<![\w/.-])(?:\.\./)?(docs/[\w.-]+\.md)")
DOC_SECTION_RE = re.compile(r"(docs/[\w.-]+\.md)(?:'s)?,?\s+\(?\"([^\"]+)\"")
MD_LINK_RE = re.compile(r"\]\(([^)\s]+)\)")


def product_folders() -> list[Path]:
    found = {p.parent for p in ROOT.glob("*/gleaner") if p.is_dir()}
    found |= {ROOT / name for name in EXTRA_PRODUCT_FOLDERS if (ROOT / name).is_dir()}
    found.discard(ROOT / "tests")
    return sorted(found)


def text_files(folder: Path) -> list[Path]:
    out = []
    for path in folder.rglob("*"):
        if SKIP_DIRS.intersection(path.relative_to(ROOT).parts) or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            out.append(path)
    return sorted(out)


def user_facing_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "Dockerfile", ROOT / "Makefile", ROOT / "pyproject.toml"]
    files += sorted((ROOT / "docs").glob("*.md"))
    for folder in product_folders():
        files += text_files(folder)
    return [f for f in files if f.is_file()]


FILES = user_facing_files()


# Top-level folders that hold build or run outputs: paths there are written, not shipped.
OUTPUT_FOLDERS = {"out", "build", "dist"}


def repo_path_re() -> re.Pattern[str]:
    """Paths that start with one of the repository's top-level folders."""
    tops = sorted(
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name not in OUTPUT_FOLDERS
    )
    alt = "|".join(re.escape(t) for t in tops)
    return re.compile(
        rf"(?<![\w/.-])((?:{alt})/[\w./-]*\w\.(?:py|md|c|h|cu|yaml|yml|sh|json|toml))\b"
    )


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def sections(doc: Path) -> list[str]:
    """Headings, and the bold or plain words that open a paragraph (a run-in heading)."""
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.DOTALL)
    found = []
    for line in text.replace("`", "").splitlines():
        m = re.match(r"^(?:#+\s+|\*\*)?(.+)$", line.strip())
        if m:
            found.append(m.group(1).strip())
    return found


def test_the_scan_covers_every_component() -> None:
    # A scan that silently found nothing would pass every test below.
    names = {p.name for p in product_folders()}
    assert {"api", "protocol", "perfmodel", "scheduler", "operator", "cli", "dashboard"} <= names
    assert {"runtime-agent", "vllm-hook", "simulator", "testing", "helm", "bench"} <= names
    assert any(f.suffix == ".c" for f in FILES)
    assert len(FILES) > 100


def test_nothing_cites_design_notes_or_issue_numbers() -> None:
    bad = []
    for path in FILES:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if DESIGN_RE.search(line) or ISSUE_RE.search(line) or OUTSIDE_RE.search(line):
                bad.append(f"{rel(path)}:{n}: {line.strip()}")
    assert not bad, "cite docs/*.md instead of:\n" + "\n".join(bad)


def test_every_docs_path_mentioned_exists() -> None:
    missing = []
    for path in FILES:
        for m in DOC_PATH_RE.finditer(path.read_text(encoding="utf-8")):
            if not (ROOT / m.group(1)).is_file():
                missing.append(f"{rel(path)}: {m.group(1)}")
    assert not missing, "no such page:\n" + "\n".join(missing)


def test_every_quoted_docs_section_is_a_heading() -> None:
    missing = []
    for path in FILES:
        text = re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))
        for m in DOC_SECTION_RE.finditer(text):
            doc, section = ROOT / m.group(1), m.group(2).replace("`", "")
            if doc.is_file() and not any(s.startswith(section) for s in sections(doc)):
                missing.append(f'{rel(path)}: {m.group(1)}, "{section}"')
    assert not missing, "no such section:\n" + "\n".join(missing)


def test_every_repository_path_mentioned_exists() -> None:
    # Relative to the repository root, or to a folder above the file that mentions it
    # (the shim's Makefile and sources name paths from runtime-agent/shim/).
    pattern, missing = repo_path_re(), []
    for path in FILES:
        bases = [d for d in path.parents if d == ROOT or ROOT in d.parents]
        for m in pattern.finditer(path.read_text(encoding="utf-8")):
            if "/build/" in m.group(1):
                continue  # written by a build or a test run
            if not any((base / m.group(1)).exists() for base in bases):
                missing.append(f"{rel(path)}: {m.group(1)}")
    assert not missing, "no such path:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    "doc", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=rel
)
def test_relative_markdown_links_resolve(doc: Path) -> None:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.DOTALL)
    broken = []
    for m in MD_LINK_RE.finditer(text):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor on the same page
        if not (doc.parent / target.split("#", 1)[0]).exists():
            broken.append(target)
    assert not broken, f"{rel(doc)} links to missing files: {broken}"


def test_the_checks_catch_what_they_claim() -> None:
    # The patterns themselves, on the forms that were in the code before.
    assert DESIGN_RE.search('Contract (see ../shared/DESIGN.md, "API")')
    assert DESIGN_RE.search("a DESIGN-format trace")
    assert ISSUE_RE.search('title="Node-level targets (issue 8)"')
    assert ISSUE_RE.search("Targets (Issue #6)")
    assert not ISSUE_RE.search("the agent issues the controls on that descriptor")
    assert not ISSUE_RE.search("the control thread issues 2 controls per group")
    assert ISSUE_RE.search("see issues #3 and #4")
    assert not DESIGN_RE.search("the design of the Valve paper")
    assert OUTSIDE_RE.search("see ../../../shared/RUNTIME-NOTES.md")
    assert OUTSIDE_RE.search("Contract: /work/notes/memory-contract.md")
    assert repo_path_re().search("the hardware test (tests/shim/test_gpu_hardware.py).")
    assert [m.group(1) for m in DOC_PATH_RE.finditer("see docs/agent.md and ../docs/x.md")] == [
        "docs/agent.md",
        "docs/x.md",
    ]
    m = DOC_SECTION_RE.search('(docs/agent.md, "Policies")')
    assert m is not None and m.groups() == ("docs/agent.md", "Policies")
