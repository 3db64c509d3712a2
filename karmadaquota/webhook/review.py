"""AdmissionReview v1: parse what the API server sends, build what it expects back.

A review that is not a well-formed `admission.k8s.io/v1` AdmissionReview is a caller bug and
gets HTTP 400 with a precise message (`MalformedReview`); a well-formed review always gets a
200 whose response allows or denies.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from karmadaquota.api import describe
from karmadaquota.kube.paths import label_errors, subdomain_errors
from karmadaquota.trust import UserInfo

ADMISSION_API_VERSION = "admission.k8s.io/v1"


class MalformedReview(ValueError):
    """The body is not an AdmissionReview we can answer: answered with HTTP 400."""


def expect(
    req: Request, group: str, plurals: Collection[str], what: str, verb: str = "admits"
) -> None:
    """Refuse (400) a review of a resource this endpoint does not decide: `what` names the
    resources it does."""
    if req.resource.group != group or req.resource.resource not in plurals:
        raise MalformedReview(
            f"this endpoint {verb} {what}, got {req.resource.resource}.{req.resource.group}"
        )


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class GroupVersionResource(_Model):
    group: str = ""
    version: str
    resource: str


class Request(_Model):
    uid: str = Field(min_length=1)
    resource: GroupVersionResource
    subResource: str = ""
    namespace: str = ""
    name: str = ""
    operation: str
    object: dict[str, Any] | None = None
    oldObject: dict[str, Any] | None = None
    dryRun: bool = False
    # the authenticated caller, as karmadaquota.trust reads it
    userInfo: UserInfo = Field(default_factory=UserInfo)


class AdmissionReview(_Model):
    apiVersion: str
    kind: str
    request: Request


def parse(body: bytes) -> Request:
    """The review's request, or MalformedReview saying exactly what is wrong.

    `object` and `oldObject` (the bulk of a review) are checked to be JSON objects but not
    copied through the model: the handler reads only the few fields a charge needs."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise MalformedReview(f"request body is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise MalformedReview("request body must be a JSON object (an AdmissionReview)")
    if doc.get("apiVersion") != ADMISSION_API_VERSION or doc.get("kind") != "AdmissionReview":
        raise MalformedReview(
            f"expected apiVersion {ADMISSION_API_VERSION} kind AdmissionReview, got "
            f"apiVersion {doc.get('apiVersion')!r} kind {doc.get('kind')!r}"
        )
    raw = doc.get("request")
    objects: dict[str, dict[str, Any] | None] = {}
    if isinstance(raw, dict):
        for key in ("object", "oldObject"):
            value = raw.get(key)
            if value is not None and not isinstance(value, dict):
                raise MalformedReview(
                    f"invalid AdmissionReview: request.{key}: Input should be a valid dictionary"
                )
            objects[key] = value
        doc["request"] = {k: v for k, v in raw.items() if k not in objects}
    try:
        request = AdmissionReview.model_validate(doc).request
    except ValidationError as e:
        raise MalformedReview(f"invalid AdmissionReview: {describe(e)}") from None
    request.object = objects.get("object")
    request.oldObject = objects.get("oldObject")
    check_names(request)
    return request


def check_names(request: Request) -> None:
    """A namespace or name no object can have is refused before it reaches a URL: a forged
    review's `../` or `?` must not aim a request elsewhere (kube.paths checks again)."""
    errors = []
    if request.namespace:
        errors += [f"request.namespace: {e}" for e in label_errors(request.namespace)]
    if request.name:
        errors += [f"request.name: {e}" for e in subdomain_errors(request.name)]
    if errors:
        raise MalformedReview(f"invalid AdmissionReview: {'; '.join(errors)}")


def response(
    uid: str,
    allowed: bool,
    message: str = "",
    reason: str = "",
    code: int = 403,
    warnings: list[str] | None = None,
) -> dict[str, Any]:
    """An AdmissionReview response; denials carry a metav1.Status with code and reason."""
    resp: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        resp["status"] = {"code": code, "reason": reason, "message": message}
    if warnings:
        resp["warnings"] = warnings
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": resp}


def dump(review: dict[str, Any]) -> bytes:
    """The JSON body of a response review."""
    return orjson.dumps(review)
