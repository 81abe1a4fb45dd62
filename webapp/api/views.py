"""The answer for a path under /api/ that names no endpoint: a JSON 404 (never Django's HTML page, never a
redirect that drops a POST's body), with a hint when the same path with or without its trailing slash is
an endpoint."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt

from webapp.api.errors import error_body

NOT_FOUND_NAME = "not-found"


def _other_spelling(path: str) -> str | None:
    """The path with its trailing slash toggled, when that one is an endpoint."""
    other = path[:-1] if path.endswith("/") else f"{path}/"
    try:
        match = resolve(other)
    except Resolver404:
        return None
    return None if match.url_name == NOT_FOUND_NAME else other


@csrf_exempt
def api_not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    detail = f"No API endpoint at {request.path}."
    other = _other_spelling(request.path_info)
    if other is not None:
        detail += f" Did you mean {request.META.get('SCRIPT_NAME', '')}{other}?"
    return JsonResponse(error_body("not_found", detail), status=404)
