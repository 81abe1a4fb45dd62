"""Health check, and the error handlers: pages get the product's error pages, everything under /api/
gets the JSON error body the API documents (`webapp.api.errors`), whatever failed — an unknown path, a
bad Host header, a crash."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.templatetags.static import static
from django.views import defaults

from webapp.api.errors import error_body


def healthz(request):
    """Liveness for load balancers and compose health checks: the database answers."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"ok": True})


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers and tools still ask for /favicon.ico: send them to the static icon (the pages link it)."""
    return HttpResponsePermanentRedirect(static("img/favicon.ico"))


def is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith("/api/")


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return JsonResponse(error_body("bad_request", "The request could not be read."), status=400)
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return JsonResponse(error_body("forbidden", str(exception) or "Forbidden."), status=403)
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if is_api(request):
        # The traceback goes to the log (Django logs it before calling this); the client gets no internals.
        return JsonResponse(
            error_body("server_error", "The server failed to answer this request; it has been logged."),
            status=500,
        )
    return defaults.server_error(request)
