"""The Kubernetes RBAC rule type Gleaner's components declare their API needs with.

Contract. ``PolicyRule`` is the subset of a Kubernetes ``rbac.authorization.k8s.io/v1``
PolicyRule that Gleaner uses (``apiGroups``, ``resources``, ``verbs``). The operator's and
the agent's rule lists (``gleaner.operator.rbac``, ``gleaner.runtime_agent.rbac``) are typed
with it; the Helm chart renders their ClusterRoles from those lists. Standard library
only: the rule modules import it for type checking alone, so the chart tooling still loads
them from their files without any of Gleaner's dependencies.
"""

from __future__ import annotations

from typing import TypedDict


class PolicyRule(TypedDict):
    """One RBAC PolicyRule (the subset of fields Gleaner uses)."""

    apiGroups: list[str]
    resources: list[str]
    verbs: list[str]
