"""The routes the Tinker SDK (0.38) calls, under /api/v1/: thin — read the body, call a service, answer.

Errors are JSON bodies `{"detail": message}` with the status the SDK turns into its own exceptions (401:
`AuthenticationError`); a request that failed on the worker is a future answered with
`{"error": message, "category": ...}`, which the SDK raises as `RequestFailedError`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from webapp.tinker import services, transport, wire
from webapp.tinker.errors import TinkerRefusal

CLIENT_CONFIG = {
    # Chunks of one forward_backward are sent one after another, so they reach the worker in order.
    "parallel_fwdbwd_chunks": False,
    "proto_compress_fwdbwd": False,
    "use_pyqwest_transport": False,
    "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False,
}
# How long one retrieve_future poll waits for its answer (the SDK gives a poll 45 s), and how often the
# waiting checks that the answer can still come (its run did not end with the request queued). Each poll
# costs the dashboard a key check and a thread hop or two: on a loaded machine a 2 s poll during a 9 s
# sample was the biggest part of what the service added to a step (bench/tinker_overhead.py's profile).
RETRIEVE_WAIT_S = 20.0
UNANSWERABLE_CHECK_S = 5.0


def _json(request: HttpRequest) -> dict[str, Any]:
    if not request.body:
        return {}
    try:
        payload = json.loads(request.body)
    except ValueError as exc:
        raise TinkerRefusal(f"The body is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise TinkerRefusal("The body must be a JSON object.")
    return payload


def _refused(exc: TinkerRefusal) -> JsonResponse:
    return JsonResponse({"detail": str(exc)}, status=exc.status)


def endpoint(view: Callable[..., Any]) -> Callable[..., HttpResponse]:
    """Authenticate the SDK's key, run the view, turn a refusal into its JSON error."""

    @csrf_exempt
    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            user = services.authenticate(request.headers.get("X-API-Key"))
            answer = view(request, user, *args, **kwargs)
        except TinkerRefusal as exc:
            return _refused(exc)
        except wire.WireError as exc:
            return JsonResponse({"detail": str(exc)}, status=400)
        return answer if isinstance(answer, HttpResponse) else JsonResponse(answer)

    return wrapped


def _future(request_id: str, model_id: str | None = None) -> dict[str, Any]:
    return {"request_id": request_id, "model_id": model_id}


@csrf_exempt
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@endpoint
def client_config(request: HttpRequest, user: Any) -> dict[str, Any]:
    return CLIENT_CONFIG


@endpoint
def telemetry(request: HttpRequest, user: Any) -> dict[str, Any]:
    return {"status": "accepted"}


@endpoint
def server_capabilities(request: HttpRequest, user: Any) -> dict[str, Any]:
    return services.capabilities()


@endpoint
def create_session(request: HttpRequest, user: Any) -> dict[str, Any]:
    payload = _json(request)
    metadata = {**(payload.get("user_metadata") or {}), "display_name": payload.get("display_name")}
    session_id = services.session_create(user=user, project_id=payload.get("project_id"), metadata=metadata)
    return {"type": "create_session", "session_id": session_id}


@endpoint
def session_heartbeat(request: HttpRequest, user: Any) -> dict[str, Any]:
    services.session_heartbeat(user=user, session_id=str(_json(request).get("session_id", "")))
    return {"type": "session_heartbeat"}


@endpoint
def session_finish(request: HttpRequest, user: Any, session_id: str) -> HttpResponse:
    services.session_finish(user=user, session_id=session_id)
    return HttpResponse(status=204)


@endpoint
def create_model(request: HttpRequest, user: Any) -> dict[str, Any]:
    payload = _json(request)
    run, request_id = services.model_create(
        user=user,
        session_id=str(payload.get("session_id", "")),
        base_model=str(payload.get("base_model", "")),
        lora=payload.get("lora_config") or {},
        user_metadata=payload.get("user_metadata"),
    )
    return _future(request_id, services.model_id_of(run))


@endpoint
def get_info(request: HttpRequest, user: Any) -> dict[str, Any]:
    return services.model_info(user, str(_json(request).get("model_id", "")))


@endpoint
def forward_backward(request: HttpRequest, user: Any, forward_only: bool = False) -> dict[str, Any]:
    if wire.PROTOBUF in request.headers.get("Content-Type", ""):
        body = wire.decompress(request.body, request.headers.get("Content-Encoding", ""))
        decoded = wire.forward_backward_from_proto(body)
    else:
        decoded = wire.forward_backward_from_json(_json(request), forward_only=forward_only)
    request_id = services.model_request(
        user=user, model_id=decoded["model_id"], kind="forward_backward", body=decoded["body"]
    )
    return _future(request_id, decoded["model_id"])


def _model_call(
    kind: str, body_of: Callable[[dict[str, Any]], dict[str, Any]]
) -> Callable[..., HttpResponse]:
    def view(request: HttpRequest, user: Any) -> dict[str, Any]:
        payload = _json(request)
        model_id = str(payload.get("model_id", ""))
        body = body_of(payload)
        if kind == "save_weights_for_sampler" and not payload.get("path"):
            body["sampler_id"] = services.sampler_register(services.run_of_model(user, model_id))
        return _future(services.model_request(user=user, model_id=model_id, kind=kind, body=body), model_id)

    view.__name__ = kind
    return endpoint(view)


optim_step = _model_call(
    "optim_step",
    lambda p: {
        "adam_params": p.get("adam_params") or p.get("optim_params") or p.get("optimizer_params") or {}
    },
)
save_weights = _model_call("save_weights", lambda p: {"path": p.get("path")})
save_weights_for_sampler = _model_call("save_weights_for_sampler", lambda p: {"path": p.get("path")})


@endpoint
def load_weights(request: HttpRequest, user: Any) -> dict[str, Any]:
    """`load_state` of a client (`model_id`), or — with `session_id` and `model_seq_id` instead, as the
    SDK's `create_training_client_from_state[_with_optimizer]` sends it — a new client made from the
    checkpoint."""
    payload = _json(request)
    path, optimizer = str(payload.get("path") or ""), bool(payload.get("optimizer"))
    if payload.get("model_id"):
        model_id = str(payload["model_id"])
        return _future(
            services.model_load(user=user, model_id=model_id, path=path, optimizer=optimizer), model_id
        )
    session_id = str(payload.get("session_id") or "")
    run, request_id = services.model_create_from_state(
        user=user,
        session_id=session_id,
        model_seq_id=payload.get("model_seq_id"),
        path=path,
        optimizer=optimizer,
        base_model=payload.get("base_model"),
        user_metadata=payload.get("user_metadata"),
    )
    return _future(request_id, run.resolved_config["model_alias"])


@endpoint
def create_sampling_session(request: HttpRequest, user: Any) -> dict[str, Any]:
    payload = _json(request)
    session_id = services.sampling_session_create(
        user=user,
        session_id=str(payload.get("session_id") or ""),
        model_path=payload.get("model_path"),
        base_model=payload.get("base_model"),
    )
    return {"type": "create_sampling_session", "sampling_session_id": session_id}


@endpoint
def sampler(request: HttpRequest, user: Any, sampler_id: str) -> dict[str, Any]:
    """`GET /samplers/{id}`: the sampling client's base model and the path it was made from."""
    return services.sampler_info(user, sampler_id)


@endpoint
def asample(request: HttpRequest, user: Any) -> dict[str, Any]:
    payload = _json(request)
    num_samples = int(payload.get("num_samples", 1))
    body = {
        "prompt": wire.tokens_of_model_input(payload.get("prompt")),
        "num_samples": num_samples,
        "sampling_params": payload.get("sampling_params") or {},
        "prompt_logprobs": bool(payload.get("prompt_logprobs")),
        "model_path": payload.get("model_path"),
    }
    request_id = services.sample_request(
        user=user,
        session_id=payload.get("session_id"),
        sampling_session_id=payload.get("sampling_session_id"),
        body=body,
    )
    # One id per requested sample: the SDK stamps them on the sequences (and names them in later datums).
    return {
        **_future(request_id),
        "sample_sequence_ids": [f"{request_id}-{i}" for i in range(num_samples)],
    }


@csrf_exempt
async def retrieve_future(request: HttpRequest) -> HttpResponse:
    """The answer of a future: waits up to RETRIEVE_WAIT_S for it, else "try again" (the SDK polls
    again); a future whose run ended with it still queued answers why within UNANSWERABLE_CHECK_S."""
    try:
        await sync_to_async(services.authenticate)(request.headers.get("X-API-Key"))
        request_id = str(_json(request).get("request_id", ""))
    except TinkerRefusal as exc:
        return _refused(exc)
    waited, answer = 0.0, None
    while answer is None and waited < RETRIEVE_WAIT_S:
        answer = await transport.wait_answer(request_id, UNANSWERABLE_CHECK_S)
        waited += UNANSWERABLE_CHECK_S
        if answer is None and (message := await sync_to_async(services.unanswerable)(request_id)):
            return JsonResponse({"error": message, "category": "user"})
    if answer is None:
        return JsonResponse({"type": "try_again", "request_id": request_id, "queue_state": "active"})
    if "error" in answer:
        return JsonResponse({"error": answer["error"], "category": answer.get("category", "unknown")})
    return encoded(answer, wants_proto=wire.PROTOBUF in request.headers.get("Accept", ""))


def encoded(answer: dict[str, Any], *, wants_proto: bool) -> HttpResponse:
    kind, result = answer.get("kind"), answer["result"]
    if kind == "forward_backward":
        if wants_proto:
            return HttpResponse(wire.forward_backward_output_proto(result), content_type=wire.PROTOBUF)
        return JsonResponse(wire.forward_backward_output_json(result))
    if kind == "sample":
        if wants_proto:
            return HttpResponse(wire.sample_response_proto(result), content_type=wire.PROTOBUF)
        return JsonResponse(wire.sample_response_json(result))
    return JsonResponse({**result, "type": kind} if kind != "optim_step" else result)
