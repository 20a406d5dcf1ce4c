"""Objects through the generated CRD schemas: OpenAPI bounds, strict fields, CEL rules.

The CRD and the pydantic models must agree: every case here is checked against both, and
a hypothesis property checks that they reach the same verdict on arbitrary memory curves.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import celpy.celtypes as cel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gleaner.api import NodeTrace, OfflineJob, Profile, crdgen
from gleaner.api.schema_validation import (
    FieldError,
    compile_rule,
    format_path,
    to_cel,
    validate_documents,
    validate_object,
    validate_profile_text,
)


def job() -> dict[str, Any]:
    return {
        "apiVersion": "gleaner.dev/v1alpha1",
        "kind": "OfflineJob",
        "metadata": {"name": "batch", "namespace": "default"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "w", "image": "vllm/vllm-openai"}]}},
            "throughputSLA": 0.5,
            "profile": {
                "standaloneTokensPerSecond": 2500,
                "requiredMemoryGiB": 20,
                "memoryCurve": [
                    {"memoryGiB": 8, "tokensPerSecond": 900},
                    {"memoryGiB": 20, "tokensPerSecond": 2500},
                ],
            },
        },
    }


def nodetrace() -> dict[str, Any]:
    return {
        "apiVersion": "gleaner.dev/v1alpha1",
        "kind": "NodeTrace",
        "metadata": {"name": "gpu-node-1"},
        "spec": {"nodeName": "gpu-node-1"},
        "status": {
            "source": "agent",
            "lastReportTime": datetime(2024, 6, 1, 12, 0, tzinfo=UTC),  # as YAML loads it
            "gpus": [
                {
                    "index": 0,
                    "uuid": "GPU-aaaa",
                    "product": "NVIDIA H100 80GB HBM3",
                    "memoryGiB": 80,
                },
                {
                    "index": 1,
                    "uuid": "GPU-bbbb",
                    "product": "NVIDIA H100 80GB HBM3",
                    "memoryGiB": 80,
                },
            ],
            "window": {
                "start": "2024-06-01T11:00:00Z",
                "end": "2024-06-01T12:00:00Z",
                "seconds": 3600,
            },
            "perGPU": [
                {"index": 0, "offlineEnabledSeconds": 2400, "onlineBusySeconds": 1100},
                {"index": 1, "offlineEnabledSeconds": 2300, "onlineBusySeconds": 1200},
            ],
            "pairs": [{"gpuA": 0, "gpuB": 1, "overlapSeconds": 1050, "unionSeconds": 1250}],
            "memory": {"stepGiB": 1, "states": [{"freeGiB": [40, 38], "seconds": 3600}]},
            "idleFraction": 0.66,
            "harvestableMemoryP10GiB": 36.0,
            "offlineJobs": 1,
            "gpuCount": 2,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Reporting",
                    "lastTransitionTime": "2024-06-01T11:00:00Z",
                }
            ],
        },
    }


def messages(errors: list[FieldError]) -> list[str]:
    return [str(e) for e in errors]


def pydantic_error(obj: Mapping[str, Any]) -> str | None:
    model = OfflineJob if obj["kind"] == "OfflineJob" else NodeTrace
    try:
        model.model_validate(obj)
    except ValidationError as exc:
        return str(exc)
    return None


Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = obj
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _delete(path: str) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = obj
        for part in parents:
            node = node[part]
        del node[last]

    return mutate


def _replace_profile(profile_from: dict[str, Any]) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        del obj["spec"]["profile"]
        obj["spec"]["profileFrom"] = profile_from

    return mutate


def test_good_objects_are_valid() -> None:
    assert validate_object(job()) == []
    assert validate_object(nodetrace()) == []
    assert pydantic_error(job()) is None
    assert pydantic_error(nodetrace()) is None


XOR_ERROR = (
    'spec: Invalid value: "object": exactly one of spec.profile and spec.profileFrom must be set'
)

# (mutation, expected kubectl-style error, text pydantic's error must contain)
JOB_CASES: list[tuple[str, Mutation, str, str]] = [
    (
        "sla-zero",
        _set("spec.throughputSLA", 0),
        "spec.throughputSLA: Invalid value: 0: spec.throughputSLA in body should be greater than 0",
        "spec.throughputSLA",
    ),
    (
        "sla-high",
        _set("spec.throughputSLA", 1.01),
        "spec.throughputSLA: Invalid value: 1.01: spec.throughputSLA in body should be less "
        "than or equal to 1",
        "spec.throughputSLA",
    ),
    (
        "gpus-12",
        _set("spec.gpus", 12),
        "spec.gpus: Invalid value: 12: spec.gpus in body should be less than or equal to 8",
        "spec.gpus",
    ),
    (
        "gpus-0",
        _set("spec.gpus", 0),
        "spec.gpus: Invalid value: 0: spec.gpus in body should be greater than or equal to 1",
        "spec.gpus",
    ),
    (
        "gpus-type",
        _set("spec.gpus", "two"),
        'spec.gpus: Invalid value: "string": spec.gpus in body must be of type integer: "string"',
        "spec.gpus",
    ),
    (
        "sla-missing",
        _delete("spec.throughputSLA"),
        "spec.throughputSLA: Required value",
        "spec.throughputSLA",
    ),
    (
        "no-profile",
        _delete("spec.profile"),
        XOR_ERROR,
        "exactly one of spec.profile and spec.profileFrom",
    ),
    (
        "both-profiles",
        _set("spec.profileFrom", {"name": "cm"}),
        XOR_ERROR,
        "exactly one of spec.profile and spec.profileFrom",
    ),
    (
        "one-point",
        _set("spec.profile.memoryCurve", [{"memoryGiB": 8, "tokensPerSecond": 900}]),
        "spec.profile.memoryCurve: Invalid value: 1: spec.profile.memoryCurve in body should "
        "have at least 2 items",
        "spec.profile.memoryCurve",
    ),
    (
        "decreasing-throughput",
        _set("spec.profile.memoryCurve.1.tokensPerSecond", 800),
        'spec.profile.memoryCurve: Invalid value: "object": memoryCurve: tokensPerSecond must '
        "not decrease as memoryGiB increases",
        "memoryCurve[1].tokensPerSecond decreases",
    ),
    (
        "unsorted-memory",
        _set(
            "spec.profile.memoryCurve",
            [{"memoryGiB": 20, "tokensPerSecond": 900}, {"memoryGiB": 8, "tokensPerSecond": 900}],
        ),
        'spec.profile.memoryCurve: Invalid value: "object": memoryCurve: points must be sorted '
        "by memoryGiB (memory strictly increasing)",
        "memoryCurve[1].memoryGiB must be greater than memoryCurve[0].memoryGiB",
    ),
    (
        "repeated-memory",
        _set(
            "spec.profile.memoryCurve",
            [{"memoryGiB": 8, "tokensPerSecond": 900}, {"memoryGiB": 8, "tokensPerSecond": 900}],
        ),
        'spec.profile.memoryCurve: Invalid value: "object": memoryCurve: memoryGiB values must '
        "be distinct",
        "memoryCurve[1].memoryGiB must be greater",
    ),
    (
        "curve-above-standalone",
        _set("spec.profile.memoryCurve.1.tokensPerSecond", 3000),
        'spec.profile.memoryCurve: Invalid value: "object": memoryCurve: tokensPerSecond must '
        "not exceed standaloneTokensPerSecond (5% measurement tolerance)",
        "exceeds standaloneTokensPerSecond",
    ),
    (
        "required-memory-zero",
        _set("spec.profile.requiredMemoryGiB", 0),
        "spec.profile.requiredMemoryGiB: Invalid value: 0: spec.profile.requiredMemoryGiB in "
        "body should be greater than 0",
        "spec.profile.requiredMemoryGiB",
    ),
    (
        "no-containers",
        _set("spec.template", {"spec": {"containers": []}}),
        "spec.template.spec.containers: Invalid value: 0: spec.template.spec.containers in body "
        "should have at least 1 items",
        "template.spec.containers",
    ),
    (
        "container-without-image",
        _set("spec.template", {"spec": {"containers": [{"name": "w"}]}}),
        "spec.template.spec.containers[0].image: Required value",
        "template.spec.containers[0] needs a name and an image",
    ),
    (
        "unknown-field",
        _set("spec.throughputSla", 0.5),
        'unknown field "spec.throughputSla"',
        "spec.throughputSla",
    ),
    (
        "priority-range",
        _set("spec.priority", 5000),
        "spec.priority: Invalid value: 5000: spec.priority in body should be less than or "
        "equal to 1000",
        "spec.priority",
    ),
    (
        "profile-ref-empty-name",
        _replace_profile({"name": ""}),
        'spec.profileFrom.name: Invalid value: "": spec.profileFrom.name in body should be at '
        "least 1 chars long",
        "spec.profileFrom.name",
    ),
    (
        "bad-phase",
        _set("status", {"phase": "Sleeping"}),
        'status.phase: Unsupported value: "Sleeping": supported values: "Pending", "Scheduled", '
        '"Running", "Evicted", "Unschedulable", "Succeeded", "Failed", "Invalid"',
        "status.phase",
    ),
    (
        "bad-condition-reason",
        _set(
            "status",
            {"conditions": [{"type": "Valid", "status": "True", "reason": "not ok!"}]},
        ),
        'status.conditions[0].reason: Invalid value: "not ok!": status.conditions[0].reason in '
        "body should match '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$'",
        "status.conditions.0.reason",
    ),
    (
        "bad-timestamp",
        _set("status", {"nextAttemptAfter": "tomorrow"}),
        'status.nextAttemptAfter: Invalid value: "tomorrow": status.nextAttemptAfter in body '
        'must be of type date-time: "tomorrow"',
        "status.nextAttemptAfter",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "expected", "pydantic_text"),
    [c[1:] for c in JOB_CASES],
    ids=[c[0] for c in JOB_CASES],
)
def test_crd_and_pydantic_both_refuse_naming_the_field(
    mutate: Mutation, expected: str, pydantic_text: str
) -> None:
    obj = job()
    mutate(obj)
    assert messages(validate_object(obj)) == [expected]
    error = pydantic_error(obj)
    assert error is not None, "pydantic accepted what the CRD refuses"
    assert pydantic_text in error.replace("\n  ", " ")


NODETRACE_CASES: list[tuple[str, Mutation, str]] = [
    (
        "pair-order",
        _set("status.pairs", [{"gpuA": 1, "gpuB": 0, "overlapSeconds": 1, "unionSeconds": 2}]),
        'status.pairs[0].gpuA: Invalid value: "object": gpuA must be less than gpuB',
    ),
    (
        "pair-overlap",
        _set("status.pairs", [{"gpuA": 0, "gpuB": 1, "overlapSeconds": 3, "unionSeconds": 2}]),
        'status.pairs[0].overlapSeconds: Invalid value: "object": overlapSeconds cannot exceed '
        "unionSeconds",
    ),
    (
        "gpu-index",
        _set("status.gpus.0.index", 16),
        "status.gpus[0].index: Invalid value: 16: status.gpus[0].index in body should be less "
        "than 16",
    ),
    (
        "idle-fraction",
        _set("status.idleFraction", 1.5),
        "status.idleFraction: Invalid value: 1.5: status.idleFraction in body should be less "
        "than or equal to 1",
    ),
    (
        "source",
        _set("status.source", "guess"),
        'status.source: Unsupported value: "guess": supported values: "agent", "simulated", '
        '"file", "prometheus"',
    ),
]


@pytest.mark.parametrize(
    ("mutate", "expected"), [c[1:] for c in NODETRACE_CASES], ids=[c[0] for c in NODETRACE_CASES]
)
def test_nodetrace_errors(mutate: Mutation, expected: str) -> None:
    obj = nodetrace()
    mutate(obj)
    assert messages(validate_object(obj)) == [expected]
    assert pydantic_error(obj) is not None


def test_nulls_are_pruned_in_spec_and_kept_where_nullable() -> None:
    obj = job()
    obj["spec"]["profileFrom"] = None  # pruned, so has(self.profileFrom) is false
    obj["spec"]["gpuSelector"] = None
    obj["status"] = {"placement": None, "observedGeneration": None, "phase": "Pending"}
    assert validate_object(obj) == []
    obj["status"]["phase"] = None  # not nullable: pruned, like the API server does
    assert validate_object(obj) == []


def test_metadata_name_is_checked() -> None:
    obj = job()
    obj["metadata"] = {"namespace": "default"}
    assert messages(validate_object(obj)) == [
        "metadata.name: Required value: name or generateName is required"
    ]
    obj["metadata"]["name"] = "Batch_Job"
    (err,) = validate_object(obj)
    assert err.field == "metadata.name" and '"Batch_Job"' in str(err)


def test_wrong_kind_or_version() -> None:
    obj = job()
    obj["apiVersion"] = "gleaner.dev/v1"
    assert validate_object(obj)[0].field == "apiVersion"
    obj["kind"] = "Pod"
    assert validate_object(obj)[0].field == "kind"


def test_several_errors_are_all_reported() -> None:
    obj = job()
    obj["spec"]["gpus"] = 9
    obj["spec"]["throughputSLA"] = 2
    obj["spec"]["profile"]["memoryCurve"][1]["tokensPerSecond"] = 100
    fields = sorted(e.field for e in validate_object(obj))
    assert fields == ["spec.gpus", "spec.profile.memoryCurve", "spec.throughputSLA"]


def all_rules() -> Iterator[tuple[str, dict[str, Any]]]:
    def walk(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for rule in node.get("x-kubernetes-validations", ()):
            yield path, rule
        for name, sub in node.get("properties", {}).items():
            yield from walk(sub, f"{path}.{name}")
        if isinstance(node.get("items"), Mapping):
            yield from walk(node["items"], f"{path}[]")

    for crd in crdgen.build_crds():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        yield from walk(schema, crd["spec"]["names"]["kind"])


def test_every_cel_rule_compiles_and_has_a_message() -> None:
    rules = list(all_rules())
    assert len(rules) >= 7
    for path, rule in rules:
        compiled = compile_rule(rule)
        assert compiled.message and compiled.message != f"failed rule: {rule['rule']}", path


def test_cel_values_are_typed_by_the_schema() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "number"}, "n": {"type": "integer"}}}
    value = to_cel({"x": 2500, "n": 3}, schema)
    assert isinstance(value[cel.StringType("x")], cel.DoubleType)  # an int literal, a double
    assert isinstance(value[cel.StringType("n")], cel.IntType)
    # ...so integer-written profiles meet double arithmetic without a type error:
    rule = compile_rule({"rule": "self.x * 1.05 > 2600.0", "message": "m"})
    assert bool(rule.program.evaluate({"self": value}))


def test_kubernetes_list_library_is_sorted() -> None:
    rule = compile_rule({"rule": "self.map(v, v).isSorted()", "message": "m"})
    schema = {"type": "array", "items": {"type": "number"}}
    assert bool(rule.program.evaluate({"self": to_cel([1, 2, 2, 3], schema)}))
    assert not bool(rule.program.evaluate({"self": to_cel([1, 3, 2], schema)}))


def test_format_path() -> None:
    assert format_path(("spec", "profile", "memoryCurve", 1, "memoryGiB")) == (
        "spec.profile.memoryCurve[1].memoryGiB"
    )
    assert format_path(("data", "profile.yaml", "memoryCurve")) == "data[profile.yaml].memoryCurve"


PROFILE_YAML = """
standaloneTokensPerSecond: 2500
requiredMemoryGiB: 20
memoryCurve:
  - {memoryGiB: 8, tokensPerSecond: 900}
  - {memoryGiB: 20, tokensPerSecond: 2500}
"""


def test_configmap_profiles_are_validated_when_referenced() -> None:
    ref_job = job()
    del ref_job["spec"]["profile"]
    ref_job["spec"]["profileFrom"] = {"name": "prof"}
    good_cm: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "prof", "namespace": "default"},
        "data": {"profile.yaml": PROFILE_YAML},
    }
    bad_cm = copy.deepcopy(good_cm)
    bad_cm["data"]["profile.yaml"] = PROFILE_YAML.replace(
        "tokensPerSecond: 2500}", "tokensPerSecond: 10}"
    )
    other_cm = copy.deepcopy(good_cm)
    other_cm["metadata"]["name"] = "unrelated"
    results = validate_documents([("a.yaml", good_cm), ("a.yaml", ref_job), ("b.yaml", other_cm)])
    assert [(r.kind, r.valid, r.skipped) for r in results] == [
        ("ConfigMap", True, False),
        ("OfflineJob", True, False),
        ("ConfigMap", True, True),
    ]
    (bad,) = [r for r in validate_documents([("x", bad_cm), ("x", ref_job)]) if not r.valid]
    assert messages(list(bad.errors)) == [
        'data[profile.yaml].memoryCurve: Invalid value: "object": memoryCurve: tokensPerSecond '
        "must not decrease as memoryGiB increases"
    ]
    missing = copy.deepcopy(good_cm)
    missing["data"] = {"other": "x"}
    (res, _) = validate_documents([("x", missing), ("x", ref_job)])
    assert messages(list(res.errors)) == [
        "data[profile.yaml]: Required value: the profile named by profileFrom"
    ]


def test_profile_text_that_is_not_yaml() -> None:
    (err,) = validate_profile_text("a: [", ("data", "profile.yaml"))
    assert err.field == "data[profile.yaml]" and "not YAML/JSON" in err.detail


# --- properties: the CRD and pydantic reach the same verdict ------------------------------

_values = st.sampled_from([4.0, 8.0, 12.0, 16.0, 24.0, 40.0, 80.0])
_tps = st.sampled_from([0.0, 500.0, 900.0, 1500.0, 2400.0, 2500.0, 2600.0, 2700.0])
_curves = st.lists(st.tuples(_values, _tps), min_size=2, max_size=6)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(curve=_curves)
def test_crd_and_pydantic_agree_on_any_curve(curve: list[tuple[float, float]]) -> None:
    obj = job()
    obj["spec"]["profile"]["memoryCurve"] = [
        {"memoryGiB": m, "tokensPerSecond": t} for m, t in curve
    ]
    crd_ok = validate_object(obj) == []
    assert crd_ok == (pydantic_error(obj) is None), (curve, messages(validate_object(obj)))


@settings(max_examples=30)
@given(
    memory=st.lists(st.integers(1, 200), min_size=2, max_size=8, unique=True),
    gains=st.lists(st.integers(0, 500), min_size=8, max_size=8),
)
def test_sorted_monotone_curves_are_always_valid(memory: list[int], gains: list[int]) -> None:
    tps = 0
    points = []
    for m, gain in zip(sorted(memory), gains, strict=False):
        tps += gain
        points.append({"memoryGiB": m, "tokensPerSecond": tps})
    profile = {
        "standaloneTokensPerSecond": max(tps, 1),
        "requiredMemoryGiB": max(memory),
        "memoryCurve": points,
    }
    obj = job()
    obj["spec"]["profile"] = profile
    assert validate_object(obj) == []
    Profile.model_validate(profile)
