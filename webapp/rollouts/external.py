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

from trainers.sdk.wire import INT32_MAX
from webapp.core.broadcast import broadcast_on_commit
from webapp.experiments.models import Environment, Rubric, Run, RunOrigin, RunStatus
from webapp.experiments.services.runs import run_issue_ingest_token
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

    environment_version = environment.latest_version if environment else None
    rubric_version = rubric.latest_version if rubric else None
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


MAX_IMPORT_FILES = 200
IMPORT_SUFFIXES = (".json", ".jsonl", ".zip")
MAX_UNZIPPED_BYTES = 512 * 1024 * 1024
MAX_ZIP_MEMBERS = 20000


def _unzip_into(upload: Any, folder: Any) -> None:
    """A zipped folder (a Harbor job: <trial>/agent/trajectory.json beside <trial>/result.json) unpacked
    with its layout, so the importer finds each trial's verifier reward; members that would land outside
    the folder, and archives too large unpacked, are refused."""
    import zipfile
    from pathlib import PurePosixPath

    try:
        archive = zipfile.ZipFile(upload)
    except zipfile.BadZipFile as exc:
        raise ValidationError({"files": [f"{upload.name}: not a zip archive ({exc})."]}) from exc
    with archive:
        members = [m for m in archive.infolist() if not m.is_dir()]
        if len(members) > MAX_ZIP_MEMBERS or sum(m.file_size for m in members) > MAX_UNZIPPED_BYTES:
            raise ValidationError(
                {"files": [f"{upload.name}: too large unpacked (at most 512 MiB, 20,000 files)."]}
            )
        for member in members:
            parts = PurePosixPath(member.filename).parts
            if not parts or member.filename.startswith("/") or ".." in parts:
                raise ValidationError({"files": [f"{upload.name}: a member's path leaves the archive."]})
            if not member.filename.lower().endswith(IMPORT_SUFFIXES[:2]):
                continue
            target = folder.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, open(target, "wb") as out:
                out.write(source.read())


class _CollectingSink:
    """Keeps the importer's events, numbered from 1, for one ingestion on this side."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append({"seq": len(self.events) + 1, **event})

    def flush(self) -> None:
        return None

    def close(self, timeout_s: float | None = None) -> bool:
        return True

    def control(self) -> dict[str, Any]:
        return {}


def external_run_import_atif(*, project: Project, user, name: str, files: list[Any], split: str = "train"):
    """Import uploaded ATIF files (`.json`: one trajectory or a list; `.jsonl`: one per line — a Harbor
    trial's trajectory.json, our own export; `.zip`: a folder of them, e.g. a Harbor job, whose trials'
    result.json give the verifier rewards) as a finished external run, through the same reader as the
    CLI (`trainers.importers.atif`) and the same ingestion as a trainer's events. Returns (run, summary);
    raises ValidationError with field errors when nothing can be imported."""
    import tempfile
    from pathlib import Path

    from trainers.importers.atif import import_atif
    from trainers.sdk.client import Run as ReportingRun
    from webapp.rollouts.ingest import ingest_batch

    errors: dict[str, list[str]] = {}
    if not files:
        errors["files"] = ["Choose one or more ATIF files (.json or .jsonl)."]
    elif len(files) > MAX_IMPORT_FILES:
        errors["files"] = [f"At most {MAX_IMPORT_FILES} files at once."]
    else:
        wrong = [str(f.name) for f in files if not str(f.name).lower().endswith(IMPORT_SUFFIXES)]
        if wrong:
            errors["files"] = [f"Only .json, .jsonl and .zip files: {', '.join(wrong[:5])}."]
    if not (name or "").strip():
        errors["name"] = ["This field is required."]
    if errors:
        raise ValidationError(errors)
    with tempfile.TemporaryDirectory(prefix="atif-import-") as folder:
        for number, upload in enumerate(files):
            lowered = str(upload.name).lower()
            if lowered.endswith(".zip"):
                _unzip_into(upload, Path(folder) / f"{number:04d}")
                continue
            suffix = ".jsonl" if lowered.endswith(".jsonl") else ".json"
            with open(Path(folder) / f"{number:04d}{suffix}", "wb") as out:
                for chunk in upload.chunks():
                    out.write(chunk)
        sink = _CollectingSink()
        reporting = ReportingRun(0, "", "", sink=sink)
        summary = import_atif([folder], reporting, split=split)
    if not summary.trajectories:
        skipped = "; ".join(s.split("/")[-1] for s in summary.skipped_files[:3])
        raise ValidationError(
            {"files": [f"No ATIF trajectory found in these files{': ' + skipped if skipped else ''}."]}
        )
    with transaction.atomic():
        run, _token = external_run_create(
            project=project,
            user=user,
            name=name,
            algorithm="atif",
            config={"imported_from": [str(f.name)[:200] for f in files[:50]], "split": split},
        )
        for start in range(0, len(sink.events), 500):
            ingest_batch(run=run, payload={"events": sink.events[start : start + 500]})
    summary.run_id = run.pk
    return run, summary
