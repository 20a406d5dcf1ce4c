"""The generated CRDs: checked in without drift, structural, accepted by Kubernetes' own schema."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel

from gleaner.api import crdgen
from gleaner.api.schema_validation import SchemaValidator

ROOT = Path(__file__).resolve().parents[2]

# Every keyword a structural schema node may use (apiextensions.k8s.io/v1 JSONSchemaProps).
ALLOWED_KEYWORDS = {
    "description",
    "type",
    "format",
    "nullable",
    "enum",
    "default",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
}


def schema_of(kind: str) -> dict[str, Any]:
    crd = crdgen.crd_for_kind(kind)
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def walk(node: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from walk(node["additionalProperties"], f"{path}.*")
    if isinstance(node.get("items"), Mapping):
        yield from walk(node["items"], f"{path}[]")


def structural_problems(schema: Mapping[str, Any]) -> list[str]:
    """What the API server would refuse in a structural schema (the rules we rely on)."""
    problems: list[str] = []
    for path, node in walk(schema):
        where = path or "<root>"
        unknown = set(node) - ALLOWED_KEYWORDS
        if unknown:
            problems.append(f"{where}: keywords {sorted(unknown)}")
        preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
        if "type" not in node and not preserve:
            problems.append(f"{where}: no type")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{where}: properties and additionalProperties")
        if "additionalProperties" in node and not isinstance(node["additionalProperties"], Mapping):
            problems.append(f"{where}: boolean additionalProperties")
        for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if flag in node and (node[flag] is not True or bound not in node):
                problems.append(f"{where}: {flag} must be true beside {bound}")
        if "nullable" in node and not isinstance(node["nullable"], bool):
            problems.append(f"{where}: nullable is not a bool")
        for name in node.get("required", ()):
            if name not in node.get("properties", {}):
                problems.append(f"{where}: required {name!r} is not a property")
        if node.get("x-kubernetes-list-type") == "map":
            item = node.get("items", {})
            for key in node.get("x-kubernetes-list-map-keys", ()):
                if key not in item.get("required", ()):
                    problems.append(f"{where}: list-map key {key!r} is not required")
        for rule in node.get("x-kubernetes-validations", ()):
            if set(rule) - {"rule", "message", "fieldPath", "reason", "messageExpression"}:
                problems.append(f"{where}: bad rule keys {sorted(rule)}")
            field_path = rule.get("fieldPath")
            if field_path and field_path.lstrip(".") not in node.get("properties", {}):
                problems.append(f"{where}: fieldPath {field_path!r} is not a property")
    metadata = schema["properties"]["metadata"]
    if metadata != {"type": "object"}:
        problems.append(f"metadata must be just an object, not {metadata}")
    return problems


@pytest.mark.parametrize("directory", ["crds", "helm/gleaner/files/crds"])
@pytest.mark.parametrize("spec", crdgen.CRDS, ids=lambda s: s.kind)
def test_checked_in_manifests_match_the_models(directory: str, spec: crdgen.CrdSpec) -> None:
    path = ROOT / directory / spec.filename
    assert path.is_file(), f"{path} is missing: run python -m gleaner.api.crdgen --write"
    assert path.read_text(encoding="utf-8") == crdgen.render(crdgen.build_crd(spec)), (
        f"{path} drifted from the models: run python -m gleaner.api.crdgen --write"
    )


def test_check_mode_reports_drift_in_either_location(tmp_path: Path) -> None:
    assert crdgen.main(["--write", "--root", str(tmp_path)]) == 0
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 0
    assert crdgen.drift(tmp_path) == []
    helm_copy = tmp_path / "helm/gleaner/files/crds/nodetraces.gleaner.dev.yaml"
    helm_copy.write_text(helm_copy.read_text() + "# hand edit\n")
    (tmp_path / "crds/offlinejobs.gleaner.dev.yaml").unlink()
    assert sorted(crdgen.drift(tmp_path)) == [
        "crds/offlinejobs.gleaner.dev.yaml",
        "helm/gleaner/files/crds/nodetraces.gleaner.dev.yaml",
    ]
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 1


def test_rendering_is_deterministic() -> None:
    first = crdgen.rendered_files()
    second = crdgen.rendered_files()
    assert first == second
    for text in first.values():
        assert text.startswith(crdgen.HEADER)
        assert "&id" not in text and "*id" not in text  # no YAML anchors/aliases


@pytest.mark.parametrize("kind", ["OfflineJob", "NodeTrace"])
def test_schemas_are_structural(kind: str) -> None:
    schema = schema_of(kind)
    assert structural_problems(schema) == []
    text = yaml.safe_dump(schema)
    for junk in ("$ref", "anyOf", "oneOf", "allOf", "title:", "$defs", "readOnly"):
        assert junk not in text, f"{junk} left in the {kind} schema"


def test_structural_checker_catches_problems() -> None:
    bad = {
        "type": "object",
        "properties": {
            "metadata": {"type": "object"},
            "a": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "b": {"type": "number", "exclusiveMinimum": 0},
            "c": {"type": "object", "required": ["x"], "additionalProperties": False},
        },
    }
    problems = structural_problems(bad)
    assert any(".a: no type" in p for p in problems)
    assert any(".a: keywords ['anyOf']" in p for p in problems)
    assert any(".b: exclusiveMinimum" in p for p in problems)
    assert any(".c: boolean additionalProperties" in p for p in problems)
    assert any(".c: required 'x'" in p for p in problems)


@pytest.mark.parametrize("crd", crdgen.build_crds(), ids=lambda c: c["metadata"]["name"])
def test_manifests_pass_kubernetes_own_crd_schema(crd: dict[str, Any]) -> None:
    kubernetes_validate.validate(crd, "1.30", strict=True)


def test_offlinejob_names_scope_and_columns() -> None:
    crd = crdgen.crd_for_kind("OfflineJob")
    assert crd["metadata"]["name"] == "offlinejobs.gleaner.dev"
    spec = crd["spec"]
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["oj"]
    assert spec["names"]["categories"] == ["gleaner"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    printed = version["additionalPrinterColumns"]
    columns = [(c["name"], c["type"], c["jsonPath"]) for c in printed if not c.get("priority")]
    assert columns == [
        ("Phase", "string", ".status.phase"),
        ("Node", "string", ".status.placement.node"),
        ("GPUs", "integer", ".spec.gpus"),
        ("SLA", "number", ".spec.throughputSLA"),
        ("Predicted", "number", ".status.placement.throughputFraction"),
        ("Observed", "number", ".status.observed.throughputFraction"),
        ("Evictions", "integer", ".status.evictionCount"),
        ("Requests", "string", ".status.batch.summary"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ]
    # kubectl get -o wide adds the predicted factors, the planned exit and the phase's reason.
    wide = [(c["name"], c["type"], c["jsonPath"]) for c in printed if c.get("priority") == 1]
    assert wide == [
        ("Compute", "number", ".status.placement.compute"),
        ("Memory", "number", ".status.placement.memory"),
        ("Multi-GPU", "number", ".status.placement.multiGPU"),
        ("Planned-Exit", "boolean", ".status.placement.plannedExit"),
        ("Reason", "string", ".status.message"),
    ]


def test_nodetrace_names_scope_and_columns() -> None:
    crd = crdgen.crd_for_kind("NodeTrace")
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "nodetraces.gleaner.dev"
    assert spec["scope"] == "Cluster"
    assert spec["names"]["shortNames"] == ["nt"]
    assert spec["names"]["categories"] == ["gleaner"]
    columns = [(c["name"], c["jsonPath"]) for c in spec["versions"][0]["additionalPrinterColumns"]]
    assert columns == [
        ("Node", ".spec.nodeName"),
        ("GPUs", ".status.gpuCount"),
        ("Idle", ".status.idleFraction"),
        ("Mem-p10", ".status.harvestableMemoryP10GiB"),
        ("Offline-Jobs", ".status.offlineJobs"),
        ("Last-Report", ".status.lastReportTime"),
        ("Age", ".metadata.creationTimestamp"),
    ]


@pytest.mark.parametrize("kind", ["OfflineJob", "NodeTrace"])
def test_every_printer_column_points_at_a_schema_field(kind: str) -> None:
    crd = crdgen.crd_for_kind(kind)
    schema = schema_of(kind)
    type_of = {
        "string": "string",
        "integer": "integer",
        "number": "number",
        "date": "string",
        "boolean": "boolean",
    }
    for column in crd["spec"]["versions"][0]["additionalPrinterColumns"]:
        node: Mapping[str, Any] = schema
        for part in column["jsonPath"].lstrip(".").split("."):
            if part not in node.get("properties", {}) and node is schema["properties"]["metadata"]:
                node = {"type": "string"}  # metadata fields are the API server's
                break
            node = node["properties"][part]
        assert node["type"] == type_of[column["type"]], column


def test_schema_details_follow_the_models() -> None:
    spec = schema_of("OfflineJob")["properties"]["spec"]
    props = spec["properties"]
    assert schema_of("OfflineJob")["required"] == ["spec"]
    # template became optional when spec.batch arrived: exactly one of the two (CEL below).
    assert spec["required"] == ["throughputSLA"]
    assert props["throughputSLA"] == {
        "description": "Required fraction (0, 1] of the job's standalone throughput.",
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 1,
    }
    assert (props["gpus"]["minimum"], props["gpus"]["maximum"], props["gpus"]["default"]) == (
        1,
        8,
        1,
    )
    assert props["template"]["x-kubernetes-preserve-unknown-fields"] is True
    curve = props["profile"]["properties"]["memoryCurve"]
    assert (curve["minItems"], curve["maxItems"]) == (2, 64)
    # Optional spec fields are plain (not nullable) so has() in CEL means "given".
    assert "nullable" not in props["profile"] and "nullable" not in props["profileFrom"]
    assert "default" not in props["profile"]
    assert [r["rule"] for r in spec["x-kubernetes-validations"]] == [
        "has(self.profile) != has(self.profileFrom)",
        "has(self.template) != has(self.batch)",
    ]
    assert "nullable" not in props["template"] and "nullable" not in props["batch"]
    status = schema_of("OfflineJob")["properties"]["status"]["properties"]
    assert status["phase"]["enum"] == [
        "Pending",
        "Scheduled",
        "Running",
        "Evicted",
        "Unschedulable",
        "Succeeded",
        "Failed",
        "Invalid",
    ]
    assert status["placement"]["nullable"] is True
    assert status["placement"]["properties"]["decidedAt"]["format"] == "date-time"
    assert "default" not in status["phase"]  # status defaults belong to the operator
    assert status["conditions"]["x-kubernetes-list-type"] == "map"
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    nt_status = schema_of("NodeTrace")["properties"]["status"]["properties"]
    assert nt_status["gpuCount"]["type"] == "integer"
    assert nt_status["gpus"]["items"]["properties"]["index"]["exclusiveMaximum"] is True


def test_spec_defaults_satisfy_their_own_schema() -> None:
    spec = schema_of("OfflineJob")["properties"]["spec"]
    for path, node in walk(spec, "spec"):
        if "default" in node:
            errors = SchemaValidator(node, prefix=(path,)).validate(node["default"])
            assert errors == [], (path, errors)


class _Bad(BaseModel):
    either: int | str


def test_unsupported_constructs_are_errors_not_silently_copied() -> None:
    spec = crdgen.CrdSpec(
        model=_Bad,
        kind="Bad",
        plural="bads",
        singular="bad",
        short_names=(),
        scope="Namespaced",
        description="",
        columns=(),
        spec_required=False,
    )
    with pytest.raises(KeyError):
        crdgen.openapi_schema(spec)  # no spec/status at all
    ctx = crdgen._Ctx(defs={}, computed={}, in_status=False, where="spec")
    with pytest.raises(crdgen.CrdGenError, match="anyOf with 2 non-null options"):
        crdgen._convert(_Bad.model_json_schema()["properties"]["either"], ctx)
    with pytest.raises(crdgen.CrdGenError, match="unsupported schema keyword"):
        crdgen._convert({"type": "string", "const": "x"}, ctx)
    with pytest.raises(crdgen.CrdGenError, match="unresolvable"):
        crdgen._convert({"$ref": "#/$defs/Nope"}, ctx)
