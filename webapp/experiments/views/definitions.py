"""Environment and rubric pages: list, page, create, edit, and their htmx partials (config fields,
environment preview, criterion params, rubric preview). Both are `VersionedDefinition`s: what their
pages share is written once (`DefinitionPages` and the `definition_*.html` templates)."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from trainers.envs.preview import preview_environment
from trainers.registry import criterion_kinds
from trainers.rubrics import TranscriptError, describe_path, parse_transcript
from webapp.experiments import selectors, services
from webapp.experiments.forms import (
    EnvironmentEditor,
    RubricBuilder,
    RubricPreviewForm,
    criterion_params_form,
    environment_config_form,
)
from webapp.experiments.judges import judge_model_choices
from webapp.experiments.models import Rubric
from webapp.experiments.views.common import posted
from webapp.experiments.views.preview import preview_picker_form
from webapp.projects.access import (
    Capability,
    ProjectAccess,
    access_environment,
    access_project,
    access_rubric,
)
from webapp.projects.views import project_context
from webapp.rollouts.selectors import runs as rollout_selectors

log = logging.getLogger(__name__)

RUNS_PER_PAGE = 50
CRITERION_PARAMS_PREFIX = re.compile(r"criteria-(\d+|__prefix__)-params")


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


# --- environments and rubrics: what their pages share ---------------------------------------------


@dataclass(frozen=True)
class DefinitionPages:
    """What the environment pages and the rubric pages (both `VersionedDefinition`) differ in: their
    words, their URL names and their templates. The rest is written once below and in the
    `definition_*.html` templates."""

    noun: str  # "environment": URL names are experiments:<noun>_<page>
    plural: str  # "Environments"
    content: str  # what a new version changes: "The kind and config are" unchanged
    list_template: str
    list_columns: int  # the list table's columns (its empty row spans them)

    def url(self, page: str) -> str:
        return f"experiments:{self.noun}_{page}"

    @property
    def detail_url(self) -> str:
        return self.url("detail")

    @property
    def edit_url(self) -> str:
        return self.url("edit")

    @property
    def create_url(self) -> str:
        return self.url("create")


ENVIRONMENT_PAGES = DefinitionPages(
    "environment", "Environments", "The kind and config are", "experiments/environment_list.html", 5
)
RUBRIC_PAGES = DefinitionPages("rubric", "Rubrics", "The criteria are", "experiments/definition_list.html", 4)


def _definition_list(request: HttpRequest, access: ProjectAccess, pages: DefinitionPages, definitions):
    return render(
        request,
        pages.list_template,
        project_context(access, pages=pages, definitions=definitions, **{f"{pages.noun}s": definitions}),
    )


def _definition_detail(
    request: HttpRequest, access: ProjectAccess, pages: DefinitionPages, definition, versions: list, **extra
) -> HttpResponse:
    context = {pages.noun: definition, "definition": definition, "pages": pages, **extra}
    latest = versions[0] if versions else None
    return render(
        request,
        f"experiments/{pages.noun}_detail.html",
        project_context(access, versions=versions, latest=latest, **context),
    )


def _created(request: HttpRequest, pages: DefinitionPages, definition) -> HttpResponse:
    messages.success(request, f"{pages.noun.capitalize()} “{definition.name}” created (v1).")
    return redirect(pages.detail_url, definition.project.slug, definition.pk)


def _saved(request: HttpRequest, pages: DefinitionPages, definition, version, latest) -> HttpResponse:
    """After an edit: say whether it made a new version (runs use the new one from now on)."""
    if version.pk == latest.pk:
        messages.info(request, f"Saved. {pages.content} unchanged, so runs still use v{version.number}.")
    else:
        messages.success(request, f"Saved as v{version.number}. Runs that used earlier versions keep them.")
    return redirect(pages.detail_url, definition.project.slug, definition.pk)


# --- environments ---------------------------------------------------------------------------------


@login_required
@require_GET
def environment_list(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    environments = selectors.environment_list(project=access.project)
    return _definition_list(request, access, ENVIRONMENT_PAGES, environments)


@login_required
@require_GET
def environment_detail(request: HttpRequest, slug: str, environment_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    environment = access_environment(access, environment_id)
    versions = list(selectors.environment_versions(environment))
    for version in versions:
        version.config_json = json.dumps(version.config, indent=2, sort_keys=True)
    return _definition_detail(request, access, ENVIRONMENT_PAGES, environment, versions)


@login_required
@require_http_methods(["GET", "POST"])
def environment_create(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="create an environment")
    editor = EnvironmentEditor(posted(request))
    if request.method == "POST" and editor.is_valid():
        try:
            environment = services.environment_create(
                project=access.project, user=request.user, **editor.values()
            )
        except ValidationError as error:
            editor.add_service_errors(error)
        else:
            return _created(request, ENVIRONMENT_PAGES, environment)
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
    access = access_project(request.user, slug, Capability.LAUNCH, action="preview an environment")
    editor = EnvironmentEditor(request.POST)
    if editor.config_form is None or not editor.config_form.is_valid():
        preview = {"ok": False, "errors": {}, "message": "Fix the highlighted settings first."}
    else:
        preview = preview_environment(request.POST.get("kind", ""), editor.config_form.values())
    return render(request, "experiments/_environment_preview.html", project_context(access, preview=preview))


@login_required
@require_http_methods(["GET", "POST"])
def environment_edit(request: HttpRequest, slug: str, environment_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="edit an environment")
    environment = access_environment(access, environment_id)
    latest = environment.latest_version
    editor = EnvironmentEditor(
        posted(request),
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
            return _saved(request, ENVIRONMENT_PAGES, environment, version, latest)
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
    access = access_project(request.user, slug, Capability.LAUNCH, action="configure an environment")
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
    return _definition_list(request, access, RUBRIC_PAGES, selectors.rubric_list(project=access.project))


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
    return _definition_detail(request, access, RUBRIC_PAGES, rubric, versions)


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
    access = access_project(request.user, slug, Capability.LAUNCH, action="create a rubric")
    builder = RubricBuilder(posted(request))
    if request.method == "POST" and builder.is_valid():
        try:
            rubric = services.rubric_create(project=access.project, user=request.user, **builder.values())
        except ValidationError as error:
            builder.add_service_errors(error)
        else:
            return _created(request, RUBRIC_PAGES, rubric)
    elif request.method == "POST":
        _check_rubric_rest(builder)
    return _rubric_form_page(request, access, builder, None)


@login_required
@require_http_methods(["GET", "POST"])
def rubric_edit(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="edit a rubric")
    rubric = access_rubric(access, rubric_id)
    latest = rubric.latest_version
    builder = RubricBuilder(
        posted(request), initial={"name": rubric.name, "description": rubric.description}, spec=latest.spec
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
            return _saved(request, RUBRIC_PAGES, rubric, version, latest)
    elif request.method == "POST":
        _check_rubric_rest(builder)
    return _rubric_form_page(request, access, builder, rubric)


@login_required
@require_GET
def criterion_params(request: HttpRequest, slug: str) -> HttpResponse:
    """htmx partial: the params fields of a criterion kind for one builder row, at their defaults."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="configure a rubric's criteria")
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
    access = access_project(request.user, slug, Capability.LAUNCH, action="preview a rubric")
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
    stored = (
        rollout_selectors.project_trajectory(project=access.project, trajectory_id=picked) if picked else None
    )
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
