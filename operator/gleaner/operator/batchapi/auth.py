"""Who calls the Batch API, and may they (docs/batch.md, "Authentication").

Contract. Every request carries ``Authorization: Bearer <token>``: a Kubernetes
ServiceAccount token (or any token the API server authenticates). :class:`Authorizer`
asks the API server, through gleaner.clients.kube:

- a **TokenReview** of the token: not authenticated -> 401;
- the **namespace** the call acts in: the one the ``OpenAI-Organization`` header names,
  else the ServiceAccount's own (``system:serviceaccount:<namespace>:<name>``); neither ->
  400 (:func:`namespace_of`, pure);
- a **SubjectAccessReview** for that user: may it ``<verb>`` ``offlinejobs.gleaner.dev`` in
  the namespace? Reading needs ``get``, uploading and creating ``create``, cancelling
  ``delete`` -> else 403.

The runner's own calls (remote mode: fetch the input, upload the results) come with its
Pod's ServiceAccount token, which usually has no rights on OfflineJobs: they are allowed
for a ServiceAccount of the batch's own namespace (:meth:`Authorizer.runner`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gleaner.api import GROUP
from gleaner.clients.kube import KubeError, SyncKubeClient
from gleaner.operator.batchapi.objects import ApiError

TOKENREVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECTACCESSREVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
SA_PREFIX = "system:serviceaccount:"
RESOURCE = "offlinejobs"


@dataclass(frozen=True)
class Caller:
    """An authenticated user, as the TokenReview says."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)

    @property
    def service_account_namespace(self) -> str | None:
        if not self.username.startswith(SA_PREFIX):
            return None
        namespace, _, name = self.username[len(SA_PREFIX) :].partition(":")
        return namespace if namespace and name else None


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer`` header; 401 without one."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(
            401,
            "a Kubernetes ServiceAccount token is required: Authorization: Bearer <token>",
            code="invalid_api_key",
        )
    return token.strip()


def namespace_of(caller: Caller, organization: str | None) -> str:
    """The namespace a call acts in (see the module docstring)."""
    if organization:
        return organization
    namespace = caller.service_account_namespace
    if namespace is None:
        raise ApiError(
            400,
            "name the namespace in the OpenAI-Organization header "
            "(only a ServiceAccount's token implies one)",
        )
    return namespace


class Authorizer:
    """TokenReview and SubjectAccessReview through the operator's Kubernetes client."""

    def __init__(self, kube: SyncKubeClient) -> None:
        self.kube = kube

    def authenticate(self, authorization: str | None) -> Caller:
        token = bearer_token(authorization)
        review = self._create(
            TOKENREVIEWS,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        status = review.get("status") or {}
        user = status.get("user") or {}
        if not status.get("authenticated") or not user.get("username"):
            raise ApiError(401, "the token was not accepted", code="invalid_api_key")
        return Caller(
            username=str(user["username"]),
            uid=str(user.get("uid") or ""),
            groups=tuple(user.get("groups") or ()),
            extra={str(k): list(v) for k, v in (user.get("extra") or {}).items()},
        )

    def authorize(self, caller: Caller, namespace: str, verb: str) -> None:
        """403 unless ``caller`` may ``verb`` OfflineJobs in ``namespace``."""
        review = self._create(
            SUBJECTACCESSREVIEWS,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": caller.username,
                    "uid": caller.uid,
                    "groups": list(caller.groups),
                    "extra": caller.extra,
                    "resourceAttributes": {
                        "namespace": namespace,
                        "verb": verb,
                        "group": GROUP,
                        "resource": RESOURCE,
                    },
                },
            },
        )
        if not (review.get("status") or {}).get("allowed"):
            raise ApiError(
                403,
                f"{caller.username} may not {verb} {RESOURCE}.{GROUP} in namespace {namespace}",
                code="permission_denied",
            )

    def caller(self, authorization: str | None, organization: str | None, verb: str) -> str:
        """Authenticate and authorize a user's call; the namespace it acts in."""
        caller = self.authenticate(authorization)
        namespace = namespace_of(caller, organization)
        self.authorize(caller, namespace, verb)
        return namespace

    def runner(self, authorization: str | None, namespace: str) -> None:
        """Allow a runner's call for a batch of ``namespace`` (see the module docstring)."""
        caller = self.authenticate(authorization)
        if caller.service_account_namespace != namespace:
            raise ApiError(
                403,
                f"only a ServiceAccount of namespace {namespace} may fetch or upload its "
                "batch's files",
                code="permission_denied",
            )

    def _create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.kube.create(path, body)
        except KubeError as exc:
            # The operator's own rights (tokenreviews/subjectaccessreviews create) missing,
            # or the API server unreachable: not the caller's fault.
            raise ApiError(503, f"cannot review the token: {exc}") from exc
