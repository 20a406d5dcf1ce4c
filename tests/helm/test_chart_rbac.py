"""The chart's ClusterRoles grant exactly what the code declares it calls, and no more.

``OPERATOR_RULES`` and ``AGENT_RULES`` are the code's declared needs; the chart renders its
ClusterRoles from generated copies of them. These tests compare the rendered rules with the
modules as loaded now, check the bindings reach the ServiceAccounts the workloads run as,
and hold the least-privilege line (no wildcards, no secrets, no escalation verbs).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gleaner.runtime_agent.rbac import AGENT_RULES
from gleaner.operator.rbac import OPERATOR_RULES

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]
ROOT = Path(__file__).resolve().parents[2]

KNOWN_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}


def cluster_role(manifests: list[Manifest], name: str) -> Manifest:
    return next(
        m for m in manifests if m["kind"] == "ClusterRole" and m["metadata"]["name"] == name
    )


def binding(manifests: list[Manifest], name: str) -> Manifest:
    return next(
        m for m in manifests if m["kind"] == "ClusterRoleBinding" and m["metadata"]["name"] == name
    )


@pytest.mark.parametrize(
    ("role", "rules"),
    [("gleaner-operator", OPERATOR_RULES), ("gleaner-agent", AGENT_RULES)],
)
def test_rendered_cluster_role_equals_the_declared_rules(
    render: Render, role: str, rules: list[Any]
) -> None:
    rendered = cluster_role(render(), role)["rules"]
    assert rendered == [dict(rule) for rule in rules], (
        "chart RBAC drifted from the code: run python scripts/helm_generate.py"
    )


@pytest.mark.parametrize(
    ("component", "kind"), [("operator", "Deployment"), ("agent", "DaemonSet")]
)
def test_bindings_grant_the_role_to_the_workload_service_account(
    render: Render, component: str, kind: str
) -> None:
    manifests = render()
    name = f"gleaner-{component}"
    workload = next(m for m in manifests if m["kind"] == kind)
    account = workload["spec"]["template"]["spec"]["serviceAccountName"]
    bound = binding(manifests, name)
    assert bound["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": name,
    }
    assert bound["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": "gleaner-system"}
    ]
    assert any(
        m["kind"] == "ServiceAccount" and m["metadata"]["name"] == account for m in manifests
    )


def test_rbac_off_renders_no_roles(render: Render) -> None:
    kinds = {m["kind"] for m in render({"rbac": {"create": False}})}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


@pytest.mark.parametrize("rules", [OPERATOR_RULES, AGENT_RULES], ids=["operator", "agent"])
def test_rules_are_least_privilege(rules: list[Any]) -> None:
    seen: set[tuple[str, str]] = set()
    for rule in rules:
        assert set(rule) == {"apiGroups", "resources", "verbs"}
        assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"]
        assert set(rule["verbs"]) <= KNOWN_VERBS, rule
        assert "secrets" not in rule["resources"]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert (group, resource) not in seen, f"{group}/{resource} granted twice"
                seen.add((group, resource))


def test_agent_cannot_touch_offline_jobs_or_create_pods() -> None:
    granted = {
        (group, resource, verb)
        for rule in AGENT_RULES
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert not {g for g in granted if g[1].startswith("offlinejobs")}
    assert ("", "pods", "create") not in granted
    assert ("", "pods", "delete") not in granted


@pytest.mark.parametrize(
    "path", ["operator/gleaner/operator/rbac.py", "runtime-agent/gleaner/runtime_agent/rbac.py"]
)
def test_rbac_modules_import_only_the_standard_library(path: str) -> None:
    tree = ast.parse((ROOT / path).read_text())
    # The one import allowed beyond the standard library is the rule type, and only under
    # ``if TYPE_CHECKING:`` (never executed); every other import counts.
    typing_only: set[str] = set()
    for top in list(tree.body):
        if isinstance(top, ast.If) and ast.unparse(top.test) == "TYPE_CHECKING":
            assert not top.orelse
            for stmt in top.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module, ast.unparse(stmt)
                typing_only.add(stmt.module)
            tree.body.remove(top)
    assert typing_only <= {"gleaner.api.rbac"}
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= {"__future__", "typing"}


@pytest.mark.parametrize(
    ("path", "name", "rules"),
    [
        ("operator/gleaner/operator/rbac.py", "OPERATOR_RULES", OPERATOR_RULES),
        ("runtime-agent/gleaner/runtime_agent/rbac.py", "AGENT_RULES", AGENT_RULES),
    ],
)
def test_rbac_modules_load_from_their_file_without_gleaner(
    path: str, name: str, rules: list[Any]
) -> None:
    # What scripts/helm_generate.py does, in a fresh interpreter where importing any
    # gleaner module fails.
    code = (
        "import importlib.util, json, sys\n"
        "sys.modules['gleaner'] = None\n"
        f"spec = importlib.util.spec_from_file_location('rules', {str(ROOT / path)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        f"print(json.dumps(module.{name}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout) == [dict(rule) for rule in rules]
