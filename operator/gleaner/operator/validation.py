"""Validating an OfflineJob as the API server stores it (pure).

Contract: ``validate_job(body, profile_configmap)`` returns a ``ValidJob`` (the parsed
``OfflineJob`` and its resolved ``Profile``) or an ``InvalidJob`` whose ``message`` names
the offending field the way ``kubectl`` users write it (``spec.profile.memoryCurve[1]...``).
The caller fetches the ConfigMap named by ``spec.profileFrom`` (or passes None when it does
not exist). With ``profileFrom.auto`` a missing ConfigMap is no error: the verdict is
``NeedsProfile`` (the operator measures the profile and writes the ConfigMap), and so is
a ConfigMap the operator measured with another engine image than the job's. Problems with
that ConfigMap name it as ``ConfigMap <namespace>/<name>``:
``spec.profileFrom.name: ConfigMap team/profiles not found``, ``spec.profileFrom.key:
ConfigMap team/profiles has no key 'profile.yaml' (keys: ...)``, ``... key 'profile.yaml'
is not valid YAML: ...``, or ``spec.profileFrom: ConfigMap team/profiles key
'profile.yaml': requiredMemoryGiB: ...`` for a field of the profile. An invalid job is
re-validated when the user updates its spec or when the ConfigMap it names appears or
changes (``handlers.validate.revalidate_profile_users``); nothing retries it on a timer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from gleaner.api import OfflineJob, Profile
from gleaner.api.contract import LABEL_JOB
from gleaner.operator.autoprofile import missing_model, stale_profile
from gleaner.operator.builders import MAX_LABEL_VALUE


@dataclass(frozen=True)
class ValidJob:
    job: OfflineJob
    profile: Profile


@dataclass(frozen=True)
class InvalidJob:
    message: str


@dataclass(frozen=True)
class NeedsProfile:
    """Valid, but its ``profileFrom`` ConfigMap is missing and ``auto`` asks the operator
    to measure it (``gleaner.operator.autoprofile``)."""

    job: OfflineJob
    message: str


def _loc(loc: tuple[int | str, ...], prefix: str) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part and not part.startswith("function-") and part not in ("model", "body"):
            out += f".{part}" if out else part
    return out


def format_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One line per problem, each starting with the field path."""
    problems = []
    for err in exc.errors():
        where = _loc(tuple(err["loc"]), prefix) or prefix or "object"
        msg = str(err["msg"]).removeprefix("Value error, ")
        problems.append(f"{where}: {msg}")
    return "; ".join(problems)


def profile_configmap_name(body: Mapping[str, Any]) -> str | None:
    """The ConfigMap the job's profile comes from, if it names one."""
    ref = (body.get("spec") or {}).get("profileFrom")
    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
        return str(ref["name"])
    return None


def validate_job(
    body: Mapping[str, Any], profile_configmap: Mapping[str, Any] | None = None
) -> ValidJob | InvalidJob | NeedsProfile:
    """Validate the stored object; resolve ``spec.profileFrom`` against the given ConfigMap."""
    raw = {k: v for k, v in body.items() if k in ("apiVersion", "kind", "metadata", "spec")}
    try:
        job = OfflineJob.model_validate(raw)
    except ValidationError as exc:
        return InvalidJob(format_validation_error(exc))
    name = job.metadata.name
    if len(name) > MAX_LABEL_VALUE:
        return InvalidJob(
            f"metadata.name: {len(name)} characters; at most {MAX_LABEL_VALUE} "
            f"(the name is the value of the {LABEL_JOB} label of the job's Pods)"
        )
    if job.spec.profile is not None:
        return ValidJob(job, job.spec.profile)
    ref = job.spec.profile_from
    assert ref is not None  # the model guarantees exactly one source
    where = f"ConfigMap {job.metadata.namespace or 'default'}/{ref.name}"
    if profile_configmap is None:
        if ref.auto:
            unprofilable = missing_model(job)
            if unprofilable is not None:
                return InvalidJob(f"spec.profileFrom.auto: {unprofilable}")
            return NeedsProfile(job, f"{where} not found: profile on submit measures it")
        return InvalidJob(f"spec.profileFrom.name: {where} not found")
    if ref.auto and (stale := stale_profile(job, profile_configmap)) is not None:
        return NeedsProfile(job, f"{stale}: profile on submit measures it again")
    data = profile_configmap.get("data") or {}
    if ref.key not in data:
        keys = ", ".join(sorted(data)) or "none"
        return InvalidJob(f"spec.profileFrom.key: {where} has no key {ref.key!r} (keys: {keys})")
    text = str(data[ref.key])
    as_json = text.lstrip().startswith("{")
    try:
        parsed = json.loads(text) if as_json else yaml.safe_load(text)
    except (yaml.YAMLError, ValueError) as exc:
        first = str(exc).splitlines()[0]
        kind = "JSON" if as_json else "YAML"
        return InvalidJob(
            f"spec.profileFrom.key: {where} key {ref.key!r} is not valid {kind}: {first}"
        )
    if not isinstance(parsed, dict):
        return InvalidJob(
            f"spec.profileFrom.key: {where} key {ref.key!r} must hold a mapping with the "
            "fields of spec.profile"
        )
    try:
        profile = Profile.model_validate(parsed)
    except ValidationError as exc:
        return InvalidJob(
            f"spec.profileFrom: {where} key {ref.key!r}: {format_validation_error(exc)}"
        )
    return ValidJob(job, profile)
