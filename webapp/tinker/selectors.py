"""Reads of the Tinker-compatible API: training clients (runs of kind `tinker`) and their checkpoints, as the
SDK's RestClient reads them (`tinker/lib/public_interfaces/rest_client.py`, SDK 0.38).

Checkpoints are the Checkpoint rows the worker's saves write (one per run and step: a step's `save_state`
is kept over the sampler weights saved at the same step, which it holds too). The rules of the rest of the
API apply: a user sees the training runs of projects they belong to; changing one needs the launch role.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db.models import QuerySet

from trainers.tinker import paths
from webapp.experiments.models import Checkpoint, Run, RunKind
from webapp.projects.access import Capability, can
from webapp.tinker.errors import TinkerRefusal


def visible_runs(user: Any) -> QuerySet[Run]:
    """The training runs of the projects `user` is a member of."""
    return Run.objects.filter(kind=RunKind.TINKER, project__memberships__user=user)


def run_of_model(user: Any, model_id: str, need: Capability = Capability.LAUNCH) -> Run:
    """The run of a model id (`rs-run-<n>`, or the `<session>:train:<n>` alias of a client made from a
    checkpoint), or of a path under it (`rs-run-<n>/sampler/…`); 404 unless `user` may `need` in its
    project."""
    head = model_id.split("/")[0]
    run_id = paths.run_id_of(head)
    run: Run | None = None
    if run_id is not None:
        run = Run.objects.filter(pk=run_id, kind=RunKind.TINKER).select_related("project").first()
    elif paths.is_alias(head):
        run = (
            Run.objects.filter(kind=RunKind.TINKER, resolved_config__model_alias=head)
            .select_related("project")
            .order_by("-pk")
            .first()
        )
    if run is None or not can(user, run.project, need):
        raise TinkerRefusal(f"No training client {model_id!r} of yours.", 404)
    return run


def parsed(path: str) -> paths.TinkerPath:
    try:
        return paths.parse(path)
    except ValueError as exc:
        raise TinkerRefusal(str(exc)) from exc


def checkpoint_of(
    user: Any, path: paths.TinkerPath, need: Capability = Capability.READ, *, run: Run | None = None
) -> Checkpoint:
    """The kept Checkpoint row of a tinker path — or of the step it was saved at, when a later save at the
    same step took the row (`saved_directory` then names the path's own directory); 404 when there is
    none `user` may `need`."""
    run = run or run_of_model(user, path.model_id, need)
    kept = Checkpoint.objects.filter(run=run, deleted=False).select_related("run__project")
    found = kept.filter(path__endswith=f"/{path.local_suffix}").order_by("-step").first()
    if found is None:
        found = _row_of_replaced_save(kept, path)
    if found is None:
        raise TinkerRefusal(
            f"No checkpoint {path} (never saved, deleted, replaced by a later save at the same step, or "
            "not recorded yet: the dashboard has it a moment after the save).",
            404,
        )
    return found


def saved_directory(checkpoint: Checkpoint, path: paths.TinkerPath) -> str:
    """Where the save `path` names lies: the row's directory, or the directory of a save at the row's step
    whose row a later save replaced (it stays on disk beside the row's own)."""
    named = _beside(checkpoint, path)
    return str(named) if named is not None and named.is_dir() else checkpoint.path


def _beside(checkpoint: Checkpoint, path: paths.TinkerPath) -> Path | None:
    """The directory `path` names in the run's tinker folder that holds `checkpoint` (None for a row of
    another layout: not a Tinker client's save)."""
    if paths.of_local(path.model_id, checkpoint.path) is None:
        return None
    return Path(checkpoint.path).parents[2] / path.local_suffix


def _row_of_replaced_save(kept: QuerySet[Checkpoint], path: paths.TinkerPath) -> Checkpoint | None:
    """The dashboard keeps one checkpoint per step, so a second save at a step (a cookbook recipe's
    periodic save, then its "final" one, with no optimizer step between) takes the first one's row. The
    first save is still on disk and still loads: its row is the one of the step it was saved at."""
    for row in kept.order_by("-step"):
        named = _beside(row, path)
        if named is None:
            continue
        if not named.is_dir():
            return None  # every save of the run lies in the same folder: this one is not there
        try:
            # trainers/learn/checkpoint.py's trainer state, read without importing torch into the web app.
            step = int(json.loads((named / "trainer_state.json").read_text())["step"])
        except (OSError, ValueError, KeyError):
            return None
        return kept.filter(step=step).first()
    return None


def _size(directory: str) -> int | None:
    root = Path(directory)
    if not root.is_dir():  # on a worker's disk that is not this machine's
        return None
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def checkpoint_json(checkpoint: Checkpoint) -> dict[str, Any] | None:
    """A row as the SDK's `Checkpoint` (None for a row of another layout than the worker's)."""
    path = paths.of_local(paths.model_id(checkpoint.run_id), checkpoint.path)
    if path is None:
        return None
    return {
        "checkpoint_id": path.checkpoint_id,
        "checkpoint_type": path.checkpoint_type,
        "time": _time(checkpoint.created_at),
        "tinker_path": str(path),
        "size_bytes": _size(checkpoint.path),
        "public": False,
        "user_metadata": None,
        "expires_at": None,
    }


def _checkpoints(rows: Any) -> list[dict[str, Any]]:
    return [c for c in (checkpoint_json(row) for row in rows) if c is not None]


def checkpoint_list(user: Any, model_id: str) -> dict[str, Any]:
    """`GET /training_runs/{id}/checkpoints`: the run's kept checkpoints, oldest first."""
    run = run_of_model(user, model_id, Capability.READ)
    return {"checkpoints": _checkpoints(run.checkpoints.filter(deleted=False).order_by("step"))}


def _page(limit: Any, offset: Any, default_limit: int) -> tuple[int, int]:
    try:
        limit, offset = int(limit if limit not in (None, "") else default_limit), int(offset or 0)
    except (TypeError, ValueError) as exc:
        raise TinkerRefusal("limit and offset must be integers.") from exc
    if not 1 <= limit <= 1000 or offset < 0:
        raise TinkerRefusal("limit must be between 1 and 1000 and offset at least 0.")
    return limit, offset


def user_checkpoints(user: Any, limit: Any, offset: Any) -> dict[str, Any]:
    """`GET /checkpoints`: the kept checkpoints of every training run `user` may see, newest first."""
    limit, offset = _page(limit, offset, 100)
    rows = Checkpoint.objects.filter(run__in=visible_runs(user), deleted=False, path__contains="/tinker/")
    total = rows.count()
    page = rows.order_by("-created_at", "-pk")[offset : offset + limit]
    return {
        "checkpoints": _checkpoints(page),
        "cursor": {"offset": offset, "limit": limit, "total_count": total},
    }


def training_run_json(run: Run) -> dict[str, Any]:
    config = run.resolved_config or {}
    kept = [(row, checkpoint_json(row)) for row in run.checkpoints.filter(deleted=False).order_by("-step")]

    def last(kind: str) -> dict[str, Any] | None:
        return next((c for _, c in kept if c is not None and c["checkpoint_type"] == kind), None)

    metadata = config.get("user_metadata") or {}
    return {
        "training_run_id": paths.model_id(run.pk),
        "base_model": config.get("base_model", ""),
        "model_owner": run.created_by.get_username() if run.created_by else "",
        "is_lora": True,
        "corrupted": False,
        "lora_rank": (config.get("lora") or {}).get("rank"),
        "last_request_time": _time(run.heartbeat_at or run.status_changed_at or run.created_at),
        "last_checkpoint": last("training"),
        "last_sampler_checkpoint": last("sampler"),
        "user_metadata": {str(k): str(v) for k, v in metadata.items()} or None,
    }


def training_run(user: Any, model_id: str) -> dict[str, Any]:
    """`GET /training_runs/{id}`."""
    return training_run_json(run_of_model(user, model_id, Capability.READ))


def training_runs(user: Any, limit: Any, offset: Any, project_slug: str | None = None) -> dict[str, Any]:
    """`GET /training_runs`: newest first, optionally of one project; sampling clients' runs are not
    training runs."""
    limit, offset = _page(limit, offset, 20)
    runs = visible_runs(user).exclude(resolved_config__has_key="sampler").select_related("created_by")
    if project_slug:
        runs = runs.filter(project__slug=project_slug)
    page = runs.order_by("-created_at", "-pk")[offset : offset + limit]
    return {
        "training_runs": [training_run_json(run) for run in page],
        "cursor": {"offset": offset, "limit": limit, "total_count": runs.count()},
    }


def weights_info(user: Any, tinker_path: str) -> dict[str, Any]:
    """`POST /weights_info`: what a client needs to make a training client of a checkpoint's shape (the
    SDK before 0.38 reads it for `create_training_client_from_state`)."""
    checkpoint = checkpoint_of(user, parsed(tinker_path))
    config = checkpoint.run.resolved_config or {}
    lora = config.get("lora") or {}
    return {
        "base_model": config.get("base_model", ""),
        "is_lora": True,
        "lora_rank": lora.get("rank"),
        "train_unembed": False,
        "train_mlp": bool(lora.get("train_mlp", True)),
        "train_attn": bool(lora.get("train_attn", True)),
    }


def session_runs(session_id: str) -> QuerySet[Run]:
    """The training runs a session made, newest first."""
    return Run.objects.filter(kind=RunKind.TINKER, resolved_config__session_id=session_id).order_by("-pk")
