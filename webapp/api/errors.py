"""Every API error is a JSON body that says what is wrong, field by field where it can.

Shapes:
- `{"error": "validation_failed", "detail": …, "fields": {"config.max_turns": [messages], …}}` — field
  paths are dotted (list items by index: `criteria.1.weight`); errors about the body as a whole are
  under `non_field_errors`;
- `{"error": "malformed_json", "detail": …}` for a body that is not JSON;
- `{"error": <code>, "detail": …}` otherwise (not_authenticated, authentication_failed, forbidden,
  not_found, method_not_allowed, unsupported_media_type, …).
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


def _validation_body(fields: dict[str, list[str]]) -> dict[str, Any]:
    return {"error": "validation_failed", "detail": "The request has invalid fields.", "fields": fields}


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
            for sub_path, messages in flatten_errors(item, f"{prefix}.{index}" if prefix else str(index)).items():
                flat.setdefault(sub_path, []).extend(messages)
        return flat
    return {prefix or NON_FIELD: [str(detail)]}


def validation_error_body(exc: DjangoValidationError) -> dict[str, Any]:
    if hasattr(exc, "error_dict"):
        fields = {(field or NON_FIELD): [m for e in errors for m in e.messages] for field, errors in exc.error_dict.items()}
    else:
        fields = {NON_FIELD: exc.messages}
    return _validation_body(fields)


def json_exception_handler(exc, context):
    if isinstance(exc, DjangoValidationError):
        return Response(validation_error_body(exc), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, Http404):
        return Response({"error": "not_found", "detail": str(exc) or "Not found."}, status=404)
    if isinstance(exc, PermissionDenied):
        return Response({"error": "forbidden", "detail": str(exc) or "Forbidden."}, status=403)
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = _validation_body(flatten_errors(exc.detail))
    elif isinstance(exc, exceptions.ParseError):
        response.data = {"error": "malformed_json", "detail": str(exc.detail)}
    else:
        detail = response.data.get("detail", "") if isinstance(response.data, dict) else response.data
        response.data = {"error": getattr(exc, "default_code", "error"), "detail": str(detail)}
    return response
