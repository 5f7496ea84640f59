"""The OpenAPI description of the API: drf-spectacular's, plus the error answers every operation
can give (so a client, or a tool such as schemathesis, knows a 400 is a documented answer)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class ErrorSerializer(serializers.Serializer):  # type: ignore[type-arg]
    detail = serializers.CharField(help_text="What is wrong.")


ERRORS = {
    "400": OpenApiResponse(
        OpenApiTypes.OBJECT,
        description="Bad input: each field name maps to a list of messages; `detail` says what "
        "is wrong with the request as a whole.",
    ),
    "401": OpenApiResponse(ErrorSerializer, description="Not authenticated."),
    "403": OpenApiResponse(
        ErrorSerializer, description="Not authenticated, or lacks the permission."
    ),
    "404": OpenApiResponse(ErrorSerializer, description="No such object."),
    "405": OpenApiResponse(ErrorSerializer, description="Method not allowed."),
    "406": OpenApiResponse(ErrorSerializer, description="No acceptable representation."),
    "415": OpenApiResponse(ErrorSerializer, description="Unsupported media type."),
}


class ClusterCronSchema(AutoSchema):
    def _get_response_bodies(self, direction: Any = "response") -> Any:
        responses = super()._get_response_bodies(direction)
        for code, response in ERRORS.items():
            if code not in responses:
                responses[code] = self._get_response_for_code(response, code)  # type: ignore[no-untyped-call]
        return responses


# The short answers of operator actions (see the views' ``job_reply``/``run_reply``).
STATE_FORMS = ("JobState", "RunState")


def close_state_forms(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A post-processing hook: the short forms of a job and a run allow no other property, so
    that a whole job or run matches exactly one form of the ``oneOf`` an action answers."""
    schemas = result.get("components", {}).get("schemas", {})
    for name in STATE_FORMS:
        if name in schemas:
            schemas[name]["additionalProperties"] = False
    return result
