"""Run benchmarks: ``python -m bench`` runs all, ``python -m bench NAME...`` runs some;
options after the names (``python -m bench controlplane --quick``) go to each of them.

Every ``bench/bench_*.py`` module exposes ``main(argv: list[str]) -> int``; it prints its
measurements (and their ratios to targets) as a table and returns non-zero when a target
is missed.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def available() -> list[str]:
    here = Path(__file__).parent
    return sorted(
        m.name.removeprefix("bench_")
        for m in pkgutil.iter_modules([str(here)])
        if m.name.startswith("bench_")
    )


def main(argv: list[str]) -> int:
    split = next((i for i, arg in enumerate(argv) if arg.startswith("-")), len(argv))
    names, options = argv[:split] or available(), argv[split:]
    unknown = [n for n in names if n not in available()]
    if unknown:
        print(f"error: unknown benchmark(s) {unknown}; available: {available()}", file=sys.stderr)
        return 2
    worst = 0
    for name in names:
        print(f"== bench {name}")
        module = importlib.import_module(f"bench.bench_{name}")
        worst = max(worst, int(module.main(list(options))))
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
