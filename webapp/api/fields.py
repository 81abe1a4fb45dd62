"""Input fields that state the limits the API enforces, so the OpenAPI document (generated from the
serializers) says exactly what is accepted: ids fit a 64-bit column, counts a 32-bit one, names and texts
have the length their column or service allows."""

from __future__ import annotations

from typing import Any

from django.db.models import Model
from rest_framework import serializers

from trainers.sdk.wire import INT32_MAX, INT64_MAX
from webapp.core.limits import DESCRIPTION_MAX_CHARS


def object_id(**kwargs: Any) -> serializers.IntegerField:
    """The id of a row (a 64-bit auto field)."""
    return serializers.IntegerField(min_value=1, max_value=INT64_MAX, **kwargs)


def count(**kwargs: Any) -> serializers.IntegerField:
    """A step, an index or a count stored in a PositiveIntegerField (a signed 32-bit column)."""
    kwargs.setdefault("min_value", 0)
    return serializers.IntegerField(max_value=INT32_MAX, **kwargs)


def column_length(model: type[Model], field: str) -> int:
    return model._meta.get_field(field).max_length


def name(model: type[Model], field: str = "name", **kwargs: Any) -> serializers.CharField:
    """A required, non-blank name as long as its column allows (leading/trailing spaces are trimmed)."""
    return serializers.CharField(max_length=column_length(model, field), **kwargs)


def description(**kwargs: Any) -> serializers.CharField:
    kwargs.setdefault("default", "")
    return serializers.CharField(allow_blank=True, max_length=DESCRIPTION_MAX_CHARS, **kwargs)
