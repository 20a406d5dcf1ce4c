"""Kubernetes RBAC rules the runtime agent process needs, as plain data.

Contract: ``AGENT_RULES`` is the complete, least-privilege list of ``PolicyRule`` dicts
(``gleaner.api.rbac``: ``apiGroups``, ``resources``, ``verbs``) for the agent's ClusterRole.
The Helm chart renders its ClusterRole from exactly these rules and ``tests/helm`` checks
that the rendered rules equal this list. Whoever makes the agent call a new API adds a rule
here (minimally) with a comment naming the code that uses it. At run time this module
imports only the standard library (``PolicyRule`` only for type checking), so the chart
tooling can read it without the agent's dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # the chart tooling loads this file without Gleaner installed
    from gleaner.api.rbac import PolicyRule

AGENT_RULES: Final[list[PolicyRule]] = [
    # Agent reporter creates/updates its node's NodeTrace (cluster-scoped, name = node name).
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["nodetraces"],
        "verbs": ["get", "create", "patch", "update"],
    },
    # Agent reporter writes the NodeTrace status (per-GPU utilization samples).
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["nodetraces/status"],
        "verbs": ["get", "patch", "update"],
    },
    # Agent watches the offline/online Pods on its node (field selector spec.nodeName).
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch"],
    },
    # Agent reads its own Node (GPU labels, capacity) at start-up.
    {
        "apiGroups": [""],
        "resources": ["nodes"],
        "verbs": ["get"],
    },
]
"""ClusterRole rules of the agent's ServiceAccount (rendered verbatim by the Helm chart)."""
