"""Architecture: no import cycles among Gleaner's modules, function-level imports included.

An import written inside a function still runs, and a cycle it closes still couples the two
modules; hiding it in a function only moves the failure from import time to call time. So
the graph here is grimp's (import-linter's own graph library) over every ``gleaner.*``
module of the installed distributions, with every import it finds: module level, inside
functions and under ``TYPE_CHECKING``. A lazy import that closes no loop (a CLI subcommand,
an optional heavy dependency) is fine; a loop is not, and the failure names it with the
lines that make it.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping, Set

import grimp
import pytest


def strongly_connected(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, each sorted (Tarjan,
    iterative so deep graphs do not hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def one_cycle(graph: Mapping[str, Set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module: [a, b, ..., a]."""
    start = component[0]
    members = set(component)
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph.get(node, ())):
            if nxt not in members:
                continue
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [*reversed(path), start]
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{component} is not strongly connected")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("gleaner", cache_dir=None)


def module_graph(g: grimp.ImportGraph) -> dict[str, set[str]]:
    modules = {m for m in g.modules if m.startswith("gleaner.")}
    return {m: set(g.find_modules_directly_imported_by(m)) & modules for m in modules}


def describe(g: grimp.ImportGraph, cycle: list[str]) -> str:
    steps = []
    for a, b in itertools.pairwise(cycle):
        lines = sorted(
            f"line {d['line_number']}: {d['line_contents']}"
            for d in g.get_import_details(importer=a, imported=b)
        )
        steps.append(f"  {a} -> {b} ({'; '.join(lines)})")
    return "\n".join(steps)


def test_no_import_cycles(graph: grimp.ImportGraph) -> None:
    imports = module_graph(graph)
    cycles = [one_cycle(imports, c) for c in strongly_connected(imports)]
    problems = [f"import cycle {' -> '.join(c)}\n{describe(graph, c)}" for c in cycles]
    assert not problems, "\n".join(problems)


def test_the_graph_sees_function_level_imports(graph: grimp.ImportGraph) -> None:
    # The daemon imports its HTTP face inside AgentDaemon.run (FastAPI costs start-up
    # time); if the graph missed imports inside functions, this test would check nothing.
    details = graph.get_import_details(
        importer="gleaner.runtime_agent.daemon", imported="gleaner.runtime_agent.http"
    )
    assert details and all(d["line_contents"].startswith("from ") for d in details)
    assert len(module_graph(graph)) > 100  # every distribution's portion is in the graph


def test_cycle_finder() -> None:
    imports = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},
        "d": set(),
        "e": {"e2"},
        "e2": {"e"},
        "f": {"a"},
    }
    assert strongly_connected(imports) == [["a", "b", "c"], ["e", "e2"]]
    assert one_cycle(imports, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert one_cycle(imports, ["e", "e2"]) == ["e", "e2", "e"]
    assert strongly_connected({"x": {"y"}, "y": set()}) == []
