"""Dataset snapshots of a queue's judgements: creating one, its downloads (DPO JSON lines, DPO text,
parquet) and the one-click DPO run on it."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from webapp.experiments.selectors import startable_checkpoint
from webapp.experiments.services.dpo import run_create_dpo
from webapp.projects.access import Capability, access_project, access_queue, access_snapshot
from webapp.review import exports, services


@login_required
@require_POST
def snapshot_create(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="export a dataset snapshot")
    queue = access_queue(access, queue_id)
    snapshot = services.snapshot_create(
        queue,
        request.user,
        complete_only=request.POST.get("complete_only") == "on",
        include_turns=request.POST.get("include_turns") == "on",
    )
    counts = snapshot.provenance["counts"]
    turns = (
        f" and {counts['turn_rows']} step-level rows from turn judgements" if "turn_rows" in counts else ""
    )
    messages.success(
        request,
        f"Dataset v{snapshot.version}: {counts.get('included', 0)} pairs "
        f"(of {counts.get('judged_pairs', 0)} judged; ties, both-bad and split votes left out){turns}.",
    )
    return redirect(reverse("review:queue_detail", args=[slug, queue.pk]) + "#datasets")


@login_required
@require_GET
def snapshot_dpo(request: HttpRequest, slug: str, snapshot_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="download a dataset")
    return exports.download_response(access_snapshot(access, snapshot_id), "dpo")


@login_required
@require_POST
def snapshot_dpo_run(request: HttpRequest, slug: str, snapshot_id: int) -> HttpResponse:
    """One click: a DPO run on this preference dataset with the default knobs (trainers/recipes/dpo.py)."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="train the policy with DPO")
    snapshot = access_snapshot(access, snapshot_id)
    # The one knob beside the button: how many steps (the rest are trainers/recipes/dpo.py's defaults; the API
    # takes them all). Validated with the others by run_create_dpo, in plain words.
    steps = request.POST.get("max_steps", "").strip()
    params: dict[str, Any] = {"max_steps": int(steps) if steps.isdigit() else steps} if steps else {}
    # Where the policy starts: the base model, or a kept checkpoint of this project (the GRPO policy).
    start = request.POST.get("from_checkpoint", "").strip()
    try:
        run, _token = run_create_dpo(
            project=access.project,
            snapshot=snapshot,
            name=f"DPO on {exports.export_basename(snapshot)}",
            params=params,
            user=request.user,
            start_from=startable_checkpoint(project=access.project, checkpoint_id=start),
            start_from_given=bool(start),
        )
    except ValidationError as error:
        for field_messages in error.message_dict.values():
            for message in field_messages:
                messages.error(request, message)
        return (
            redirect("review:queue_detail", slug, snapshot.queue_id)
            if snapshot.queue_id
            else redirect("projects:home", slug)
        )
    messages.success(request, f"DPO run “{run.name}” queued on the {run.queue} queue.")
    return redirect("experiments:run_detail", slug, run.pk)


@login_required
@require_GET
def snapshot_dpo_text(request: HttpRequest, slug: str, snapshot_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="download a dataset")
    return exports.download_response(access_snapshot(access, snapshot_id), "dpo-text")


@login_required
@require_GET
def snapshot_parquet(request: HttpRequest, slug: str, snapshot_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="download a dataset")
    return exports.download_response(access_snapshot(access, snapshot_id), "parquet")
