"""Every API error is a JSON body that says what is wrong, field by field where it can.

Shapes:
- `{"error": "validation_failed", "detail": …, "fields": {"config.max_turns": [messages], …}}` — field
  paths are dotted (list items by index: `criteria.1.weight`); errors about the body as a whole are
  under `non_field_errors`;
- `{"error": "malformed_json", "detail": …}` for a body that is not JSON;
- `{"error": "body_too_large", "detail": …, "max_bytes": N}` (413) for a body over `API_MAX_BODY_BYTES`;
- `{"error": <code>, "detail": …}` otherwise (not_authenticated, authentication_failed, forbidden,
  not_found, method_not_allowed, unsupported_media_type, throttled, server_error…).

Outside DRF's views (an unknown path under /api/, a crash) `webapp.core.views` answers with the same
shapes, through `error_body`.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

NON_FIELD = "non_field_errors"


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "body_too_large"
    default_detail = "The request body is too large."

    def __init__(self, max_bytes: int):
        super().__init__(f"A request body may be at most {max_bytes} bytes.")
        self.max_bytes = max_bytes


def error_body(error: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"error": error, "detail": detail, **extra}


def _validation_body(fields: dict[str, list[str]]) -> dict[str, Any]:
    return error_body("validation_failed", "The request has invalid fields.", fields=fields)


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail → {dotted path: [messages]}."""
    if isinstance(detail, dict):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            path = str(key) if not prefix or key == NON_FIELD else f"{prefix}.{key}"
            for sub_path, messages in flatten_errors(value, path).items():
                flat.setdefault(sub_path, []).extend(messages)
        return flat
    if isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            return {prefix or NON_FIELD: [str(item) for item in detail]} if detail else {}
        flat = {}
        for index, item in enumerate(detail):
            for sub_path, messages in flatten_errors(
                item, f"{prefix}.{index}" if prefix else str(index)
            ).items():
                flat.setdefault(sub_path, []).extend(messages)
        return flat
    return {prefix or NON_FIELD: [str(detail)]}


def validation_error_body(exc: DjangoValidationError) -> dict[str, Any]:
    if hasattr(exc, "error_dict"):
        fields = {
            (field or NON_FIELD): [m for e in errors for m in e.messages]
            for field, errors in exc.error_dict.items()
        }
    else:
        fields = {NON_FIELD: exc.messages}
    return _validation_body(fields)


def json_exception_handler(exc, context):
    if isinstance(exc, DjangoValidationError):
        return Response(validation_error_body(exc), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, Http404):
        return Response(error_body("not_found", str(exc) or "Not found."), status=404)
    if isinstance(exc, PermissionDenied):
        return Response(error_body("forbidden", str(exc) or "Forbidden."), status=403)
    response = exception_handler(exc, context)
    if response is None:
        return None  # a crash: Django's handler500 answers (JSON under /api/, see webapp.core.views)
    if isinstance(exc, exceptions.ValidationError):
        response.data = _validation_body(flatten_errors(exc.detail))
    elif isinstance(exc, exceptions.ParseError):
        response.data = error_body("malformed_json", str(exc.detail))
    elif isinstance(exc, BodyTooLarge):
        response.data = error_body(exc.default_code, str(exc.detail), max_bytes=exc.max_bytes)
    else:
        detail = response.data.get("detail", "") if isinstance(response.data, dict) else response.data
        response.data = error_body(getattr(exc, "default_code", "error"), str(detail))
    return response
