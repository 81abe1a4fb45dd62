"""Pages for environments, rubrics and runs. Thin: access check, form, one service or selector call.

Every view resolves the project through webapp.projects.access (outsiders get 404, members whose
role lacks the capability get 403) and looks objects up inside that project only.
"""

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

from trainers.envs.preview import preview_environment
from trainers.registry import criterion_kinds
from trainers.rubrics import TranscriptError, describe_path, parse_transcript
from trainers.sdk import wire
from webapp.experiments import selectors, services
from webapp.experiments.forms import (
    EnvironmentEditor,
    ForkForm,
    RubricBuilder,
    RubricPreviewForm,
    RunLauncher,
    criterion_params_form,
    environment_config_form,
    like_run,
    recommendation_for,
)
from webapp.experiments.judges import judge_model_choices
from webapp.experiments.models import KEY_CHECKPOINT_METRICS, Rubric, RunStatus
from webapp.experiments.services.runs import RUN_TAG_MAX_CHARS
from webapp.experiments.views_judge_check import launch_judge_gate
from webapp.experiments.views_preview import preview_picker_form
from webapp.fleet.selectors import queue_states, run_queue_state
from webapp.live.selectors import MAX_COMPARED_RUNS, run_snapshot
from webapp.projects.access import (
    Capability,
    ProjectAccess,
    access_environment,
    access_project,
    access_rubric,
    access_run,
)
from webapp.projects.views import project_context
from webapp.rollouts import selectors as rollout_selectors

log = logging.getLogger(__name__)

RUNS_PER_PAGE = 50
CRITERION_PARAMS_PREFIX = re.compile(r"criteria-(\d+|__prefix__)-params")


def _posted(request: HttpRequest):
    return request.POST if request.method == "POST" else None


def _check_environment_rest(editor: EnvironmentEditor) -> None:
    """Some fields did not parse: check the others too, so every error shows in this one pass."""
    values = editor.partial_values()
    editor.add_remaining_errors(
        services.definition_errors(
            name=values["name"],
            description=None,
            check=lambda: services.validate_environment_config(values["kind"], values["config"]),
        )
    )


def _check_rubric_rest(builder: RubricBuilder) -> None:
    name = (getattr(builder.form, "cleaned_data", None) or {}).get("name", "")
    spec = builder.partial_spec()
    builder.add_remaining_errors(
        services.definition_errors(
            name=name, description=None, check=lambda: services.validate_rubric_spec(spec)
        )
    )


# --- environments ---------------------------------------------------------------------------------


@login_required
@require_GET
def environment_list(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    environments = selectors.environment_list(project=access.project)
    return render(
        request, "experiments/environment_list.html", project_context(access, environments=environments)
    )


@login_required
@require_GET
def environment_detail(request: HttpRequest, slug: str, environment_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    environment = access_environment(access, environment_id)
    versions = list(selectors.environment_versions(environment))
    for version in versions:
        version.config_json = json.dumps(version.config, indent=2, sort_keys=True)
    return render(
        request,
        "experiments/environment_detail.html",
        project_context(
            access, environment=environment, versions=versions, latest=versions[0] if versions else None
        ),
    )


@login_required
@require_http_methods(["GET", "POST"])
def environment_create(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH)
    editor = EnvironmentEditor(_posted(request))
    if request.method == "POST" and editor.is_valid():
        try:
            environment = services.environment_create(
                project=access.project, user=request.user, **editor.values()
            )
        except ValidationError as error:
            editor.add_service_errors(error)
        else:
            messages.success(request, f"Environment “{environment.name}” created (v1).")
            return redirect("experiments:environment_detail", slug, environment.pk)
    elif request.method == "POST":
        _check_environment_rest(editor)
    return render(
        request, "experiments/environment_form.html", project_context(access, editor=editor, environment=None)
    )


@login_required
@require_POST
def environment_preview(request: HttpRequest, slug: str) -> HttpResponse:
    """htmx partial: what the model will see with the config as typed (a sample task, the tools, the
    system prompt; a health line for a remote environment), or what is wrong with it."""
    access = access_project(request.user, slug, Capability.LAUNCH)
    editor = EnvironmentEditor(request.POST)
    if editor.config_form is None or not editor.config_form.is_valid():
        preview = {"ok": False, "errors": {}, "message": "Fix the highlighted settings first."}
    else:
        preview = preview_environment(request.POST.get("kind", ""), editor.config_form.values())
    return render(request, "experiments/_environment_preview.html", project_context(access, preview=preview))


@login_required
@require_http_methods(["GET", "POST"])
def environment_edit(request: HttpRequest, slug: str, environment_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH)
    environment = access_environment(access, environment_id)
    latest = environment.latest_version
    editor = EnvironmentEditor(
        _posted(request),
        initial={"name": environment.name, "description": environment.description, "kind": latest.kind},
        config=latest.config,
    )
    if request.method == "POST" and editor.is_valid():
        values = editor.values(previous=latest)
        try:
            version = services.environment_update(
                environment=environment, user=request.user, note=editor.form.cleaned_data["note"], **values
            )
        except ValidationError as error:
            editor.add_service_errors(error)
        else:
            if version.pk == latest.pk:
                messages.info(
                    request, f"Saved. The kind and config are unchanged, so runs still use v{version.number}."
                )
            else:
                messages.success(
                    request, f"Saved as v{version.number}. Runs that used earlier versions keep them."
                )
            return redirect("experiments:environment_detail", slug, environment.pk)
    elif request.method == "POST":
        _check_environment_rest(editor)
    return render(
        request,
        "experiments/environment_form.html",
        project_context(access, editor=editor, environment=environment, latest=latest),
    )


@login_required
@require_GET
def environment_config_fields(request: HttpRequest, slug: str) -> HttpResponse:
    """htmx partial: the config fields of the chosen kind, at their defaults — or, on the edit page
    and back at the environment's current kind, at its current config."""
    access = access_project(request.user, slug, Capability.LAUNCH)
    kind = request.GET.get("kind", "")
    current = None
    if request.GET.get("environment", "").isdigit():
        current = access_environment(access, request.GET["environment"]).latest_version
    values = current.config if current is not None and current.kind == kind else None
    config_form = environment_config_form(kind, values=values)
    return render(
        request,
        "experiments/_environment_config_fields.html",
        project_context(access, config_form=config_form),
    )


# --- rubrics --------------------------------------------------------------------------------------


@login_required
@require_GET
def rubric_list(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    return render(
        request,
        "experiments/rubric_list.html",
        project_context(access, rubrics=selectors.rubric_list(project=access.project)),
    )


@login_required
@require_GET
def rubric_detail(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    rubric = access_rubric(access, rubric_id)
    versions = list(selectors.rubric_versions(rubric))
    kinds = criterion_kinds()
    for version in versions:
        version.spec_json = json.dumps(version.spec, indent=2, sort_keys=True)
        version.criteria = [
            {
                **item,
                "weight": item.get("weight", 1.0),
                "params_json": json.dumps(item.get("params", {}), sort_keys=True),
                "spec": kinds.get(item.get("kind")),
            }
            for item in version.spec.get("criteria", [])
        ]
    return render(
        request,
        "experiments/rubric_detail.html",
        project_context(access, rubric=rubric, versions=versions, latest=versions[0] if versions else None),
    )


def _rubric_form_page(
    request: HttpRequest, access: ProjectAccess, builder: RubricBuilder, rubric: Rubric | None
):
    return render(
        request,
        "experiments/rubric_form.html",
        project_context(
            access,
            builder=builder,
            rubric=rubric,
            preview_form=preview_picker_form(request, access),
            criterion_kinds=criterion_kinds(),
            judge_models=judge_model_choices(),
        ),
    )


@login_required
@require_http_methods(["GET", "POST"])
def rubric_create(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH)
    builder = RubricBuilder(_posted(request))
    if request.method == "POST" and builder.is_valid():
        try:
            rubric = services.rubric_create(project=access.project, user=request.user, **builder.values())
        except ValidationError as error:
            builder.add_service_errors(error)
        else:
            messages.success(request, f"Rubric “{rubric.name}” created (v1).")
            return redirect("experiments:rubric_detail", slug, rubric.pk)
    elif request.method == "POST":
        _check_rubric_rest(builder)
    return _rubric_form_page(request, access, builder, None)


@login_required
@require_http_methods(["GET", "POST"])
def rubric_edit(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH)
    rubric = access_rubric(access, rubric_id)
    latest = rubric.latest_version
    builder = RubricBuilder(
        _posted(request), initial={"name": rubric.name, "description": rubric.description}, spec=latest.spec
    )
    if request.method == "POST" and builder.is_valid():
        try:
            version = services.rubric_update(
                rubric=rubric,
                user=request.user,
                note=builder.form.cleaned_data["note"],
                **builder.values(previous=latest.spec),
            )
        except ValidationError as error:
            builder.add_service_errors(error)
        else:
            if version.pk == latest.pk:
                messages.info(
                    request, f"Saved. The criteria are unchanged, so runs still use v{version.number}."
                )
            else:
                messages.success(
                    request, f"Saved as v{version.number}. Runs that used earlier versions keep them."
                )
            return redirect("experiments:rubric_detail", slug, rubric.pk)
    elif request.method == "POST":
        _check_rubric_rest(builder)
    return _rubric_form_page(request, access, builder, rubric)


@login_required
@require_GET
def criterion_params(request: HttpRequest, slug: str) -> HttpResponse:
    """htmx partial: the params fields of a criterion kind for one builder row, at their defaults."""
    access = access_project(request.user, slug, Capability.LAUNCH)
    prefix = request.GET.get("prefix", "")
    if not CRITERION_PARAMS_PREFIX.fullmatch(prefix):
        prefix = "criteria-__prefix__-params"
    kind = request.GET.get("kind", "")
    params = criterion_params_form(kind, prefix)
    return render(
        request,
        "experiments/_criterion_params.html",
        project_context(access, params=params, kind_spec=criterion_kinds().get(kind)),
    )


@login_required
@require_POST
def rubric_preview(request: HttpRequest, slug: str) -> HttpResponse:
    """htmx partial: score a pasted transcript with the unsaved rubric on the page. Saves nothing."""
    access = access_project(request.user, slug, Capability.LAUNCH)
    builder = RubricBuilder(request.POST)
    preview_form = RubricPreviewForm(request.POST)
    context = project_context(access, builder=builder, problems=[], score=None)
    builder_ok = builder.is_valid()
    preview_ok = preview_form.is_valid()
    if not preview_ok:
        context["problems"] += [f"{field}: {', '.join(errs)}" for field, errs in preview_form.errors.items()]
    if not builder_ok:
        context["problems"] += builder.error_messages()
    picked = preview_form.cleaned_data.get("trajectory") if preview_ok else None
    stored = rollout_selectors.project_trajectory(project=access.project, trajectory_id=picked) if picked else None
    if picked and stored is None:
        context["problems"].append(f"trajectory: this project has no trajectory #{picked}.")
        preview_ok = False
    if builder_ok and preview_ok:
        spec = builder.spec()
        try:
            services.validate_rubric_spec(spec)
            answer = preview_form.cleaned_data["answer"] or None
            if stored is not None:  # any trajectory of this project, typed or found by id
                trajectory = rollout_selectors.stored_trajectory(stored, answer=answer)
                context["stored"] = stored
            else:
                trajectory = parse_transcript(preview_form.cleaned_data["transcript"], answer=answer)
            context["score"] = selectors.rubric_preview(spec, trajectory)
            context["trajectory"] = trajectory
        except ValidationError as error:
            context["problems"] += [
                f"{describe_path(path)}: {m}" if path else m
                for path, msgs in error.message_dict.items()
                for m in msgs
            ]
        except TranscriptError as error:
            context["problems"].append(f"Transcript: {error}")
        except Exception as error:  # a criterion failing on odd input: say so rather than answer 500
            log.warning("rubric preview failed", exc_info=True)
            context["problems"].append(f"Scoring failed: {type(error).__name__}: {error}")
    return render(request, "experiments/_rubric_preview.html", context)


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
    access = access_project(request.user, slug, Capability.LAUNCH)
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
    access = access_project(request.user, slug, Capability.LAUNCH)
    # "New run like this" (?like=<run id>): the form starts from that run's choices and knobs.
    like = request.GET.get("like", "")
    source = (
        access_run(access, int(like), queryset=selectors.run_detail_queryset()) if like.isdigit() else None
    )
    start = like_run(source) if source is not None else {}
    launcher = RunLauncher(_posted(request), project=access.project, **start)
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
    access_project(request.user, slug, Capability.LAUNCH)
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
            key_metrics=KEY_CHECKPOINT_METRICS,
            checkpoint_columns=len(KEY_CHECKPOINT_METRICS) + 5,
            children=list(selectors.run_children(run)),
            # The run page's live state, as the websocket's snapshot gives it (one source for both).
            snapshot=run_snapshot(run),
            step_time_parts=wire.STEP_TIME_PARTS,
            can_launch=access.can(Capability.LAUNCH),
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
    access = access_project(request.user, slug, Capability.LAUNCH)
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
    access = access_project(request.user, slug, Capability.LAUNCH)
    run, checkpoints = _stopped_run(access, run_id)
    if run.is_dpo:  # the fork form edits GRPO knobs; a DPO fork takes DPO knobs (API: POST …/fork/)
        messages.error(request, "Fork a DPO run through the API (its knobs are DPO's); Resume works here.")
        return redirect("experiments:run_detail", slug, run.pk)
    form = ForkForm(_posted(request), run=run, checkpoints=checkpoints)
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
def run_cancel(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH)
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
