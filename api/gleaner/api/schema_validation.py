"""Validate Gleaner objects the way the Kubernetes API server does, through the generated CRDs.

Contract: ``validate_object(obj)`` checks one OfflineJob or NodeTrace (a plain dict, as
loaded from YAML) against the *generated* CRD schema (``gleaner.api.crdgen``), not the
pydantic models, so a test that passes here is evidence that ``kubectl apply`` accepts
the object. It returns kubectl-style ``FieldError``s (``spec.gpus: Invalid value: 12:
spec.gpus in body should be less than or equal to 8``), empty when valid. In order:

1. strict field validation (what ``kubectl apply --validate=strict`` does): unknown
   fields are errors; nulls in non-nullable fields are pruned as the API server does;
2. ``metadata.name`` must be present and a DNS-1123 subdomain;
3. the OpenAPI v3 schema (``jsonschema``, Draft 4 semantics with OpenAPI's ``nullable``
   and RFC 3339 ``date-time``);
4. the CEL ``x-kubernetes-validations`` (``celpy``), with values typed by the schema as
   the API server types them (``number`` is a double even when written ``2500``) and the
   Kubernetes list library's ``isSorted()``/``sum()``. A rule is skipped on a node whose
   subtree already failed step 3, so one mistake is reported once.

``validate_documents`` validates a batch of YAML documents and also checks the profile
inside a ConfigMap that an OfflineJob in the batch names in ``spec.profileFrom``.
Pure: no file or network I/O (callers load the YAML).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cache
from typing import Any

import celpy
import celpy.celtypes as cel
import jsonschema
import yaml
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from gleaner.api.common import API_VERSION, GROUP
from gleaner.api.crdgen import CRDS, build_crd

KINDS = tuple(spec.kind for spec in CRDS)

Path = tuple[str | int, ...]

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class FieldError:
    """One field error, printed the way the API server words it."""

    field: str
    type: str  # "Required value", "Invalid value", "Unsupported value", "Too many", ...
    detail: str = ""
    value: str | None = None

    def __str__(self) -> str:
        if self.type == "unknown field":
            return f'unknown field "{self.field}"'
        text = f"{self.field}: {self.type}"
        if self.value is not None:
            text += f": {self.value}"
        if self.detail:
            text += f": {self.detail}"
        return text


def format_path(path: Iterable[str | int]) -> str:
    """``("spec", "profile", "memoryCurve", 1)`` -> ``spec.profile.memoryCurve[1]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part}]"
    return out


def _go_value(value: Any) -> str:
    """A value as the API server prints it in an error (strings quoted, numbers bare)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "null"
    return json.dumps(_type_name(value))


def _type_name(value: Any) -> str:
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "null"


def to_json_value(value: Any) -> Any:
    """YAML-loaded data as the JSON kubectl would send (timestamps become RFC 3339 text)."""
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    if isinstance(value, datetime):
        text = value.isoformat()
        return text.replace("+00:00", "Z") if value.tzinfo else text + "Z"
    if isinstance(value, date):
        return value.isoformat()
    return value


# --- OpenAPI (jsonschema) ---------------------------------------------------------------

_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks("date-time")
def _is_rfc3339(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    if not _RFC3339.match(instance):
        return False
    try:
        datetime.fromisoformat(instance.replace("z", "Z"))
    except ValueError:
        return False
    return True


def _to_jsonschema(node: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAPI v3 (structural) -> Draft 4 JSON schema: ``nullable`` becomes a null type."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("nullable", "description", "default"):
            continue
        if key == "properties":
            out[key] = {name: _to_jsonschema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            out[key] = _to_jsonschema(value)
        else:
            out[key] = value
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def _schema_error(err: jsonschema.ValidationError, prefix: Path) -> list[FieldError]:
    path: Path = (*prefix, *err.absolute_path)
    where = format_path(path)
    kind = err.validator
    schema = err.schema if isinstance(err.schema, Mapping) else {}
    value: Any = err.instance
    expected: Any = err.validator_value
    if kind == "required":
        present = value if isinstance(value, Mapping) else {}
        return [
            FieldError(format_path((*path, name)), "Required value")
            for name in expected
            if name not in present
        ]
    if kind == "type":
        wanted = expected
        wanted = wanted[0] if isinstance(wanted, list) else wanted
        got = _type_name(value)
        return [
            FieldError(
                where,
                "Invalid value",
                f"{where} in body must be of type {wanted}: {json.dumps(got)}",
                json.dumps(got),
            )
        ]
    if kind == "enum":
        allowed = ", ".join(json.dumps(v) for v in expected if v is not None)
        return [
            FieldError(where, "Unsupported value", f"supported values: {allowed}", _go_value(value))
        ]
    if kind in ("minimum", "maximum"):
        flag = "exclusiveMinimum" if kind == "minimum" else "exclusiveMaximum"
        exclusive = bool(schema.get(flag))
        word = "greater" if kind == "minimum" else "less"
        relation = f"{word} than" if exclusive else f"{word} than or equal to"
        bound = _go_value(expected)
        detail = f"{where} in body should be {relation} {bound}"
        return [FieldError(where, "Invalid value", detail, _go_value(value))]
    if kind == "minItems":
        detail = f"{where} in body should have at least {expected} items"
        return [FieldError(where, "Invalid value", detail, str(len(value)))]
    if kind == "maxItems":
        detail = f"must have at most {expected} items"
        return [FieldError(where, "Too many", detail, str(len(value)))]
    if kind == "minLength":
        detail = f"{where} in body should be at least {expected} chars long"
        return [FieldError(where, "Invalid value", detail, _go_value(value))]
    if kind == "maxLength":
        detail = f"may not be more than {expected} bytes"
        return [FieldError(where, "Too long", detail)]
    if kind == "pattern":
        detail = f"{where} in body should match '{expected}'"
        return [FieldError(where, "Invalid value", detail, _go_value(value))]
    if kind == "format":
        detail = f"{where} in body must be of type {expected}: {_go_value(value)}"
        return [FieldError(where, "Invalid value", detail, _go_value(value))]
    return [FieldError(where, "Invalid value", err.message, _go_value(value))]


# --- CEL ----------------------------------------------------------------------------------


def _is_sorted(items: Any) -> cel.BoolType:
    values: list[Any] = list(items)
    return cel.BoolType(all(a <= b for a, b in itertools.pairwise(values)))


def _sum(items: Any) -> Any:
    values: list[Any] = list(items)
    if not values:
        return cel.IntType(0)
    total = values[0]
    for v in values[1:]:
        total = total + v
    return total


# The subset of the Kubernetes CEL list library that Gleaner's rules may use.
K8S_CEL_FUNCTIONS: dict[str, Any] = {"isSorted": _is_sorted, "sum": _sum}


@dataclass(frozen=True)
class CelRule:
    """One compiled ``x-kubernetes-validations`` entry."""

    rule: str
    message: str
    field_path: str
    program: Any


@cache
def _cel_env() -> celpy.Environment:
    return celpy.Environment()


def compile_rule(entry: Mapping[str, Any]) -> CelRule:
    """Compile one rule; raises ``celpy.CELParseError`` on a syntax error."""
    env = _cel_env()
    ast = env.compile(str(entry["rule"]))
    program = env.program(ast, functions=K8S_CEL_FUNCTIONS)
    return CelRule(
        rule=str(entry["rule"]),
        message=str(entry.get("message") or f"failed rule: {entry['rule']}"),
        field_path=str(entry.get("fieldPath", "")),
        program=program,
    )


def to_cel(value: Any, schema: Mapping[str, Any]) -> Any:
    """A JSON value as a CEL value, typed by its schema (as the API server types it)."""
    if value is None:
        return None
    kind = schema.get("type")
    if kind == "object" and isinstance(value, Mapping):
        props: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out: dict[Any, Any] = {}
        for key, sub in value.items():
            sub_schema = props.get(key) or (extra if isinstance(extra, Mapping) else {})
            out[cel.StringType(key)] = to_cel(sub, sub_schema)
        return cel.MapType(out)
    if kind == "array" and isinstance(value, list):
        return cel.ListType([to_cel(v, schema.get("items", {})) for v in value])
    if kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return cel.DoubleType(float(value))
    if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return cel.IntType(value)
    if kind == "string" and isinstance(value, str):
        if schema.get("format") == "date-time":
            try:
                return cel.TimestampType(value)
            except ValueError:
                return cel.StringType(value)
        return cel.StringType(value)
    if kind == "boolean" and isinstance(value, bool):
        return cel.BoolType(value)
    return json_to_cel(value)


def _parse_field_path(field_path: str) -> Path:
    parts: list[str | int] = []
    for match in re.finditer(r"\.([A-Za-z_][A-Za-z0-9_]*)|\['([^']*)'\]|\[(\d+)\]", field_path):
        name, quoted, index = match.groups()
        if index is not None:
            parts.append(int(index))
        else:
            parts.append(name if name is not None else quoted)
    return tuple(parts)


def _walk_rules(schema: Mapping[str, Any], path: Path = ()) -> Iterator[tuple[Path, CelRule]]:
    """Every CEL rule in a schema with the schema path it sits at ('*' = any key/index)."""
    for entry in schema.get("x-kubernetes-validations", ()):
        yield path, _compiled(entry["rule"], entry.get("message"), entry.get("fieldPath"))
    for name, sub in schema.get("properties", {}).items():
        yield from _walk_rules(sub, (*path, name))
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from _walk_rules(schema["additionalProperties"], (*path, "*"))
    if isinstance(schema.get("items"), Mapping):
        yield from _walk_rules(schema["items"], (*path, "*"))


# --- the validator ------------------------------------------------------------------------


@dataclass
class SchemaValidator:
    """Validates values against one structural schema node (a whole CRD, or a part of one)."""

    schema: Mapping[str, Any]
    prefix: Path = ()
    check_metadata: bool = False
    _jsonschema: jsonschema.Draft4Validator = field(init=False, repr=False)
    _rule_count: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._jsonschema = jsonschema.Draft4Validator(
            _to_jsonschema(self.schema), format_checker=_FORMATS
        )
        self._rule_count = sum(1 for _ in _walk_rules(self.schema))

    @classmethod
    def for_kind(cls, kind: str) -> SchemaValidator:
        return _validator_for_kind(kind)

    def part(self, *path: str) -> SchemaValidator:
        """The validator of a sub-schema, e.g. ``part("spec", "profile")``."""
        node = self.schema
        for name in path:
            node = node["properties"][name]
        return SchemaValidator(node, prefix=(*self.prefix, *path))

    @property
    def rule_count(self) -> int:
        return self._rule_count

    def validate(self, obj: Any) -> list[FieldError]:
        errors: list[FieldError] = []
        value = _prune(to_json_value(obj), self.schema, self.prefix, errors)
        if self.check_metadata:
            errors.extend(_metadata_errors(value))
        schema_errors = list(self._jsonschema.iter_errors(value))
        bad: set[Path] = set()
        for err in sorted(schema_errors, key=lambda e: [str(p) for p in e.absolute_path]):
            errors.extend(_schema_error(err, self.prefix))
            bad.add(tuple(err.absolute_path))
        errors.extend(_cel_errors(value, self.schema, (), self.prefix, bad))
        return errors


@cache
def _validator_for_kind(kind: str) -> SchemaValidator:
    for spec in CRDS:
        if spec.kind == kind:
            crd = build_crd(spec)
            schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            return SchemaValidator(schema, check_metadata=True)
    raise KeyError(f"no Gleaner CRD for kind {kind!r}")


def _prune(value: Any, schema: Mapping[str, Any], path: Path, errors: list[FieldError]) -> Any:
    """Strict field validation + null pruning, returning the value the server would keep."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return value
    if isinstance(value, Mapping) and schema.get("type") == "object":
        props: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        out: dict[str, Any] = {}
        for key, sub in value.items():
            sub_schema = props.get(key)
            if sub_schema is None and isinstance(extra, Mapping):
                sub_schema = extra
            if sub_schema is None:
                if preserve or not props:
                    out[key] = sub
                else:
                    errors.append(FieldError(format_path((*path, key)), "unknown field"))
                continue
            if sub is None and not sub_schema.get("nullable"):
                continue  # the API server drops nulls of non-nullable fields
            out[key] = _prune(sub, sub_schema, (*path, key), errors)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_prune(v, schema["items"], (*path, i), errors) for i, v in enumerate(value)]
    return value


def _metadata_errors(obj: Any) -> list[FieldError]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return [FieldError("metadata.name", "Required value", "name or generateName is required")]
    name = meta.get("name")
    if not name and not meta.get("generateName"):
        return [FieldError("metadata.name", "Required value", "name or generateName is required")]
    if name and (not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
        return [
            FieldError(
                "metadata.name",
                "Invalid value",
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
                _go_value(name),
            )
        ]
    return []


def _under(path: Path, bad: set[Path]) -> bool:
    return any(b[: len(path)] == path for b in bad)


def _cel_errors(
    value: Any, schema: Mapping[str, Any], path: Path, prefix: Path, bad: set[Path]
) -> list[FieldError]:
    errors: list[FieldError] = []
    rules = schema.get("x-kubernetes-validations", ())
    if rules and value is not None:
        cel_self = to_cel(value, schema)
        for entry in rules:
            rule = _compiled(entry["rule"], entry.get("message"), entry.get("fieldPath"))
            where = format_path((*prefix, *path, *_parse_field_path(rule.field_path)))
            shown = json.dumps(_type_name(value))
            try:
                result = rule.program.evaluate({"self": cel_self})
            except CELEvalError as exc:
                if not _under(path, bad):  # else the schema error already explains it
                    errors.append(FieldError(where, "Invalid value", f"rule error: {exc}", shown))
                continue
            if not isinstance(result, cel.BoolType):
                detail = f"rule {rule.rule!r} did not evaluate to a bool: {result!r}"
                errors.append(FieldError(where, "Invalid value", detail, shown))
            elif not bool(result):
                errors.append(FieldError(where, "Invalid value", rule.message, shown))
    if isinstance(value, Mapping):
        props: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            sub_schema = props.get(key) or (extra if isinstance(extra, Mapping) else None)
            if sub_schema is not None:
                errors.extend(_cel_errors(sub, sub_schema, (*path, key), prefix, bad))
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            errors.extend(_cel_errors(item, schema["items"], (*path, i), prefix, bad))
    return errors


@cache
def _compiled(rule: str, message: str | None, field_path: str | None) -> CelRule:
    entry: dict[str, Any] = {"rule": rule}
    if message:
        entry["message"] = message
    if field_path:
        entry["fieldPath"] = field_path
    return compile_rule(entry)


# --- objects and documents ----------------------------------------------------------------


def validate_object(obj: Mapping[str, Any]) -> list[FieldError]:
    """Validate one OfflineJob or NodeTrace through its generated CRD schema."""
    kind = obj.get("kind")
    if kind not in KINDS:
        return [FieldError("kind", "Unsupported value", f"supported values: {KINDS}", repr(kind))]
    if obj.get("apiVersion") != API_VERSION:
        return [
            FieldError(
                "apiVersion",
                "Unsupported value",
                f'supported values: "{API_VERSION}"',
                _go_value(obj.get("apiVersion")),
            )
        ]
    return SchemaValidator.for_kind(str(kind)).validate(obj)


def validate_profile_text(text: str, prefix: Path = ()) -> list[FieldError]:
    """Validate a profile kept as YAML/JSON text (a ConfigMap value) like ``spec.profile``."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = format_path(prefix)
        return [FieldError(where, "Invalid value", f"not YAML/JSON: {exc}".splitlines()[0])]
    part = SchemaValidator.for_kind("OfflineJob").part("spec", "profile")
    return SchemaValidator(part.schema, prefix=prefix).validate(data)


@dataclass(frozen=True)
class DocumentResult:
    """The verdict on one YAML document."""

    kind: str
    name: str
    namespace: str | None
    errors: tuple[FieldError, ...] = ()
    skipped: bool = False  # not a Gleaner object (and no profile ConfigMap)
    source: str = ""

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def resource(self) -> str:
        """``offlinejob.gleaner.dev/name`` (kubectl's way of naming an object)."""
        for spec in CRDS:
            if spec.kind == self.kind:
                return f"{spec.singular}.{GROUP}/{self.name}"
        return f"{self.kind.lower()}/{self.name}"


def _meta(doc: Mapping[str, Any]) -> tuple[str, str | None]:
    meta = doc.get("metadata")
    if not isinstance(meta, Mapping):
        return "", None
    namespace = meta.get("namespace")
    return str(meta.get("name") or ""), (str(namespace) if namespace is not None else None)


def validate_documents(
    docs: Sequence[tuple[str, Any]], default_namespace: str = "default"
) -> list[DocumentResult]:
    """Validate ``(source, document)`` pairs; ConfigMaps named by ``profileFrom`` are checked.

    A ConfigMap is matched to an OfflineJob of the batch by namespace and name, and its
    ``data[key]`` is validated like ``spec.profile``. Other kinds are returned ``skipped``.
    """
    profile_refs: dict[tuple[str, str], set[str]] = {}
    for _, doc in docs:
        if isinstance(doc, Mapping) and doc.get("kind") == "OfflineJob":
            spec = doc.get("spec")
            ref = spec.get("profileFrom") if isinstance(spec, Mapping) else None
            if isinstance(ref, Mapping) and ref.get("name"):
                _, ns = _meta(doc)
                key = (ns or default_namespace, str(ref["name"]))
                profile_refs.setdefault(key, set()).add(str(ref.get("key") or "profile.yaml"))

    results: list[DocumentResult] = []
    for source, doc in docs:
        if not isinstance(doc, Mapping):
            results.append(
                DocumentResult(
                    kind="",
                    name="",
                    namespace=None,
                    errors=(FieldError("<document>", "Invalid value", "not a mapping"),),
                    source=source,
                )
            )
            continue
        kind = str(doc.get("kind") or "")
        name, ns = _meta(doc)
        if kind in KINDS:
            errors = validate_object(doc)
            results.append(DocumentResult(kind, name, ns, tuple(errors), source=source))
        elif kind == "ConfigMap" and (ns or default_namespace, name) in profile_refs:
            data = doc.get("data")
            data = data if isinstance(data, Mapping) else {}
            errs: list[FieldError] = []
            for data_key in sorted(profile_refs[(ns or default_namespace, name)]):
                if data_key not in data:
                    where = format_path(("data", data_key))
                    errs.append(
                        FieldError(where, "Required value", "the profile named by profileFrom")
                    )
                else:
                    errs.extend(validate_profile_text(str(data[data_key]), ("data", data_key)))
            results.append(DocumentResult(kind, name, ns, tuple(errs), source=source))
        else:
            results.append(DocumentResult(kind, name, ns, skipped=True, source=source))
    return results
