"""The Tinker-compatible service's rules: who may call it, sessions, training clients as runs, requests.

A training client is a Run of kind `tinker` (queued like every run, on the `cpu` or `gpu` queue): its
worker loads the model and answers the client's requests in order (workers/tinker_execution.py). The
SDK's API key is a personal API token of this deployment written `tml-<token>` (the SDK refuses keys
without that prefix); the token's user must be allowed to launch runs in the session's project.
"""

from __future__ import annotations

import shutil
import uuid
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from trainers.tinker import paths
from webapp.accounts.authentication import USER_TOKEN_PREFIX
from webapp.accounts.models import ApiToken, hash_token
from webapp.core.dispatch import queue_refusal
from webapp.experiments.models import FINAL_STATUSES, Checkpoint, Run, RunKind, RunStatus
from webapp.experiments.services.runs import launched
from webapp.projects.access import Capability, can
from webapp.projects.models import Project
from webapp.tinker import selectors, transport
from webapp.tinker.errors import NOT_SUPPORTED, TinkerRefusal
from webapp.tinker.selectors import run_of_model

__all__ = ["TinkerRefusal", "run_of_model"]

SDK_KEY_PREFIX = "tml-"
MAX_DATUMS = 4096
MAX_LORA_RANK = 256


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


def session_gone(session_id: str) -> str | None:
    """Why a session is over — every training run it made has ended (cancelled, lost, finished) — or
    None while one is live or it has made none yet."""
    runs = list(selectors.session_runs(session_id)[:50])
    messages = [ended_message(run) for run in runs]
    if not runs or not all(messages):
        return None
    return f"Session {session_id} is over: {messages[0]} Start a new ServiceClient to go on."


def session_open(user: Any, session_id: str) -> dict[str, Any]:
    """The session, refused with 410 (what the SDK takes for "this session has finished") once it is
    over: a heartbeat or a new client does not bring it back."""
    session = session_of(user, session_id)
    if message := session_gone(session_id):
        raise TinkerRefusal(message, 410)
    return session


def session_heartbeat(*, user: Any, session_id: str) -> None:
    session_open(user, session_id)
    transport.beat(session_id)


def session_finish(*, user: Any, session_id: str) -> None:
    session_of(user, session_id)
    transport.end_session(session_id)


def _lora_spec(lora: dict[str, Any]) -> dict[str, Any]:
    rank = int(lora.get("rank") or 32)
    if not 1 <= rank <= MAX_LORA_RANK:
        raise TinkerRefusal(f"LoRA rank must be between 1 and {MAX_LORA_RANK} (got {rank}).")
    return {
        "rank": rank,
        "train_attn": bool(lora.get("train_attn", True)),
        "train_mlp": bool(lora.get("train_mlp", True)),
        "seed": lora.get("seed"),
    }


def _metadata(user_metadata: Any) -> dict[str, str]:
    if not isinstance(user_metadata, dict):
        return {}
    return {str(k)[:100]: str(v)[:500] for k, v in list(user_metadata.items())[:50]}


def _training_run_create(
    *,
    user: Any,
    session_id: str,
    base_model: str,
    model: str,
    lora: dict[str, Any],
    name: str = "",
    **extra: Any,
) -> Run:
    """A queued run of kind tinker for a new client of the session (its model loads on a worker): a
    training client, or a sampling client's when `extra` has `sampler`."""
    session = session_open(user, session_id)
    queue = settings.TINKER_QUEUE
    if refusal := queue_refusal(queue):
        raise TinkerRefusal(refusal)
    lineage = {k: extra.pop(k) for k in ("parent", "parent_checkpoint", "lineage") if k in extra}
    run = Run.objects.create(
        project=Project.objects.get(pk=session["project"]),
        name=session["name"] or name or f"tinker · {base_model} · LoRA r{lora['rank']}",
        created_by=user,
        kind=RunKind.TINKER,
        preset="tinker",
        resolved_config={
            "kind": "tinker",
            "model": model,
            "base_model": base_model,
            "lora": lora,
            "session_id": session_id,
            **extra,
        },
        queue=queue,
        **lineage,
    )
    launched(run, user=user, dispatch=True)
    return run


def _queue_first(run_id: int, kind: str, body: dict[str, Any]) -> str:
    """The future of a new client's first request, queued once its run is committed (the worker answers
    it when the model is loaded)."""
    request_id = transport.new_request_id()
    transaction.on_commit(lambda: transport.put_request(run_id, kind, body, request_id=request_id))
    return request_id


@transaction.atomic
def model_create(
    *,
    user: Any,
    session_id: str,
    base_model: str,
    lora: dict[str, Any],
    user_metadata: Any = None,
) -> tuple[Run, str]:
    """A run of kind tinker for a new LoRA training client; the future of its `create_model`."""
    models = offered_models()
    if base_model not in models:
        raise TinkerRefusal(f"Unknown base_model {base_model!r}: this deployment offers {', '.join(models)}.")
    run = _training_run_create(
        user=user,
        session_id=session_id,
        base_model=base_model,
        model=models[base_model],
        lora=_lora_spec(lora),
        user_metadata=_metadata(user_metadata),
    )
    return run, _queue_first(run.pk, "create_model", {})


@transaction.atomic
def model_create_from_state(
    *,
    user: Any,
    session_id: str,
    model_seq_id: Any,
    path: str,
    optimizer: bool,
    base_model: str | None = None,
    user_metadata: Any = None,
) -> tuple[Run, str]:
    """`create_training_client_from_state[_with_optimizer]` (the SDK's create-via-load): a new run of the
    checkpoint's model and LoRA shape whose first request loads its weights (and optimizer state when
    asked), addressed by the model id the SDK derives; its lineage is the checkpoint (resume with the
    optimizer, init without)."""
    if not isinstance(model_seq_id, int) or model_seq_id < 0:
        raise TinkerRefusal("load_weights without model_id needs session_id and model_seq_id.")
    target = selectors.parsed(path)
    checkpoint = selectors.checkpoint_of(user, target)
    if optimizer and target.segment != "weights":
        raise TinkerRefusal(f"{path} holds sampler weights, no optimizer state: load a save_state path.")
    config = checkpoint.run.resolved_config
    if (
        base_model
        and base_model != config["base_model"]
        and offered_models().get(base_model) != config["model"]
    ):
        raise TinkerRefusal(f"base_model {base_model!r} is not the checkpoint's ({config['base_model']}).")
    run = _training_run_create(
        user=user,
        session_id=session_id,
        base_model=config["base_model"],
        model=config["model"],
        lora=_lora_spec(config.get("lora") or {}),
        user_metadata=_metadata(user_metadata) or (config.get("user_metadata") or {}),
        model_alias=paths.alias(session_id, model_seq_id),
        parent=checkpoint.run,
        parent_checkpoint=checkpoint,
        lineage="resume" if optimizer else "init",
    )
    body = {
        "path": str(target),
        "local_path": selectors.saved_directory(checkpoint, target),
        "optimizer": optimizer,
    }
    return run, _queue_first(run.pk, "load_weights", body)


def model_load(*, user: Any, model_id: str, path: str, optimizer: bool) -> str:
    """`load_state[_with_optimizer]` of a training client: its own save (the worker knows where it put
    it) or a checkpoint of another run the user may read, which becomes the run's lineage when the run
    has none (the SDK before 0.38 makes a client from a checkpoint as create_model + load_state)."""
    run = run_of_model(user, model_id)
    target = selectors.parsed(path)
    body: dict[str, Any] = {"path": str(target), "optimizer": optimizer}
    if target.run_id != run.pk:
        checkpoint = selectors.checkpoint_of(user, target)
        body["local_path"] = selectors.saved_directory(checkpoint, target)
        Run.objects.filter(pk=run.pk, parent_checkpoint=None).update(
            parent=checkpoint.run, parent_checkpoint=checkpoint, lineage="resume" if optimizer else "init"
        )
    return model_request(user=user, model_id=model_id, kind="load_weights", body=body)


def model_id_of(run: Run) -> str:
    return paths.model_id(run.pk)


@transaction.atomic
def checkpoint_delete(*, user: Any, model_id: str, checkpoint_id: str) -> None:
    """`DELETE /training_runs/{id}/checkpoints/{checkpoint_id}`: the row is marked deleted (kept for
    lineage, as a pruned checkpoint is) and its directory removed when it is on this machine."""
    run = run_of_model(user, model_id, Capability.LAUNCH)
    try:
        target = paths.checkpoint(paths.model_id(run.pk), checkpoint_id)
    except ValueError as exc:
        raise TinkerRefusal(str(exc)) from exc
    checkpoint = selectors.checkpoint_of(user, target, Capability.LAUNCH, run=run)
    Checkpoint.objects.filter(pk=checkpoint.pk).update(deleted=True)
    directory = checkpoint.path
    transaction.on_commit(lambda: shutil.rmtree(directory, ignore_errors=True))


def not_supported(what: str) -> TinkerRefusal:
    return TinkerRefusal(
        f"{what} {NOT_SUPPORTED}: checkpoints here stay private to their project and are kept until deleted."
    )


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


def _sampler_put(sampler_id: str, run: Run, *, weights: str | None, model_path: str | None = None) -> str:
    """Where a sampling session's requests go: `run`'s worker, sampling `weights` (a sampler id the
    worker knows, a tinker:// path of its saves, BASE_SAMPLER, or None: its current weights)."""
    record = {
        "run": run.pk,
        "sampler_id": weights,
        "base_model": run.resolved_config.get("base_model", ""),
        "model_path": model_path,
    }
    transport.put_json(transport.sampler_key(sampler_id), record)
    return sampler_id


def _new_sampler_id(run: Run) -> str:
    return f"{model_id_of(run)}/sampler/{uuid.uuid4().hex[:12]}"


def sampler_register(run: Run) -> str:
    """A sampling session id for the weights a `save_weights_for_sampler` is about to freeze."""
    sampler_id = _new_sampler_id(run)
    return _sampler_put(sampler_id, run, weights=sampler_id)


def _live_client(user: Any, model_id: str, *, samplers_too: bool = False) -> Run | None:
    """The training client `model_id` (or sampling client, `samplers_too`) while its worker still serves
    it and `user` may send it requests."""
    try:
        run = run_of_model(user, model_id)
    except TinkerRefusal:
        return None
    if ended_message(run) or (run.resolved_config.get("sampler") and not samplers_too):
        return None
    return run


def _sampling_run_create(
    *, user: Any, session_id: str, checkpoint: Checkpoint | None, base_model: str, sampler: dict[str, Any]
) -> Run:
    """A run of kind tinker whose worker loads a base model or a checkpoint and answers samples only (a
    sampling client no live worker of the session can serve)."""
    config = checkpoint.run.resolved_config if checkpoint else {}
    lineage = (
        {"parent": checkpoint.run, "parent_checkpoint": checkpoint, "lineage": "init"} if checkpoint else {}
    )
    return _training_run_create(
        user=user,
        session_id=session_id,
        base_model=base_model,
        model=offered_models()[base_model] if not checkpoint else config["model"],
        # A base model's sampler runs with its adapters off: the smallest LoRA, never used.
        lora=_lora_spec(config.get("lora") or {"rank": 1}),
        name=f"tinker sampler · {sampler.get('path') or base_model}",
        sampler=sampler,
        **lineage,
    )


@transaction.atomic
def sampling_session_create(
    *, user: Any, session_id: str, model_path: str | None, base_model: str | None
) -> str:
    """A sampling client (`create_sampling_client`), served where its weights are:

    - `model_path` of a live training client of yours: that client's worker, which saved it;
    - `model_path` of any other checkpoint you can see (a run that has ended, another member's): a new
      sampling run in the session's project that loads the checkpoint;
    - `base_model`: the worker of a live client of this session on that model (training or sampling),
      with its adapters off, else a new sampling run of the base model.
    A sampling run is a run like a training client's (queued, on the dashboard, ended with the session)."""
    if model_path:
        target = selectors.parsed(model_path)
        live = _live_client(user, target.model_id)
        if live is not None:
            return _sampler_put(_new_sampler_id(live), live, weights=str(target), model_path=str(target))
        checkpoint = selectors.checkpoint_of(user, target)
        run = _sampling_run_create(
            user=user,
            session_id=session_id,
            checkpoint=checkpoint,
            base_model=checkpoint.run.resolved_config["base_model"],
            sampler={"path": str(target), "local_path": selectors.saved_directory(checkpoint, target)},
        )
        return _sampler_put(_new_sampler_id(run), run, weights=None, model_path=str(target))
    models = offered_models()
    if not base_model or base_model not in models:
        raise TinkerRefusal(f"Unknown base_model {base_model!r}: this deployment offers {', '.join(models)}.")
    session_open(user, session_id)
    for run in selectors.session_runs(session_id)[:50]:
        same_model = run.resolved_config.get("model") == models[base_model]
        if same_model and _live_client(user, model_id_of(run), samplers_too=True):
            return _sampler_put(_new_sampler_id(run), run, weights=paths.BASE_SAMPLER)
    run = _sampling_run_create(
        user=user, session_id=session_id, checkpoint=None, base_model=base_model, sampler={"base": True}
    )
    return _sampler_put(_new_sampler_id(run), run, weights=paths.BASE_SAMPLER)


def _sampler_of(user: Any, sampling_session_id: str | None) -> tuple[dict[str, Any], Run]:
    sampler = transport.get_json(transport.sampler_key(sampling_session_id)) if sampling_session_id else None
    if not sampler:
        raise TinkerRefusal(f"No sampling session {sampling_session_id!r}.", 404)
    return sampler, run_of_model(user, paths.model_id(sampler["run"]))


def sampler_info(user: Any, sampling_session_id: str) -> dict[str, Any]:
    """`GET /samplers/{id}`: what the SDK asks of a sampling client it made from a model path."""
    sampler, run = _sampler_of(user, sampling_session_id)
    return {
        "sampler_id": sampling_session_id,
        "base_model": sampler.get("base_model") or run.resolved_config.get("base_model", ""),
        "model_path": sampler.get("model_path"),
    }


def sample_request(
    *, user: Any, session_id: str | None, sampling_session_id: str | None, body: dict[str, Any]
) -> str:
    if not sampling_session_id and body.get("model_path"):
        # A sample request naming its weights by path and no sampling session: made once per user and path.
        sampling_session_id = f"{body['model_path']}@{user.pk}"
        if transport.get_json(transport.sampler_key(sampling_session_id)) is None:
            made = sampling_session_create(
                user=user, session_id=session_id or "", model_path=body["model_path"], base_model=None
            )
            transport.put_json(
                transport.sampler_key(sampling_session_id), transport.get_json(transport.sampler_key(made))
            )
    sampler, run = _sampler_of(user, sampling_session_id)
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
