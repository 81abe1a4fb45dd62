"""External runs: runs trained outside the dashboard (TRL, verl, a user's script) that only report.

Such a run is created RUNNING — its trainer is already alive when it asks for the run — and is never
queued, dispatched or resumed by the dashboard. It may pin an environment and a rubric of the project
(then its page links them), but need not: the trainer brings its own reward functions. Its config is
whatever the trainer says it used (e.g. TRL's GRPOConfig as a dict), kept for comparison pages.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from trainers.wire import INT32_MAX
from webapp.experiments.models import Environment, Rubric, Run, RunOrigin, RunStatus
from webapp.experiments.services import run_issue_ingest_token
from webapp.live.broadcast import broadcast_on_commit
from webapp.projects.models import Project

MAX_CONFIG_BYTES = 256 * 1024
MAX_ALGORITHM_CHARS = 32


@transaction.atomic
def external_run_create(
    *,
    project: Project,
    user,
    name: str,
    config: dict[str, Any] | None = None,
    algorithm: str = "external",
    environment: Environment | None = None,
    rubric: Rubric | None = None,
    max_steps: int = 0,
) -> tuple[Run, str]:
    """Create a RUNNING external run; returns it and its raw ingestion token (only the hash is kept)."""
    errors: dict[str, list[str]] = {}
    name = (name or "").strip()
    if not name:
        errors["name"] = ["This field is required."]
    elif len(name) > 120:
        errors["name"] = ["At most 120 characters."]
    config = {} if config is None else config
    if not isinstance(config, dict):
        errors["config"] = ["Must be a JSON object."]
    else:
        try:
            size = len(json.dumps(config, allow_nan=False))
        except (TypeError, ValueError, RecursionError):
            errors["config"] = ["Must be plain JSON (no NaN or infinity)."]
        else:
            if size > MAX_CONFIG_BYTES:
                errors["config"] = [f"At most {MAX_CONFIG_BYTES} bytes of JSON."]
    algorithm = (algorithm or "external").strip()
    if len(algorithm) > MAX_ALGORITHM_CHARS:
        errors["algorithm"] = [f"At most {MAX_ALGORITHM_CHARS} characters."]
    if environment is not None and environment.project_id != project.pk:
        errors["environment"] = ["Choose an environment of this project."]
    if rubric is not None and rubric.project_id != project.pk:
        errors["rubric"] = ["Choose a rubric of this project."]
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or not 0 <= max_steps <= INT32_MAX:
        errors["max_steps"] = [f"Must be an integer between 0 and {INT32_MAX}."]
    if errors:
        raise ValidationError(errors)

    environment_version = environment.versions.order_by("-number").first() if environment else None
    rubric_version = rubric.versions.order_by("-number").first() if rubric else None
    resolved: dict[str, Any] = {**config, "origin": RunOrigin.EXTERNAL, "algorithm": algorithm}
    if environment_version is not None:
        resolved["environment"] = environment_version.snapshot()
    if rubric_version is not None:
        resolved["rubric"] = rubric_version.snapshot()
    now = timezone.now()
    run = Run.objects.create(
        project=project,
        name=name,
        created_by=user,
        origin=RunOrigin.EXTERNAL,
        environment_version=environment_version,
        rubric_version=rubric_version,
        preset=algorithm,
        overrides={},
        resolved_config=resolved,
        status=RunStatus.RUNNING,
        started_at=now,
        heartbeat_at=now,
        max_steps=max_steps,
    )
    token = run_issue_ingest_token(run)
    broadcast_on_commit(run, [run.status_event()])
    return run, token
