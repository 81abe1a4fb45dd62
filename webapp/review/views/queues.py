"""Preference queues: the list, creating one, the queue page (progress; agreement, judges and datasets for
the people who run the study) and its annotators."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.experiments.services.dpo import dpo_base_model
from webapp.projects.access import Capability, access_project, access_queue
from webapp.projects.views import project_context
from webapp.review import agreement, selectors, services
from webapp.review.forms import AnnotatorsForm, QueueForm
from webapp.review.views.common import error_text
from webapp.review.views.judges import judges_context


@login_required
@require_GET
def queue_list(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    queues = selectors.queue_list(access=access)
    return render(request, "review/queue_list.html", project_context(access, queues=queues))


@login_required
@require_http_methods(["GET", "POST"])
def queue_create(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="create a preference queue")
    form = QueueForm(request.POST if request.method == "POST" else None, project=access.project)
    if request.method == "POST" and form.is_valid():
        try:
            queue = services.queue_create(
                project=access.project, user=request.user, **form.service_arguments()
            )
        except ValidationError as error:
            for field, field_messages in error.message_dict.items():
                form.add_error(
                    field if field in form.fields else ("lock_minutes" if field == "lock_seconds" else None),
                    field_messages,
                )
        else:
            messages.success(request, f"Queue “{queue.name}” created with {queue.pairs.count()} pairs.")
            return redirect("review:queue_detail", slug, queue.pk)
    return render(request, "review/queue_form.html", project_context(access, form=form))


def _matrix_rows(summary: agreement.AgreementSummary) -> list[dict]:
    return [
        {
            "rater": first,
            "is_judge": summary.is_judge(first),
            "cells": [summary.cell(first, second) if first != second else None for second in summary.raters],
        }
        for first in summary.raters
    ]


@login_required
@require_GET
def queue_detail(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    queue = access_queue(access, queue_id)
    context = {
        "queue": queue,
        "progress": selectors.queue_progress(queue),
        "may_annotate": queue.annotatable_by(access.membership),
    }
    if access.can(Capability.LAUNCH):
        # Agreement and exports are for the people who run the study; annotators see only their progress.
        summary = selectors.queue_agreement(queue)
        context.update(
            summary=summary,
            matrix=_matrix_rows(summary),
            snapshots=selectors.snapshot_list(queue),
            dpo_starts=selectors.dpo_start_checkpoints(queue),
            dpo_base_model=dpo_base_model(queue),
            annotators_form=AnnotatorsForm(
                project=access.project, initial={"annotators": list(queue.annotators.all())}
            ),
            **judges_context(access, queue),
        )
    if access.can(Capability.ADJUDICATE):
        context["disagreements"] = selectors.disagreement_counts(queue)
    return render(request, "review/queue_detail.html", project_context(access, **context))


@login_required
@require_POST
def queue_annotators(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    """Replace the queue's annotators (judgements already made stay)."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="change a queue's annotators")
    queue = access_queue(access, queue_id)
    form = AnnotatorsForm(request.POST, project=access.project)
    if not form.is_valid():
        messages.error(request, "Choose the annotators among the project's members.")
    else:
        try:
            services.queue_assign(
                queue=queue, user=request.user, annotators=list(form.cleaned_data["annotators"])
            )
        except ValidationError as error:
            messages.error(request, error_text(error))
        else:
            messages.success(request, "Annotators updated.")
    return redirect("review:queue_detail", slug, queue.pk)
