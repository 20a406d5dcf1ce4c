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
    # The reporter creates its node's NodeTrace (cluster-scoped, name = node name) when the
    # status patch answers 404, and reads it once at start for the hours of the day an
    # older agent kept there, when the node has no NodeHistory yet (gleaner.runtime_agent.kube).
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["nodetraces"],
        "verbs": ["get", "create"],
    },
    # The reporter patches the NodeTrace status (per-GPU utilization samples).
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["nodetraces/status"],
        "verbs": ["patch"],
    },
    # The reporter creates its node's NodeHistory (cluster-scoped, name = node name) when
    # the status patch answers 404, and reads it once at start to go on from the hours of
    # the day stored in it (gleaner.runtime_agent.kube).
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["nodehistories"],
        "verbs": ["get", "create"],
    },
    # The reporter patches the NodeHistory status when an hour of the day completes.
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["nodehistories/status"],
        "verbs": ["patch"],
    },
    # Agent lists and watches the offline/online Pods on its node (field selector
    # spec.nodeName).
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["list", "watch"],
    },
]
"""ClusterRole rules of the agent's ServiceAccount (rendered verbatim by the Helm chart)."""
