"""Shared building blocks of the Gleaner API: the base model and standard Conditions.

Contract: every API object is a pydantic v2 model whose field *aliases* are the
Kubernetes (camelCase) names, so ``Model.model_validate(obj_from_api_server)`` and
``model.to_k8s()`` round-trip the exact JSON the API server stores. The CRD manifests
in ``crds/`` are generated from these models (``gleaner.api.crdgen``); a test fails
when they drift.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP = "gleaner.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


class KubeModel(BaseModel):
    """Base for API models: camelCase on the wire, snake_case in Python, typos refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=False,
        validate_assignment=True,
    )

    def to_k8s(self) -> dict[str, Any]:
        """The JSON form the API server stores (aliases, no unset optionals)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(KubeModel):
    """A standard Kubernetes condition (``metav1.Condition``)."""

    type: str = Field(min_length=1, max_length=316, description="Condition type, CamelCase.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="Machine-readable CamelCase reason for the last transition.",
    )
    message: str = Field(default="", max_length=32768, description="Human-readable details.")
    last_transition_time: datetime = Field(
        default_factory=lambda: datetime.now(UTC),
        description="When the status last changed.",
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation this condition was set for."
    )


def set_condition(conditions: list[Condition], new: Condition) -> list[Condition]:
    """Return ``conditions`` with ``new`` merged in, Kubernetes-style.

    The transition time is kept when the status did not change, so repeated
    reconciliations are idempotent and do not churn the object.
    """
    out: list[Condition] = []
    replaced = False
    for cond in conditions:
        if cond.type == new.type:
            replaced = True
            if cond.status == new.status:
                new = new.model_copy(update={"last_transition_time": cond.last_transition_time})
            out.append(new)
        else:
            out.append(cond)
    if not replaced:
        out.append(new)
    return out


def find_condition(conditions: list[Condition], type_: str) -> Condition | None:
    for cond in conditions:
        if cond.type == type_:
            return cond
    return None


class ObjectMeta(KubeModel):
    """The parts of ``metadata`` Gleaner reads; everything else passes through."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(default="", description="Object name.")
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class CustomResource(KubeModel):
    """A whole custom object: apiVersion, kind, metadata, spec, status."""

    KIND: ClassVar[str] = ""
    PLURAL: ClassVar[str] = ""

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
