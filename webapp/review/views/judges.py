"""LLM judges annotating a queue: the queue page's judges panel, asking a judge, its vote in snapshots,
cancelling it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from webapp.core.views import flash_job_cancel, flash_job_queued
from webapp.projects.access import Capability, ProjectAccess, access_project, access_queue
from webapp.projects.views import project_context
from webapp.review import selectors, services
from webapp.review.forms import JudgeForm
from webapp.review.models import PreferenceQueue, QueueJudge
from webapp.review.views.common import error_text


def judges_context(access: ProjectAccess, queue: PreferenceQueue, form: JudgeForm | None = None) -> dict:
    """What the judges panel shows (the queue page includes it too)."""
    judges = selectors.queue_judges(queue)
    return {
        "judges": judges,
        "judges_active": any(judge.is_active for judge in judges),
        "judge_form": form or JudgeForm(project=access.project),
    }


def _back_to_judges(slug: str, queue: PreferenceQueue) -> HttpResponse:
    return redirect(reverse("review:queue_detail", args=[slug, queue.pk]) + "#judges")


@login_required
@require_GET
def queue_judges(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    """The judges panel alone, polled by htmx while a judge is queued or judging."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="see a queue's LLM judges")
    queue = access_queue(access, queue_id)
    context = judges_context(access, queue)
    response = render(request, "review/_judges.html", project_context(access, queue=queue, **context))
    if not context["judges_active"] and request.headers.get("HX-Request"):
        response["HX-Refresh"] = "true"  # a judge just ended: reload so agreement and bias include it
    return response


@login_required
@require_POST
def queue_judge_start(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    """Ask an LLM-judge criterion to annotate the queue (both orders, on a worker)."""
    access = access_project(
        request.user, slug, Capability.LAUNCH, action="ask an LLM judge to annotate a queue"
    )
    queue = access_queue(access, queue_id)
    form = JudgeForm(request.POST, project=access.project)
    if form.is_valid():
        try:
            judge = services.queue_judge_start(queue=queue, user=request.user, **form.service_arguments())
        except ValidationError as error:
            messages.error(request, error_text(error))
        else:
            flash_job_queued(
                request,
                judge,
                queue=judge.worker_queue,
                queued=f"{judge.label} is queued on the {judge.worker_queue} queue: every pair, in both orders.",
            )
    else:
        messages.error(
            request,
            "The judge was not asked: " + "; ".join(e for errs in form.errors.values() for e in errs),
        )
    return _back_to_judges(slug, queue)


@login_required
@require_POST
def queue_judge_snapshots(request: HttpRequest, slug: str, queue_id: int, judge_id: int) -> HttpResponse:
    """Whether this judge's verdicts vote in the queue's next dataset snapshots."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="let an LLM judge vote in datasets")
    queue = access_queue(access, queue_id)
    judge = get_object_or_404(QueueJudge, queue=queue, pk=judge_id)
    services.queue_judge_set_in_snapshots(judge=judge, in_snapshots=request.POST.get("in_snapshots") == "on")
    return _back_to_judges(slug, queue)


@login_required
@require_POST
def queue_judge_cancel(request: HttpRequest, slug: str, queue_id: int, judge_id: int) -> HttpResponse:
    """Stop an LLM judge (its answers so far stay; asking it again resumes from them)."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="stop an LLM judge")
    queue = access_queue(access, queue_id)
    judge = get_object_or_404(QueueJudge, queue=queue, pk=judge_id)
    flash_job_cancel(request, judge, lambda: services.queue_judge_cancel(judge=judge))
    return _back_to_judges(slug, queue)
