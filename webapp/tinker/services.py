"""The Tinker-compatible service's rules: who may call it, sessions, training clients as runs, requests.

A training client is a Run of kind `tinker` (queued like every run, on the `cpu` or `gpu` queue): its
worker loads the model and answers the client's requests in order (workers/tinker_execution.py). The
SDK's API key is a personal API token of this deployment written `tml-<token>` (the SDK refuses keys
without that prefix); the token's user must be allowed to launch runs in the session's project.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.accounts.authentication import USER_TOKEN_PREFIX
from webapp.accounts.models import ApiToken, hash_token
from webapp.core.dispatch import queue_refusal
from webapp.experiments.models import FINAL_STATUSES, Run, RunKind, RunStatus
from webapp.experiments.services.runs import launched
from webapp.projects.access import Capability, can
from webapp.projects.models import Project
from webapp.tinker import transport

SDK_KEY_PREFIX = "tml-"
MODEL_ID_PREFIX = "rs-run-"
MAX_DATUMS = 4096
MAX_LORA_RANK = 256


class TinkerRefusal(Exception):
    """A request refused with a message the SDK shows: 401 for the key, 400/404 for the rest."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def sdk_key(raw_token: str) -> str:
    """What a personal token is as the SDK's TINKER_API_KEY."""
    return f"{SDK_KEY_PREFIX}{raw_token}"


def authenticate(api_key: str | None) -> Any:
    """The user whose personal token the key carries; refused (401) when missing, wrong or revoked."""
    if not api_key:
        raise TinkerRefusal("Missing X-API-Key: set TINKER_API_KEY to tml-<your personal API token>.", 401)
    raw = api_key.removeprefix(SDK_KEY_PREFIX)
    if not raw.startswith(USER_TOKEN_PREFIX):
        raise TinkerRefusal("Not an API key of this deployment: use tml-<your personal token (rsu_…)>.", 401)
    token = (
        ApiToken.objects.select_related("user").filter(token_hash=hash_token(raw), revoked_at=None).first()
    )
    if token is None or not token.user.is_active:
        raise TinkerRefusal("Invalid or revoked API key.", 401)
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user


def offered_models() -> dict[str, str]:
    """The models clients may name → what our loader loads (trainers.models): TINKER_MODELS."""
    return dict(settings.TINKER_MODELS)


def capabilities() -> dict[str, Any]:
    return {
        "supported_models": [
            {"model_name": name, "trainable": True, "sampleable": True, "max_context_length": 8192}
            for name in offered_models()
        ]
    }


def _project_for(user: Any, project_id: str | None) -> Project:
    if project_id:
        project = Project.objects.filter(slug=project_id).first()
        if project is None or not can(user, project, Capability.LAUNCH):
            raise TinkerRefusal(f"No project {project_id!r} where you may launch runs.", 404)
        return project
    for project in Project.objects.filter(memberships__user=user).order_by("pk"):
        if can(user, project, Capability.LAUNCH):
            return project
    raise TinkerRefusal("You may launch runs in no project: ask an owner for the researcher role.", 403)


def session_create(*, user: Any, project_id: str | None, metadata: dict[str, Any]) -> str:
    project = _project_for(user, project_id)
    session_id = f"rs-session-{uuid.uuid4().hex[:16]}"
    name = str(metadata.get("display_name") or "")[:80]
    transport.put_json(
        transport.session_key(session_id), {"user": user.pk, "project": project.pk, "name": name}
    )
    transport.beat(session_id)
    return session_id


def session_of(user: Any, session_id: str) -> dict[str, Any]:
    session = transport.get_json(transport.session_key(session_id))
    if not session or session["user"] != user.pk:
        raise TinkerRefusal(f"No session {session_id!r} of yours.", 404)
    return session


def session_heartbeat(*, user: Any, session_id: str) -> None:
    session_of(user, session_id)
    transport.beat(session_id)


def session_finish(*, user: Any, session_id: str) -> None:
    session_of(user, session_id)
    transport.end_session(session_id)


@transaction.atomic
def model_create(*, user: Any, session_id: str, base_model: str, lora: dict[str, Any]) -> tuple[Run, str]:
    """A run of kind tinker for a new LoRA training client, queued; the future of its `create_model`,
    answered by the worker once the model is loaded."""
    session = session_of(user, session_id)
    models = offered_models()
    if base_model not in models:
        raise TinkerRefusal(f"Unknown base_model {base_model!r}: this deployment offers {', '.join(models)}.")
    rank = int(lora.get("rank") or 32)
    if not 1 <= rank <= MAX_LORA_RANK:
        raise TinkerRefusal(f"LoRA rank must be between 1 and {MAX_LORA_RANK} (got {rank}).")
    queue = settings.TINKER_QUEUE
    if refusal := queue_refusal(queue):
        raise TinkerRefusal(refusal)
    project = Project.objects.get(pk=session["project"])
    spec = {
        "rank": rank,
        "train_attn": bool(lora.get("train_attn", True)),
        "train_mlp": bool(lora.get("train_mlp", True)),
        "seed": lora.get("seed"),
    }
    run = Run.objects.create(
        project=project,
        name=session["name"] or f"tinker · {base_model} · LoRA r{rank}",
        created_by=user,
        kind=RunKind.TINKER,
        preset="tinker",
        resolved_config={
            "kind": "tinker",
            "model": models[base_model],
            "base_model": base_model,
            "lora": spec,
            "session_id": session_id,
        },
        queue=queue,
    )
    launched(run, user=user, dispatch=True)
    request_id = transport.new_request_id()
    transaction.on_commit(lambda: _queue_create(run.pk, request_id))
    return run, request_id


def _queue_create(run_id: int, request_id: str) -> None:
    conn = transport.client()
    conn.set(transport.request_run_key(request_id), run_id, ex=transport.ANSWER_TTL_S)
    import json

    conn.rpush(
        transport.requests_key(run_id),
        json.dumps({"request_id": request_id, "kind": "create_model", "body": {}}),
    )


def model_id_of(run: Run) -> str:
    return f"{MODEL_ID_PREFIX}{run.pk}"


def run_of_model(user: Any, model_id: str) -> Run:
    run_id = model_id.removeprefix(MODEL_ID_PREFIX).split("/")[0]
    run = Run.objects.filter(pk=int(run_id), kind=RunKind.TINKER).first() if run_id.isdigit() else None
    if run is None or not can(user, run.project, Capability.LAUNCH):
        raise TinkerRefusal(f"No training client {model_id!r} of yours.", 404)
    return run


def ended_message(run: Run) -> str | None:
    """Why the run's client can send nothing more, or None while it can."""
    if run.cancel_requested or run.status == RunStatus.CANCELLED:
        return f"Run #{run.pk} was cancelled in the dashboard: this training client takes no more requests."
    if run.status in FINAL_STATUSES:
        why = f" ({run.error_message.splitlines()[0]})" if run.error_message else ""
        return f"Run #{run.pk} has ended ({run.status}{why}): this training client takes no more requests."
    return None


def model_request(*, user: Any, model_id: str, kind: str, body: dict[str, Any]) -> str:
    """Queue one request of a training client for its worker; the future the SDK polls. A run that
    ended answers at once with why (a cancel in the dashboard says so)."""
    run = run_of_model(user, model_id)
    if len(body.get("data") or []) > MAX_DATUMS:
        raise TinkerRefusal(f"At most {MAX_DATUMS} datums in one request.")
    if message := ended_message(run):
        return transport.answered(transport.new_request_id(), {"error": message, "category": "user"})
    session_id = run.resolved_config.get("session_id")
    if session_id:
        transport.beat(session_id)
    return transport.put_request(run.pk, kind, body)


def model_info(user: Any, model_id: str) -> dict[str, Any]:
    run = run_of_model(user, model_id)
    config = run.resolved_config
    info = transport.get_json(transport.model_info_key(run.pk)) or {}
    return {
        "type": "get_info",
        "model_id": model_id,
        "model_data": {
            "arch": "llama",
            "model_name": config["base_model"],
            "tokenizer_id": info.get("tokenizer_id"),
        },
        "is_lora": True,
        "lora_rank": config["lora"]["rank"],
        "model_name": config["base_model"],
    }


def sampler_register(run: Run) -> str:
    """A sampling session id for the weights a `save_weights_for_sampler` is about to freeze."""
    sampler_id = f"{model_id_of(run)}/sampler/{uuid.uuid4().hex[:12]}"
    transport.put_json(transport.sampler_key(sampler_id), {"run": run.pk, "sampler_id": sampler_id})
    return sampler_id


def sampling_session_create(*, user: Any, model_path: str | None, base_model: str | None) -> str:
    """A sampling client on saved weights (`tinker://rs-run-N/sampler_weights/name`) or a base model;
    base-model sampling goes to one of your live training clients of that model, adapters included."""
    if model_path:
        if not model_path.startswith(f"tinker://{MODEL_ID_PREFIX}"):
            raise TinkerRefusal(
                f"Unknown model_path {model_path!r}: expected tinker://{MODEL_ID_PREFIX}<n>/….", 404
            )
        run = run_of_model(user, model_path.removeprefix("tinker://"))
        transport.put_json(transport.sampler_key(model_path), {"run": run.pk, "sampler_id": model_path})
        return model_path
    raise TinkerRefusal(
        "Sampling a base model without a training client is not supported by this service: create a "
        "LoRA training client and use save_weights_and_get_sampling_client().",
    )


def sample_request(*, user: Any, sampling_session_id: str | None, body: dict[str, Any]) -> str:
    sampler = (
        transport.get_json(transport.sampler_key(sampling_session_id or "")) if sampling_session_id else None
    )
    if not sampler and body.get("model_path"):
        sampling_session_id = sampling_session_create(
            user=user, model_path=body["model_path"], base_model=None
        )
        sampler = transport.get_json(transport.sampler_key(sampling_session_id))
    if not sampler:
        raise TinkerRefusal(f"No sampling session {sampling_session_id!r}.", 404)
    run = Run.objects.filter(pk=sampler["run"]).first()
    if run is None:
        raise TinkerRefusal(f"No sampling session {sampling_session_id!r}.", 404)
    return model_request(
        user=user,
        model_id=model_id_of(run),
        kind="sample",
        body={**body, "sampler_id": sampler["sampler_id"]},
    )


def unanswerable(request_id: str) -> str | None:
    """Why a future will never be answered (its run ended with it still queued), or None."""
    run_id = transport.run_of_request(request_id)
    run = Run.objects.filter(pk=run_id).first() if run_id else None
    if run is None:
        return f"Unknown future {request_id!r}." if run_id is None else None
    return ended_message(run) if run.status in FINAL_STATUSES else None
