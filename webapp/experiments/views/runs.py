"""Run pages: the list, launching, a run's page, cancel, notes, resume and fork. Thin: access check,
form, one service or selector call."""

from __future__ import annotations

import json
import logging
import re
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from trainers.sdk import wire
from webapp.experiments import selectors, services
from webapp.experiments.forms import (
    ForkForm,
    RunLauncher,
    like_run,
    recommendation_for,
)
from webapp.experiments.models import RunStatus
from webapp.experiments.services import deletion
from webapp.experiments.services.runs import RUN_TAG_MAX_CHARS
from webapp.experiments.views.common import posted
from webapp.experiments.views.judge_check import launch_judge_gate
from webapp.fleet.selectors import queue_states, run_queue_state
from webapp.live.selectors import MAX_COMPARED_RUNS, run_snapshot
from webapp.projects.access import (
    Capability,
    ProjectAccess,
    access_project,
    access_run,
    access_run_to_delete,
    may_delete_run,
)
from webapp.projects.views import project_context
from webapp.rollouts.selectors import runs as rollout_selectors

log = logging.getLogger(__name__)

RUNS_PER_PAGE = 50
CRITERION_PARAMS_PREFIX = re.compile(r"criteria-(\d+|__prefix__)-params")


# --- runs -----------------------------------------------------------------------------------------


@login_required
@require_GET
def run_list(request: HttpRequest, slug: str) -> HttpResponse:
    """The project's home for runs: filter by status and tag, search, sort, pick runs to compare, and
    edit tags and notes in place."""
    access = access_project(request.user, slug, Capability.READ)
    status = request.GET.get("status", "")
    if status not in RunStatus.values:
        status = ""
    sort = request.GET.get("sort", selectors.DEFAULT_RUN_SORT)
    if sort not in selectors.RUN_SORTS:
        sort = selectors.DEFAULT_RUN_SORT
    search = request.GET.get("q", "")[:200]
    tag = request.GET.get("tag", "")[:RUN_TAG_MAX_CHARS]
    runs = selectors.run_list(
        project=access.project, status=status or None, search=search, tag=tag, sort=sort
    )
    page = Paginator(runs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    # Where each queued run of the page stands (one rule: selectors.queue_states, a few queries a page).
    page.object_list = list(page.object_list)
    waiting = queue_states(page.object_list)
    for run in page.object_list:
        run.queue_info = waiting.get(run.pk)
    kept = {k: v for k, v in (("status", status), ("q", search), ("tag", tag)) if v}
    if sort != selectors.DEFAULT_RUN_SORT:
        kept["sort"] = sort
    return render(
        request,
        "experiments/run_list.html",
        project_context(
            access,
            page=page,
            runs=page.object_list,
            status=status,
            statuses=RunStatus.choices,
            sort=sort,
            sorts=[(key, label) for key, (label, _order) in selectors.RUN_SORTS.items()],
            search=search,
            tag=tag,
            tags=selectors.run_tags(project=access.project),
            # The query string without the page (pagination) or without one filter (its "clear" link).
            query=urlencode(kept),
            query_without_status=urlencode({k: v for k, v in kept.items() if k != "status"}),
            query_without_tag=urlencode({k: v for k, v in kept.items() if k != "tag"}),
            query_without_q=urlencode({k: v for k, v in kept.items() if k != "q"}),
            selectable=True,
            can_launch=access.can(Capability.LAUNCH),
            max_compared=MAX_COMPARED_RUNS,
        ),
    )


@login_required
@require_POST
def run_notes(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """Set a run's tags (comma-separated) and note, from the run page or the runs list. Answers JSON
    to the pages' script (static/js/run_notes.js), else goes back where the form was."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="edit a run's notes")
    run = access_run(access, run_id)
    wants_json = "application/json" in request.headers.get("Accept", "")
    try:
        services.run_annotate(
            run=run,
            tags=request.POST.get("tags") if "tags" in request.POST else None,
            note=request.POST.get("note") if "note" in request.POST else None,
        )
    except ValidationError as error:
        if wants_json:
            return JsonResponse({"errors": error.message_dict}, status=400)
        for message in error.messages:
            messages.error(request, message)
    else:
        if wants_json:
            return JsonResponse({"id": run.pk, "tags": run.tags, "note": run.note})
        messages.success(request, "Saved the run's tags and note.")
    back = request.POST.get("next", "")
    if back.startswith(f"/p/{slug}/") and url_has_allowed_host_and_scheme(back, allowed_hosts=None):
        return redirect(back)
    return redirect("experiments:run_detail", slug, run.pk)


@login_required
@require_http_methods(["GET", "POST"])
def run_create(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="launch a run")
    # "New run like this" (?like=<run id>): the form starts from that run's choices and knobs.
    like = request.GET.get("like", "")
    source = (
        access_run(access, int(like), queryset=selectors.run_detail_queryset()) if like.isdigit() else None
    )
    start = like_run(source) if source is not None else {}
    launcher = RunLauncher(posted(request), project=access.project, **start)
    # ?from_checkpoint=<id>: the new run's policy starts from that checkpoint (a DPO run's, say).
    start_checkpoint = selectors.startable_checkpoint(
        project=access.project,
        checkpoint_id=request.POST.get("from_checkpoint") or request.GET.get("from_checkpoint"),
    )
    # A judge that cannot tell right from wrong is flagged before the run is queued (warn or refuse).
    gated = (
        request.method == "POST"
        and launcher.is_valid()
        and launch_judge_gate(request, access.project, launcher)
    )
    if request.method == "POST" and not gated and launcher.is_valid():
        try:
            if start_checkpoint is not None:
                values = launcher.values()
                values["overrides"].pop("model", None)
                run, _token = services.run_create_from_checkpoint(
                    checkpoint=start_checkpoint, user=request.user, dispatch=True, **values
                )
            else:
                run, _token = services.run_create(
                    project=access.project, user=request.user, dispatch=True, **launcher.values()
                )
        except ValidationError as error:
            launcher.add_service_errors(error)
        else:
            messages.success(request, f"Run “{run.name}” queued on the {run.queue} queue.")
            waiting = run_queue_state(run)
            if waiting and waiting["warning"]:
                messages.warning(request, waiting["warning"])
            return redirect("experiments:run_detail", slug, run.pk)
    elif request.method == "POST" and not gated:  # some fields did not parse: check the others too
        _knobs, errors = services.run_config_errors(**launcher.partial_values())
        launcher.add_remaining_errors(errors)
    return render(
        request,
        "experiments/run_form.html",
        project_context(access, launcher=launcher, source=source, start_checkpoint=start_checkpoint),
    )


@login_required
@require_GET
def run_recommended_knobs(request: HttpRequest, slug: str) -> JsonResponse:
    """JSON for the run form: the knobs recommended for ?model= (trainers.config.recommended_knobs),
    keyed by the form's input names, and why."""
    access_project(request.user, slug, Capability.LAUNCH, action="ask for recommended knobs")
    return JsonResponse(recommendation_for(request.GET.get("model", "")[:300]))


@login_required
@require_GET
def run_detail(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    run = access_run(access, run_id, queryset=selectors.run_detail_queryset())
    config = run.resolved_config or {}
    knobs = [
        (key, json.dumps(value))
        for key, value in sorted(config.items())
        if key not in ("environment", "rubric")
    ]
    checkpoints = list(run.checkpoints.order_by("step"))
    return render(
        request,
        "experiments/run_detail.html",
        project_context(
            access,
            run=run,
            knobs=knobs,
            overrides=run.overrides or {},
            config_json=json.dumps(config, indent=2, sort_keys=True),
            checkpoints=checkpoints,
            kept_checkpoints=[c for c in checkpoints if not c.deleted],
            key_metrics=run.checkpoint_metric_columns,
            checkpoint_columns=len(run.checkpoint_metric_columns) + 5,
            children=list(selectors.run_children(run)),
            # The run page's live state, as the websocket's snapshot gives it (one source for both).
            snapshot=run_snapshot(run),
            step_time_parts=wire.STEP_TIME_PARTS,
            can_launch=access.can(Capability.LAUNCH),
            can_delete=may_delete_run(access, run),
            judges=rollout_selectors.run_judges(run),
        ),
    )


def _stopped_run(access: ProjectAccess, run_id: int):
    run = access_run(access, run_id, queryset=selectors.run_detail_queryset())
    return run, list(run.checkpoints.filter(deleted=False).order_by("step"))


@login_required
@require_POST
def run_resume(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """Continue a stopped run from a checkpoint (the latest unless one is chosen) as a linked new run."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="resume a run")
    run, checkpoints = _stopped_run(access, run_id)
    chosen = request.POST.get("checkpoint")
    checkpoint = next((c for c in checkpoints if str(c.pk) == chosen), None) if chosen else None
    if chosen and checkpoint is None:
        messages.error(request, "Choose a kept checkpoint of this run.")
        return redirect("experiments:run_detail", slug, run.pk)
    try:
        resumed, _token = services.run_resume(run=run, user=request.user, checkpoint=checkpoint)
    except ValidationError as error:
        for message in error.messages:
            messages.error(request, message)
        return redirect("experiments:run_detail", slug, run.pk)
    messages.success(
        request, f"Resuming from step {resumed.parent_checkpoint.step} on the {resumed.queue} queue."
    )
    return redirect("experiments:run_detail", slug, resumed.pk)


@login_required
@require_http_methods(["GET", "POST"])
def run_fork(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """A new run from one of this run's checkpoints with edited knobs."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="fork a run")
    run, checkpoints = _stopped_run(access, run_id)
    if run.is_dpo:  # the fork form edits GRPO knobs; a DPO fork takes DPO knobs (API: POST …/fork/)
        messages.error(request, "Fork a DPO run through the API (its knobs are DPO's); Resume works here.")
        return redirect("experiments:run_detail", slug, run.pk)
    form = ForkForm(posted(request), run=run, checkpoints=checkpoints)
    if request.method == "POST" and form.is_valid():
        values = form.values()
        checkpoint = next(c for c in checkpoints if c.pk == values["checkpoint_id"])
        try:
            fork, _token = services.run_fork(
                run=run,
                user=request.user,
                checkpoint=checkpoint,
                name=values["name"],
                overrides=values["overrides"],
            )
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            messages.success(request, f"Fork “{fork.name}” queued from step {checkpoint.step}.")
            return redirect("experiments:run_detail", slug, fork.pk)
    return render(request, "experiments/run_fork.html", project_context(access, run=run, fork=form))


@login_required
@require_POST
def run_delete(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    run = access_run_to_delete(access, run_id)
    try:
        deletion.run_delete(run=run, user=request.user)
    except ValidationError as error:
        for message in error.messages:
            messages.error(request, message)
        return redirect("experiments:run_detail", slug, run.pk)
    messages.success(request, f"Run “{run.name}”: {deletion.DELETED_IN_BACKGROUND}")
    return redirect("experiments:run_list", slug)


@login_required
@require_POST
def run_cancel(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="cancel a run")
    run = access_run(access, run_id)
    try:
        outcome = services.run_request_cancel(run=run, user=request.user)
    except ValidationError as error:
        for message in error.messages:
            messages.error(request, message)
    else:
        if outcome == RunStatus.CANCELLED:
            messages.success(request, "Run cancelled before it started.")
        else:
            messages.info(request, "Cancellation requested: the run stops within seconds.")
    return redirect("experiments:run_detail", slug, run.pk)
