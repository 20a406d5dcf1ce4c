"""gleaner.api.contract: the one declaration of the cross-component names and formats.

Besides the formats' round trips, a scan of the product code fails when a contract literal
(a label, annotation, environment variable, path or ConfigMap key) is written out anywhere
but in the contract modules: every other module must import the name.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gleaner.api import common, contract
from gleaner.protocol import node

REPO = Path(__file__).resolve().parents[2]

PRODUCT_DIRS = (
    "api",
    "perfmodel",
    "scheduler",
    "operator",
    "cli",
    "dashboard",
    "runtime-agent",
    "simulator",
    "batch",
    "protocol",
    "vllm-hook",
)
"""Folders of shipped Python code (the harnesses in testing/, tests, e2e and bench are not)."""

CONTRACT_MODULES = {
    REPO / "api" / "gleaner" / "api" / "contract.py",
    REPO / "api" / "gleaner" / "api" / "common.py",  # the API group and version
    REPO / "protocol" / "gleaner" / "protocol" / "node.py",
}

GENERIC = {node.ROLE_OFFLINE, node.ROLE_ONLINE, common.GROUP, common.VERSION}
"""Values too plain to scan for (words any code may use for other things)."""

PATTERNS = (
    # Any GLEANER_* name, except a C include guard (GLEANER_PROTO_H names no contract).
    re.compile(r"\bGLEANER_(?![A-Z0-9_]*_H\b)[A-Z0-9_]+"),
    re.compile(re.escape(common.GROUP) + r"/[a-z]"),
)
"""Shapes of a contract name not declared yet: any such literal must move to the contract."""


def _contract_values() -> set[str]:
    values: set[str] = set()
    for module in (contract, node):
        for name, value in vars(module).items():
            public = name.isupper() and not name.startswith("_")
            if public and isinstance(value, str) and value not in GENERIC:
                values.add(value)
    return values


def _doc_strings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are documentation: bare string statements
    (module, class and function docstrings, and the attribute docs after assignments)."""
    return {
        id(stmt.value)
        for stmt in ast.walk(tree)
        if isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    }


def _literals(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docs = _doc_strings(tree)
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            yield n.lineno, n.value


def _product_files() -> Iterator[Path]:
    for folder in PRODUCT_DIRS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path not in CONTRACT_MODULES and "build" not in path.parts:
                yield path


def contract_literals(paths: list[Path]) -> list[str]:
    """``file:line: literal`` of every string constant in ``paths`` that spells out a
    contract value (as a whole token) or has the shape of an undeclared one."""
    values = sorted(_contract_values(), key=len, reverse=True)
    token = re.compile("|".join(rf"(?<![\w.]){re.escape(v)}(?!\w)" for v in values) or r"(?!x)x")
    found = []
    for path in paths:
        for line, text in _literals(path):
            if token.search(text) or any(p.search(text) for p in PATTERNS):
                where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
                found.append(f"{where}:{line}: {text!r}")
    return found


def test_no_contract_literal_outside_the_contract_modules() -> None:
    files = list(_product_files())
    assert len(files) > 100  # the scan really looked at the product code
    assert contract_literals(files) == []


@pytest.mark.parametrize(
    "source",
    [
        'LABEL = "gleaner.dev/role"',
        'SELECTOR = f"gleaner.dev/report=sla-eviction,x={y}"',
        'env = {"GLEANER_ROLE": "offline"}',
        'os.environ.get("GLEANER_SOMETHING_NEW")',
        'path = "/var/lib/gleaner/lib/libgleaner_shim.so"',
        'data = cm.data["report.json"]',
        'sock = Path("/run/gleaner") / name',
        'name = f"{job}-sla-eviction-{n}"',
    ],
)
def test_the_scan_finds_a_redeclared_literal(tmp_path: Path, source: str) -> None:
    path = tmp_path / "probe.py"
    path.write_text(f'"""Doc: {source}."""\n{source}\n')
    found = contract_literals([path])
    assert len(found) == 1 and found[0].startswith("probe.py:2:"), found


def test_the_scan_ignores_docs_and_other_words(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    source = (
        '"""Module doc: the label ``gleaner.dev/role=offline``, env ``GLEANER_ROLE``."""\n'
        'X = 1\n"""Attribute doc: ``report.json``."""\n'
        'name = "sla-evictions.csv"\nrole = "offline"\nfmt = "json"\n'
    )
    path.write_text(source)
    assert contract_literals([path]) == []


def test_node_names_are_re_exported_not_redeclared() -> None:
    for name in ("ENV_ROLE", "ENV_SOCKET", "ENV_JOB", "SHIM_PATH", "SOCKET_PATH", "ROLE_OFFLINE"):
        assert getattr(contract, name) is getattr(node, name), name
    assert f"{node.SOCKET_DIR}/{node.SOCKET_NAME}" == node.SOCKET_PATH
    assert f"{node.SHIM_DIR}/{node.SHIM_LIBRARY}" == node.SHIM_PATH
    assert f"{contract.LABEL_ROLE}={contract.ROLE_OFFLINE}" == contract.OFFLINE_SELECTOR


def test_every_kubernetes_name_is_in_the_api_group() -> None:
    names = [contract.LABEL_JOB, contract.LABEL_ROLE, contract.LABEL_ATTEMPT]
    names += [contract.LABEL_REPORT, contract.LABEL_JOB_CLASS, contract.ANNOTATION_GPUS]
    names += [contract.ANNOTATION_SLA_WINDOWS, contract.FINALIZER]
    assert all(n.startswith(f"{common.GROUP}/") for n in names)
    assert len(set(names)) == len(names)


def test_eviction_report_configmap_names() -> None:
    assert contract.eviction_report_name("llama", 3) == "llama-sla-eviction-3"
    labels = contract.eviction_report_labels("llama")
    assert labels == {"gleaner.dev/report": "sla-eviction", "gleaner.dev/job": "llama"}
    assert contract.is_eviction_report(labels)
    assert not contract.is_eviction_report({"gleaner.dev/report": "other"})
    assert not contract.is_eviction_report(None)
    assert contract.EVICTION_REPORT_SELECTOR == "gleaner.dev/report=sla-eviction"
    assert contract.job_selector("llama") == "gleaner.dev/job=llama,gleaner.dev/role=offline"
    data = contract.eviction_report_data({"b": 1, "a": 2})
    assert data == {"report.json": '{"a": 2, "b": 1}'}


# --- the SLA-window annotation ------------------------------------------------------------


def test_sla_windows_round_trip_and_exact_text() -> None:
    doc = contract.SlaWindows(node="n", gpus=(0, 1), placed_at=100.5, windows=((160.0, 0.5),))
    text = doc.dump()
    assert text == '{"node":"n","gpus":[0,1],"placedAt":100.5,"windows":[[160.0,0.5]]}'
    assert contract.SlaWindows.parse(text) == doc
    loose = '{"node": "n", "gpus": [0], "placedAt": 1, "windows": [[10, 0.5]]}'
    assert contract.SlaWindows.parse(loose) == contract.SlaWindows(
        node="n", gpus=(0,), placed_at=1.0, windows=((10.0, 0.5),)
    )


@pytest.mark.parametrize(
    "annotation",
    [
        None,
        "",
        "not json",
        "[1, 2]",
        '{"node": "n", "gpus": [0], "placedAt": 1}',
        '{"node": "n", "gpus": [0], "placedAt": 1, "windows": [[1, 2, 3]]}',
        '{"node": "n", "gpus": "x", "placedAt": 1, "windows": []}',
    ],
)
def test_unreadable_sla_windows_are_none(annotation: str | None) -> None:
    assert contract.SlaWindows.parse(annotation) is None


# --- the eviction report --------------------------------------------------------------------


def _report(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": 1,
        "job": "ns/j",
        "node": "n",
        "gpus": [0, 1],
        "gpuUUIDs": ["GPU-a", "GPU-b"],
        "sla": 0.5,
        "predicted": {"compute": 0.8, "memory": 0.9, "multiGPU": 0.97, "throughputFraction": 0.7},
        "observed": {
            "mean": 0.4,
            "min": 0.3,
            "last": 0.4,
            "windows": 5,
            "windowsMissed": 3,
            "windowSeconds": 60.0,
        },
        "reason": "3 of 5 windows under the SLA",
        "time": "1970-01-01T00:33:20Z",
        "evictionCount": 1,
        "outcome": "requeued",
        "nextAttemptAfter": "1970-01-01T00:33:50Z",
        "excludedNodes": ["n"],
        "nextPlacement": "requeued; not before 1970-01-01T00:33:50Z, not on n",
    }
    doc.update(changes)
    return doc


def test_eviction_report_round_trip_keeps_keys_order_and_times() -> None:
    raw = _report()
    doc = contract.EvictionReportDocument.parse(json.dumps(raw))
    assert doc.time == 2000.0 and doc.next_attempt_after == 2030.0 and not doc.failed
    out = doc.serialize()
    assert out == raw and list(out) == list(raw)
    assert contract.EvictionReportDocument.parse(out) == doc


def test_eviction_report_accepts_epoch_numbers_and_ignores_unknown_keys() -> None:
    doc = contract.EvictionReportDocument.parse(
        _report(time=2000, nextAttemptAfter=None, outcome="failed", extra={"x": 1})
    )
    assert doc.time == 2000.0 and doc.next_attempt_after is None and doc.failed
    assert doc.serialize()["time"] == "1970-01-01T00:33:20Z"
    assert "extra" not in doc.serialize()


def test_malformed_eviction_reports_are_value_errors() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        contract.EvictionReportDocument.parse("[1, 2]")
    with pytest.raises(ValueError, match=r"malformed eviction report: .*'node'"):
        contract.EvictionReportDocument.parse({"job": "x"})
    with pytest.raises(ValueError, match=r"malformed eviction report: .*'observed.windows'"):
        bad = _report()
        bad["observed"] = {**bad["observed"], "windows": "many"}
        contract.EvictionReportDocument.parse(bad)
    with pytest.raises(ValueError):
        contract.EvictionReportDocument.parse("{not json")


def _section(doc: str) -> str:
    text = (REPO / "docs" / doc).read_text(encoding="utf-8")
    return text.split("## Contract names", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize(
    ("module", "doc"), [(contract, "api.md"), (node, "protocol.md")], ids=["api", "node"]
)
def test_docs_list_every_name_with_its_value(module: Any, doc: str) -> None:
    section = _section(doc)
    own = {
        name: value
        for name, value in vars(module).items()
        if name.isupper()
        and not name.startswith("_")
        and isinstance(value, str | int)
        and (module is node or not hasattr(node, name))
        and name not in ("GROUP", "ROLES")
    }
    assert own
    missing = [n for n, v in own.items() if f"`{n}`" not in section or str(v) not in section]
    assert not missing, f"docs/{doc} 'Contract names' lacks {missing}"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2,3", [2, 3]),
        (" 0 , 7 ", [0, 7]),
        ("1,,2", [1, 2]),
        ("", None),
        (None, None),
        (",", None),
        ("x", None),
        ("1,x", None),
        ("-1", None),
        ("²", None),
    ],
)
def test_gpus_annotation_has_one_parser(value: str | None, expected: list[int] | None) -> None:
    assert contract.parse_gpus_annotation(value) == expected
    if expected:
        assert contract.parse_gpus_annotation(contract.gpus_annotation(expected)) == expected
    assert contract.gpus_annotation([2, 3]) == "2,3"
