"""gleaner.operator.jobadmission: the finalizer an OfflineJob gets at creation (pure).

Each patch is applied to its object the way the API server does, with the ``jsonpatch``
library (installed with kopf), so the tests check the resulting object, not the patch's
spelling.
"""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from gleaner.api.contract import FINALIZER
from gleaner.operator.jobadmission import is_offline_job, offline_job_mutation
from gleaner.testing.kube import offlinejob_manifest


def admitted(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` as stored after the webhook's CREATE answer (which must allow it)."""
    mutation = offline_job_mutation(job, "CREATE")
    assert mutation.allowed and mutation.refusal is None
    result: dict[str, Any] = jsonpatch.apply_patch(job, mutation.patch)
    return result


def _job(**metadata: Any) -> dict[str, Any]:
    job = offlinejob_manifest("j1", namespace="research")
    job["metadata"].update(metadata)
    return job


def test_a_new_job_gets_the_finalizer_and_nothing_else_changes() -> None:
    job = _job()
    assert "finalizers" not in job["metadata"]
    stored = admitted(job)
    assert stored["metadata"]["finalizers"] == [FINALIZER]
    stored["metadata"].pop("finalizers")
    assert stored == job


def test_other_finalizers_are_kept_in_order() -> None:
    stored = admitted(_job(finalizers=["a.example/one", "b.example/two"]))
    assert stored["metadata"]["finalizers"] == ["a.example/one", "b.example/two", FINALIZER]


@pytest.mark.parametrize("finalizers", [None, []])
def test_a_null_or_empty_list_gets_the_finalizer(finalizers: list[str] | None) -> None:
    assert admitted(_job(finalizers=finalizers))["metadata"]["finalizers"] == [FINALIZER]


def test_a_job_without_metadata_gets_it() -> None:
    job = {"apiVersion": "gleaner.dev/v1alpha1", "kind": "OfflineJob", "spec": {}}
    assert admitted(job)["metadata"] == {"finalizers": [FINALIZER]}


def test_a_job_that_has_the_finalizer_gets_no_patch() -> None:
    job = _job(finalizers=[FINALIZER, "a.example/one"])
    mutation = offline_job_mutation(job, "CREATE")
    assert mutation.allowed and mutation.patch == [] and mutation.reason == "already"
    # and applying the decision to its own output changes nothing more (idempotent)
    once = admitted(_job())
    assert offline_job_mutation(once, "CREATE").patch == []


def test_a_job_being_deleted_gets_no_finalizer() -> None:
    job = _job(deletionTimestamp="2026-11-28T00:00:00Z")
    mutation = offline_job_mutation(job, "CREATE")
    assert mutation.allowed and mutation.patch == [] and mutation.reason == "being deleted"


@pytest.mark.parametrize(
    ("job", "operation"),
    [
        (_job(), "UPDATE"),
        (_job(), "DELETE"),
        (_job(), ""),
        (None, "CREATE"),
        ("not an object", "CREATE"),
        ({"metadata": "nonsense", "spec": 3}, "CREATE"),
        ({"metadata": "nonsense", "spec": 3}, "UPDATE"),
    ],
)
def test_an_offline_job_is_never_refused(job: object, operation: str) -> None:
    mutation = offline_job_mutation(job, operation)
    assert mutation.allowed and mutation.patch == []


def test_an_invalid_spec_still_gets_the_finalizer() -> None:
    # Validation is the operator's (status conditions), never the webhook's.
    job = _job()
    job["spec"] = {"gpus": 99, "throughputSLA": -1}
    assert admitted(job)["metadata"]["finalizers"] == [FINALIZER]


def test_offline_jobs_are_recognised_by_kind_or_resource() -> None:
    kind = {"group": "gleaner.dev", "version": "v1alpha1", "kind": "OfflineJob"}
    resource = {"group": "gleaner.dev", "version": "v1alpha1", "resource": "offlinejobs"}
    assert is_offline_job(kind, resource)
    assert is_offline_job(kind, {})
    assert is_offline_job({}, resource)
    assert not is_offline_job({"group": "", "version": "v1", "kind": "Pod"}, {"resource": "pods"})
    assert not is_offline_job({"group": "other.io", "kind": "OfflineJob"}, {})
    assert not is_offline_job({}, {"group": "gleaner.dev", "resource": "nodetraces"})
