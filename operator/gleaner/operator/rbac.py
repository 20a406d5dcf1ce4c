"""Kubernetes RBAC rules the operator process needs, as plain data.

Contract: ``OPERATOR_RULES`` is the complete, least-privilege list of ``PolicyRule`` dicts
(``gleaner.api.rbac``: ``apiGroups``, ``resources``, ``verbs``) for the operator's ClusterRole.
The Helm chart renders its ClusterRole from exactly these rules and ``tests/helm`` checks
that the rendered rules equal this list. Whoever makes the operator call a new API adds a rule
here (minimally) with a comment naming the code that uses it. At run time this module
imports only the standard library (``PolicyRule`` only for type checking), so the chart
tooling can read it without the operator's dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # the chart tooling loads this file without Gleaner installed
    from gleaner.api.rbac import PolicyRule

OPERATOR_RULES: Final[list[PolicyRule]] = [
    # kopf handlers for OfflineJob (watch, bind, status patches, finalizers).
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["offlinejobs"],
        "verbs": ["get", "list", "watch", "patch", "update"],
    },
    # Operator writes OfflineJob status (phase, attempt, bound GPUs, SLA attainment).
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["offlinejobs/status"],
        "verbs": ["get", "patch", "update"],
    },
    # Operator reads the agents' NodeTraces (per-GPU utilization history) for scheduling.
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["nodetraces"],
        "verbs": ["get", "list", "watch"],
    },
    # Node labels (gpuSelector.nodeSelector) and cordons for placement: the scheduling pass
    # lists Nodes once, then a kopf watch keeps the cache current (gleaner.operator.nodes).
    {
        "apiGroups": [""],
        "resources": ["nodes"],
        "verbs": ["get", "list", "watch"],
    },
    # Operator creates offline Pods (<job>-<attempt>), watches them, deletes them on eviction.
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "delete"],
    },
    # Profiles and SLA eviction reports (ConfigMaps labelled gleaner.dev/report=sla-eviction).
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create"],
    },
    # kopf posts Kubernetes Events for handler outcomes (core API).
    {
        "apiGroups": [""],
        "resources": ["events"],
        "verbs": ["create", "patch"],
    },
    # kopf/operator Events through the events.k8s.io API.
    {
        "apiGroups": ["events.k8s.io"],
        "resources": ["events"],
        "verbs": ["create", "patch"],
    },
    # kopf peering (peering name "gleaner") so only one replica handles events at a time.
    {
        "apiGroups": ["kopf.dev"],
        "resources": ["clusterkopfpeerings", "kopfpeerings"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    # kopf scans CRDs at start-up to resolve the resources it serves.
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["get", "list", "watch"],
    },
    # kopf --all-namespaces discovers and watches namespaces.
    {
        "apiGroups": [""],
        "resources": ["namespaces"],
        "verbs": ["list", "watch"],
    },
]
"""ClusterRole rules of the operator's ServiceAccount (rendered verbatim by the Helm chart)."""
