"""API serializers: output shapes, and input shapes that only coerce types (the services hold the rules)."""

from __future__ import annotations

from rest_framework import serializers


def username_field(source: str = "created_by.username") -> serializers.CharField:
    return serializers.CharField(source=source, read_only=True, allow_null=True, default=None)


# --- errors (documentation of the envelope `webapp.api.errors` writes) ---------------------------

ERROR_CODES = (
    "validation_failed",
    "malformed_json",
    "bad_request",
    "not_authenticated",
    "authentication_failed",
    "permission_denied",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "unsupported_media_type",
    "body_too_large",
    "throttled",
    "conflict",
    "server_error",
    # the ingestion endpoint's own (docs/api.md, "Run event ingestion")
    "unauthorized",
    "batch_too_large",
    "overloaded",
)


class ErrorSerializer(serializers.Serializer):
    error = serializers.ChoiceField(choices=ERROR_CODES, help_text="machine-readable code")
    detail = serializers.CharField(help_text="what went wrong, in words")


class BadRequestSerializer(ErrorSerializer):
    """400: `validation_failed` with `fields`, or `malformed_json` (the body is not JSON) without."""

    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="dotted field path (e.g. config.max_turns, criteria.1.weight) → messages; "
        "`non_field_errors` for the body as a whole",
    )


class ValidationErrorSerializer(ErrorSerializer):
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="dotted field path (e.g. config.max_turns, criteria.1.weight) → messages",
    )


class BodyTooLargeSerializer(ErrorSerializer):
    max_bytes = serializers.IntegerField(required=False, help_text="the largest body accepted")
    max_events = serializers.IntegerField(required=False, help_text="ingestion: the most events per batch")
