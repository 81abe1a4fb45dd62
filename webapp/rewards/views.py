"""Pages for learned reward models and the lineage of the loop. Thin: access check, form, one service or
selector call. Researchers (launch) train and register; every member (read) sees models and lineage;
outsiders get 404 from the access helper."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.core.views import flash_job_cancel, flash_job_queued
from webapp.experiments.models import Run
from webapp.projects.access import (
    Capability,
    ProjectAccess,
    access_project,
    access_reward_model,
    access_run,
)
from webapp.projects.views import project_context
from webapp.rewards import selectors, services
from webapp.rewards.forms import RegisterForm, TrainForm
from webapp.rewards.models import RewardModel


def _reward_model(access: ProjectAccess, reward_model_id: int) -> RewardModel:
    return access_reward_model(access, reward_model_id, queryset=selectors.reward_model_queryset())


def _show_errors(form, error: ValidationError) -> None:
    for field, field_messages in error.message_dict.items():
        field = field.removeprefix("params.")
        form.add_error(field if field in form.fields else None, field_messages)


@login_required
@require_GET
def reward_model_list(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    reward_models = selectors.reward_model_list(project=access.project)
    return render(
        request, "rewards/reward_model_list.html", project_context(access, reward_models=reward_models)
    )


@login_required
@require_http_methods(["GET", "POST"])
def reward_model_create(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="train a reward model")
    initial = {"snapshot": request.GET.get("snapshot")} if request.GET.get("snapshot") else None
    form = TrainForm(
        request.POST if request.method == "POST" else None, project=access.project, initial=initial
    )
    if request.method == "POST" and form.is_valid():
        try:
            reward_model = services.reward_model_train(
                snapshot=form.cleaned_data["snapshot"],
                user=request.user,
                name=form.cleaned_data["name"],
                params=form.params(),
                queue=form.cleaned_data["queue"],
                accuracy_threshold=form.threshold(),
                base_checkpoint=form.cleaned_data["base_checkpoint"],
            )
        except ValidationError as error:
            _show_errors(form, error)
        else:
            flash_job_queued(
                request,
                reward_model,
                queue=reward_model.queue,
                queued=f"{reward_model.label} queued for training on the {reward_model.queue} workers.",
            )
            return redirect("rewards:reward_model_detail", slug, reward_model.pk)
    status = 400 if request.method == "POST" else 200
    return render(
        request, "rewards/reward_model_form.html", project_context(access, form=form), status=status
    )


def _detail_page(
    request: HttpRequest,
    access: ProjectAccess,
    reward_model: RewardModel,
    register_form: RegisterForm,
    status: int = 200,
) -> HttpResponse:
    return render(
        request,
        "rewards/reward_model_detail.html",
        project_context(
            access,
            reward_model=reward_model,
            register_form=register_form,
            rubric_versions=selectors.rubric_versions_using(reward_model),
            train_curve=selectors.curve_points(reward_model.curve, "train_accuracy"),
            eval_curve=selectors.curve_points(reward_model.curve, "eval_accuracy"),
        ),
        status=status,
    )


@login_required
@require_GET
def reward_model_detail(request: HttpRequest, slug: str, reward_model_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    reward_model = _reward_model(access, reward_model_id)
    return _detail_page(request, access, reward_model, RegisterForm(project=access.project))


@login_required
@require_GET
def reward_model_status(request: HttpRequest, slug: str, reward_model_id: int) -> HttpResponse:
    """The status panel alone, polled by htmx while the model trains (it stops polling when done)."""
    access = access_project(request.user, slug, Capability.READ)
    reward_model = _reward_model(access, reward_model_id)
    response = render(request, "rewards/_status.html", project_context(access, reward_model=reward_model))
    if not reward_model.is_active and request.headers.get("HX-Request"):
        response["HX-Refresh"] = "true"  # training just ended: reload the page to offer "Add to rubric"
    return response


@login_required
@require_POST
def reward_model_register(request: HttpRequest, slug: str, reward_model_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="add a learned reward to a rubric")
    reward_model = _reward_model(access, reward_model_id)
    form = RegisterForm(request.POST, project=access.project)
    if form.is_valid():
        try:
            version = services.reward_model_register(
                reward_model=reward_model,
                rubric=form.cleaned_data["rubric"],
                weight=form.cleaned_data["weight"],
                user=request.user,
                criterion_name=form.cleaned_data["criterion_name"],
                allow_unreliable=form.cleaned_data["allow_unreliable"],
                only_when_checks_pass=form.cleaned_data["only_when_checks_pass"],
            )
        except ValidationError as error:
            _show_errors(form, error)
        else:
            messages.success(
                request,
                f"{version.rubric.name} v{version.number} scores with {reward_model.label}; "
                "runs launched with this rubric from now on use it.",
            )
            return redirect("rewards:reward_model_detail", slug, reward_model.pk)
    return _detail_page(request, access, reward_model, form, status=400)


@login_required
@require_POST
def reward_model_retrain(request: HttpRequest, slug: str, reward_model_id: int) -> HttpResponse:
    """Train the next version from the same snapshot and knobs (after a failure, or with a fresh worker)."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="retrain a reward model")
    reward_model = _reward_model(access, reward_model_id)
    try:
        again = services.reward_model_train(
            snapshot=reward_model.snapshot,
            user=request.user,
            name=reward_model.name,
            params=reward_model.params,
            queue=reward_model.queue,
            accuracy_threshold=reward_model.accuracy_threshold,
            base_checkpoint=reward_model.base_checkpoint,
        )
    except ValidationError as error:
        for field_messages in error.message_dict.values():
            for message in field_messages:
                messages.error(request, message)
        return redirect("rewards:reward_model_detail", slug, reward_model.pk)
    flash_job_queued(request, again, queue=again.queue, queued=f"{again.label} queued for training.")
    return redirect("rewards:reward_model_detail", slug, again.pk)


@login_required
@require_POST
def reward_model_cancel(request: HttpRequest, slug: str, reward_model_id: int) -> HttpResponse:
    """Stop training: a queued model is dropped at once, a training one stops within seconds."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="cancel a reward model's training")
    reward_model = _reward_model(access, reward_model_id)
    flash_job_cancel(request, reward_model, lambda: services.reward_model_cancel(reward_model=reward_model))
    return redirect("rewards:reward_model_detail", slug, reward_model.pk)


@login_required
@require_GET
def lineage_index(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    chains = selectors.lineages(access=access)
    dpo_chains = selectors.dpo_lineages(access=access)
    return render(
        request, "rewards/lineage_index.html", project_context(access, chains=chains, dpo_chains=dpo_chains)
    )


@login_required
@require_GET
def lineage_detail(request: HttpRequest, slug: str, reward_model_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    reward_model = _reward_model(access, reward_model_id)
    chain = selectors.lineage(reward_model, access=access)
    return render(request, "rewards/lineage.html", project_context(access, chain=chain))


@login_required
@require_GET
def dpo_lineage(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    run = access_run(access, run_id, queryset=Run.objects.select_related("preference_snapshot__queue"))
    if not run.is_dpo:
        raise Http404("Only a DPO run has a preference lineage.")
    chain = selectors.dpo_lineage(run, access=access)
    return render(request, "rewards/dpo_lineage.html", project_context(access, chain=chain))
