"""Disagreements of a preference queue: the pairs its voters split on, every vote and rationale side by
side, κ before and after adjudication, and settling a pair (owners and researchers: Capability.ADJUDICATE)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from webapp.projects.access import Capability, access_project, access_queue
from webapp.projects.views import project_context
from webapp.review import selectors, services
from webapp.review.forms import AdjudicationForm
from webapp.review.models import PreferencePair
from webapp.review.tally import RULE
from webapp.review.views.common import error_text

SHOWS = {"open": "Open", "settled": "Settled", "all": "All"}


@login_required
@require_GET
def disagreements(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    access = access_project(
        request.user, slug, Capability.ADJUDICATE, action="see the votes a queue's annotators split on"
    )
    queue = access_queue(access, queue_id)
    show = request.GET.get("show", "open")
    show = show if show in SHOWS else "open"
    found = selectors.disagreements(queue, show=show)
    return render(
        request,
        "review/disagreements.html",
        project_context(
            access, queue=queue, found=found, show=show, shows=SHOWS, form=AdjudicationForm(), rule=RULE
        ),
    )


@login_required
@require_POST
def adjudicate(request: HttpRequest, slug: str, queue_id: int, pair_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ADJUDICATE, action="settle a disagreement")
    queue = access_queue(access, queue_id)
    pair = get_object_or_404(PreferencePair.objects.select_related("queue__project"), queue=queue, pk=pair_id)
    form = AdjudicationForm(request.POST)
    back = reverse("review:disagreements", args=[slug, queue.pk])
    if not form.is_valid():
        messages.error(request, "Choose A, B, tie or both bad to settle the pair.")
        return redirect(f"{back}#pair-{pair.pk}")
    try:
        adjudication = services.pair_adjudicate(
            pair=pair,
            user=request.user,
            choice=form.cleaned_data["choice"],
            rationale=form.cleaned_data["rationale"],
        )
    except ValidationError as error:
        messages.error(request, error_text(error))
        return redirect(f"{back}#pair-{pair.pk}")
    messages.success(
        request,
        f"Pair {pair.position + 1} settled: {adjudication.get_choice_display()}. "
        "The next dataset snapshot exports this decision.",
    )
    return redirect(back)
