"""Lists: `{count, next, previous, results}` pages chosen with `?limit=` and `?offset=`. Out-of-range or
non-integer values are a 400 on `limit` / `offset` (DRF's own paginator would fall back silently, or pass
an offset past 2**63 to the database); they are checked after the list's project or run is resolved, so an
outsider still gets the 404 first."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.pagination import LimitOffsetPagination

from trainers.sdk.wire import INT32_MAX

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_OFFSET = INT32_MAX


class PageQuerySerializer(serializers.Serializer):
    limit = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_LIMIT, help_text=f"rows per page (default {DEFAULT_LIMIT})"
    )
    offset = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_OFFSET, help_text="rows to skip"
    )


class Pagination(LimitOffsetPagination):
    default_limit = DEFAULT_LIMIT
    max_limit = MAX_LIMIT

    def _query(self, request) -> dict[str, Any]:
        names = (self.limit_query_param, self.offset_query_param)
        present = {name: request.query_params[name] for name in names if name in request.query_params}
        serializer = PageQuerySerializer(data=present)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    def get_limit(self, request) -> int:
        return self._query(request).get("limit", self.default_limit)

    def get_offset(self, request) -> int:
        return self._query(request).get("offset", 0)

    def get_schema_operation_parameters(self, view) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
            self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET, "default": 0},
        }
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters
