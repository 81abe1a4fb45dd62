"""The routes of the SDK's RestClient (`tinker/lib/public_interfaces/rest_client.py`, SDK 0.38): training
runs and their checkpoints, read from the runs and Checkpoint rows (webapp/tinker/selectors.py). Publishing,
TTLs and external-weights URLs answer 400 with a message the SDK shows: this server does not do them."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from webapp.projects.access import Capability
from webapp.tinker import selectors, services
from webapp.tinker.errors import NOT_SUPPORTED, TinkerRefusal
from webapp.tinker.views import _json, endpoint


def _method_not_allowed(request: HttpRequest, allowed: str) -> JsonResponse:
    return JsonResponse({"detail": f"{request.method} is not allowed here (only {allowed})."}, status=405)


@endpoint
def training_runs(request: HttpRequest, user: Any) -> Any:
    if request.method != "GET":
        return _method_not_allowed(request, "GET")
    query = request.GET
    return selectors.training_runs(user, query.get("limit"), query.get("offset"), query.get("project_id"))


@endpoint
def training_run(request: HttpRequest, user: Any, model_id: str) -> Any:
    if request.method != "GET":
        return _method_not_allowed(request, "GET")
    return selectors.training_run(user, model_id)


@endpoint
def run_checkpoints(request: HttpRequest, user: Any, model_id: str) -> Any:
    if request.method != "GET":
        return _method_not_allowed(request, "GET")
    return selectors.checkpoint_list(user, model_id)


def _checkpoint(request: HttpRequest, user: Any, model_id: str, checkpoint_id: str) -> Any:
    if request.method != "DELETE":
        return _method_not_allowed(request, "DELETE")
    services.checkpoint_delete(user=user, model_id=model_id, checkpoint_id=checkpoint_id)
    return HttpResponse(status=204)


checkpoint = endpoint(_checkpoint)


def _refuse(what: str, suffix: str):
    def view(request: HttpRequest, user: Any, model_id: str, checkpoint_id: str) -> Any:
        if "/" not in checkpoint_id:  # `weights/publish`: a checkpoint named like the route
            return _checkpoint(request, user, model_id, f"{checkpoint_id}/{suffix}")
        # The checkpoint must be one the user may see: a stranger's path stays a 404, as everywhere.
        selectors.run_of_model(user, model_id, Capability.READ)
        raise services.not_supported(what)

    view.__name__ = suffix
    return endpoint(view)


checkpoint_publish = _refuse("Publishing a checkpoint", "publish")
checkpoint_ttl = _refuse("A checkpoint TTL", "ttl")
external_weights_urls = _refuse("Download URLs of external weights", "external_weights_urls")


@endpoint
def user_checkpoints(request: HttpRequest, user: Any) -> Any:
    if request.method != "GET":
        return _method_not_allowed(request, "GET")
    return selectors.user_checkpoints(user, request.GET.get("limit"), request.GET.get("offset"))


@endpoint
def weights_info(request: HttpRequest, user: Any) -> Any:
    path = _json(request).get("tinker_path")
    if not isinstance(path, str):
        raise TinkerRefusal("weights_info needs a tinker_path.")
    return selectors.weights_info(user, path)


@endpoint
def unknown_route(request: HttpRequest, user: Any, route: str) -> Any:
    raise TinkerRefusal(f"{request.method} /api/v1/{route} {NOT_SUPPORTED}.", 404)
