"""What every app's API module shares: parsing request bodies into documented types, and the error
responses the OpenAPI document describes."""

from __future__ import annotations

from typing import Any

from django.utils.cache import add_never_cache_headers
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.response import Response

from webapp.api.schema import BAD_REQUEST, FORBIDDEN, NOT_FOUND  # noqa: F401 (re-exported)
from webapp.projects import selectors
from webapp.projects.models import Project

VALIDATION_ERROR = BAD_REQUEST
# What a deletion answers (runs, projects): the rows go in the background (webapp/experiments/services/deletion.py).
DELETED = {
    202: OpenApiResponse(
        description="gone from every page and API now; its rows are freed in the background"
    ),
    400: VALIDATION_ERROR,
    403: FORBIDDEN,
    404: NOT_FOUND,
}


def parse(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """Coerce a request body (or query) to the documented types; errors come back by field name."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def project_detail(user, project: Project) -> Project:
    """The project with the counts and role annotations the project serializers read."""
    return selectors.project_list_with_role(user).get(pk=project.pk)


def secret_response(data: Any, status: int = 201) -> Response:
    """A reply that carries a token shown once: no cache (a proxy's, the browser's) may keep it."""
    response = Response(data, status=status)
    add_never_cache_headers(response)
    return response


class DownloadNegotiation(BaseContentNegotiation):
    """For endpoints that answer a file: the file whatever the `Accept` header says, errors as JSON, and
    `?format=` left to name the file's format (not a DRF renderer, as URL_FORMAT_OVERRIDE would)."""

    def select_parser(self, request, parsers):
        return parsers[0]

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type
