"""The command line both generators share: write a generated file, or check it has not drifted.

Contract. :func:`main` parses ``--write`` / ``--check`` and a path option, renders the text
with the given function and either writes it or exits 1 (naming the file and the fix on
stderr) when the file on disk differs. Standard library only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def main(
    argv: Sequence[str] | None,
    *,
    prog: str,
    description: str,
    render: Callable[[], str],
    option: str,
    default: Path,
) -> int:
    """``--write``: write ``render()`` to the file; ``--check``: 0 when it is up to date."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write the file from the table")
    mode.add_argument("--check", action="store_true", help="exit 1 if the file has drifted")
    ap.add_argument(option, type=Path, default=default, dest="path", help="the generated file")
    args = ap.parse_args(argv)
    text = render()
    path: Path = args.path
    if args.write:
        path.write_text(text)
        return 0
    current = path.read_text() if path.exists() else ""
    if current != text:
        print(f"{path} differs from the protocol table: run with --write", file=sys.stderr)
        return 1
    return 0
