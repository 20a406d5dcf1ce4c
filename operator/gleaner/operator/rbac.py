"""Kubernetes RBAC rules the operator process needs, as plain data.

Contract: ``OPERATOR_RULES`` is the complete, least-privilege list of ``PolicyRule`` dicts
(``gleaner.api.rbac``: ``apiGroups``, ``resources``, ``verbs``) for the operator's ClusterRole.
The Helm chart renders its ClusterRole from exactly these rules and ``tests/helm`` checks
that the rendered rules equal this list. Whoever makes the operator call a new API adds a rule
here (minimally) with a comment naming the code that uses it. ``BATCH_API_RULES`` are added
only where the Batch API is on (``--batch-api-port``; chart value ``operator.batchApi``).
At run time this module imports only the standard library (``PolicyRule`` only for type
checking), so the chart tooling can read it without the operator's dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # the chart tooling loads this file without Gleaner installed
    from gleaner.api.rbac import PolicyRule

OPERATOR_RULES: Final[list[PolicyRule]] = [
    # kopf handlers for OfflineJob: watch, and patch (finalizers, progress annotations);
    # gleaner.operator.jobs reads one job before a status patch.
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["offlinejobs"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    # Operator writes OfflineJob status (phase, attempt, bound GPUs, SLA attainment) by patch.
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["offlinejobs/status"],
        "verbs": ["patch"],
    },
    # The scheduling pass lists and watches the agents' NodeTraces; the SLA monitor gets the
    # trace of a running job's node (handlers/sla.py).
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["nodetraces"],
        "verbs": ["get", "list", "watch"],
    },
    # The scheduling pass reads each node's hours of the day from its NodeHistory, kept
    # current by a kopf watch (gleaner.operator.tracecache.HistoryCache).
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["nodehistories"],
        "verbs": ["list", "watch"],
    },
    # Node labels (gpuSelector.nodeSelector) and cordons for placement: the scheduling pass
    # lists Nodes once, then a kopf watch keeps the cache current (gleaner.operator.nodes).
    {
        "apiGroups": [""],
        "resources": ["nodes"],
        "verbs": ["list", "watch"],
    },
    # Operator creates offline Pods (<job>-<attempt>: a deterministic name, so a 409 or a
    # binding found half done after a restart gets it), watches them, deletes them on job
    # deletion and on eviction. Profile on submit patches a profiling Pod's annotation with
    # the GPU time its node's agent reported.
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    # Profiles (get) and SLA eviction reports (create; ConfigMaps labelled
    # gleaner.dev/report=sla-eviction); kopf watches them for the scheduling pass. Profile
    # on submit creates the measured profile, and patches one it measured with an older
    # image (gleaner.operator.handlers.profiling).
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "patch"],
    },
    # kopf and gleaner.operator.events post core v1 Events (create only, never patched).
    {
        "apiGroups": [""],
        "resources": ["events"],
        "verbs": ["create"],
    },
    # kopf peering (peering name "gleaner") so only one replica handles events at a time:
    # ClusterKopfPeering cluster-wide, KopfPeering with operator.watchNamespace.
    {
        "apiGroups": ["kopf.dev"],
        "resources": ["clusterkopfpeerings", "kopfpeerings"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    # kopf lists and watches CRDs at start-up to resolve the resources it serves.
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
    # kopf lists and watches namespaces when it serves named namespaces
    # (operator.watchNamespace); cluster-wide (--all-namespaces) it does not.
    {
        "apiGroups": [""],
        "resources": ["namespaces"],
        "verbs": ["list", "watch"],
    },
]
"""ClusterRole rules of the operator's ServiceAccount (rendered verbatim by the Helm chart)."""

BATCH_API_RULES: Final[list[PolicyRule]] = [
    # The Batch API (gleaner.operator.batchapi.auth) authenticates every caller's token
    # (TokenReview) and asks whether that caller may act in the namespace
    # (SubjectAccessReview).
    {
        "apiGroups": ["authentication.k8s.io"],
        "resources": ["tokenreviews"],
        "verbs": ["create"],
    },
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews"],
        "verbs": ["create"],
    },
    # It creates a batch's OfflineJob and deletes it on cancel (gleaner.operator.batchapi.app).
    {
        "apiGroups": ["gleaner.dev"],
        "resources": ["offlinejobs"],
        "verbs": ["create", "delete"],
    },
]
"""Rules the chart adds to the operator's ClusterRole when the Batch API is on
(``operator.batchApi.enabled``)."""
