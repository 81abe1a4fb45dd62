"""Health check, and the error handlers: pages get the product's error pages, everything under /api/
gets the JSON error body the API documents (`webapp.api.errors`), whatever failed — an unknown path, a
bad Host header, a crash."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import orjson
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.templatetags.static import static
from django.views import defaults

from webapp.api.errors import error_body

log = logging.getLogger(__name__)


def redis_ping(timeout_s: float = 2.0) -> None:
    """Raise unless Redis (the broker and the channel layer) answers a PING within `timeout_s`."""
    import redis

    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
    )
    try:
        client.ping()
    finally:
        client.close()


def healthz(request):
    """Health for load balancers and compose health checks: the database and Redis answer. 200 with
    {"ok": true, "database": "ok", "redis": "ok"}, or 503 naming the part that did not answer."""
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except DatabaseError as exc:
        checks["database"] = f"unreachable: {type(exc).__name__}"
    try:
        redis_ping()
        checks["redis"] = "ok"
    except Exception as exc:  # redis' ConnectionError, a DNS failure, a timeout: all "unreachable"
        checks["redis"] = f"unreachable: {type(exc).__name__}"
    ok = all(value == "ok" for value in checks.values())
    return JsonResponse({"ok": ok, **checks}, status=200 if ok else 503)


def flash_job_cancel(request: HttpRequest, job: Any, cancel: Callable[[], str]) -> None:
    """Cancel a background job (`cancel`: its service, `webapp.core.jobs.job_request_cancel` underneath) and
    say on the next page what happened: cancelled at once, asked to stop, or why it cannot be."""
    from django.contrib import messages
    from django.core.exceptions import ValidationError

    from webapp.core.jobs import CANCEL_REQUESTED

    try:
        outcome = cancel()
    except ValidationError as error:
        for message in error.messages:
            messages.error(request, message)
        return
    if outcome == CANCEL_REQUESTED:
        messages.success(request, f"{job.label} asked to stop; its worker stops it within seconds.")
    else:
        messages.success(request, f"{job.label} cancelled.")


def flash_job_queued(request: HttpRequest, job: Any, *, queue: str, queued: str) -> None:
    """Say on the next page that a background job was asked for: `queued` (its own words) when the broker
    took its task, else that it waits for the broker (`BackgroundJob.dispatch_pending`: the task id is
    recorded after commit, so it is read again here)."""
    from django.contrib import messages

    from webapp.core.dispatch import DISPATCH_PENDING_PERIOD_S

    job.refresh_from_db(fields=["task_id"])
    if job.dispatch_pending():
        messages.warning(
            request,
            f"{job.label} is saved, but Redis could not take it yet: it is sent to the {queue} workers "
            f"within about {DISPATCH_PENDING_PERIOD_S} s of Redis answering again; no need to ask again.",
        )
    else:
        messages.success(request, queued)


def json_bytes_response(body: dict[str, Any]) -> HttpResponse:
    """`body` as JSON through orjson: a long run's curves (25 keys × 2,000 points, 1.3 MB) took ~35 ms
    in Python's json (JsonResponse, DRF's JSONRenderer) on an idle machine, 2 ms here. No NaN or
    infinity reaches it (ingestion refuses them); orjson would write null. numpy's scalars pass too (the
    curves are downsampled as arrays): plain orjson refuses a stray numpy.float64."""
    return HttpResponse(
        orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), content_type="application/json"
    )


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


def part_unavailable(exc: BaseException | None) -> str | None:
    """Which part of the deployment an unhandled exception says is down ("database", "redis"), or None
    when it is a fault of the request or of our code."""
    import kombu.exceptions
    import redis.exceptions

    if isinstance(exc, OperationalError | InterfaceError):  # no connection, connection lost, read-only
        return "database"
    if isinstance(
        exc,
        redis.exceptions.ConnectionError | redis.exceptions.TimeoutError | kombu.exceptions.OperationalError,
    ):
        return "redis"
    return None


def server_error(request: HttpRequest) -> HttpResponse:
    # Called by Django inside its handler of the unhandled exception: sys.exc_info() is that exception.
    part = part_unavailable(sys.exc_info()[1])
    if part is not None:
        # Postgres or Redis is down (restarting, unreachable): a temporary 503 that clients retry, the
        # same JSON body for pages' scripts and the API, no internals.
        response = JsonResponse(
            error_body(
                "service_unavailable",
                f"The {part} is not answering; try again in a moment.",
            ),
            status=503,
        )
        response["Retry-After"] = "5"
        return response
    if is_api(request):
        # The traceback goes to the log (Django logs it before calling this); the client gets no internals.
        return JsonResponse(
            error_body("server_error", "The server failed to answer this request; it has been logged."),
            status=500,
        )
    return defaults.server_error(request)
