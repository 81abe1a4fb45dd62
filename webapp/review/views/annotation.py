"""The pairwise annotation page: the annotator's current pair under its lock (or the next free one),
revisiting a pair they judged, and recording a judgement."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from trainers.texts import trajectory_text
from webapp.projects.access import Capability, Forbidden, ProjectAccess, access_project, access_queue
from webapp.projects.views import project_context
from webapp.review import selectors, services
from webapp.review.forms import JudgementForm
from webapp.review.models import PreferencePair, PreferenceQueue


def _may_annotate_or_403(access: ProjectAccess, queue: PreferenceQueue) -> None:
    if not queue.annotatable_by(access.membership):
        raise Forbidden(
            "You are not an annotator of this queue, so it offers you no pair to judge. "
            "An owner or researcher can add you under “Change annotators” on the queue page."
        )


def _neighbours(
    access: ProjectAccess, queue: PreferenceQueue, judged: list[int], assignment: services.Assignment | None
) -> tuple[str | None, str | None]:
    """The ← / → links: the annotator's judgements in the order they made them, then the next free pair."""
    slug = access.project.slug
    if assignment is None:
        return (reverse("review:pair", args=[slug, queue.pk, judged[-1]]) if judged else None), None
    current = assignment.pair.pk
    position = judged.index(current) if current in judged else len(judged)
    prev_url = next_url = None
    if position > 0:
        prev_url = reverse("review:pair", args=[slug, queue.pk, judged[position - 1]])
    if position < len(judged) - 1:
        next_url = reverse("review:pair", args=[slug, queue.pk, judged[position + 1]])
    elif position == len(judged) - 1:
        next_url = reverse("review:annotate", args=[slug, queue.pk])
    return prev_url, next_url


def _annotation_page(
    request: HttpRequest,
    access: ProjectAccess,
    queue: PreferenceQueue,
    assignment: services.Assignment | None,
    *,
    form: JudgementForm | None = None,
    status: int = 200,
) -> HttpResponse:
    judged = selectors.judged_pair_ids(queue, request.user)
    prev_url, next_url = _neighbours(access, queue, judged, assignment)
    sides = None
    if assignment is not None:
        left, right = assignment.left, assignment.right
        left_text = trajectory_text(left.prompt, left.turns.all())
        right_text = trajectory_text(right.prompt, right.turns.all())
        sides = {
            "left": left_text,
            "right": right_text,
            "prompt": assignment.pair.prompt or left_text.prompt,
            "context": left_text.prompt_messages,
        }
        if form is None:
            initial = {}
            if assignment.judgement is not None:
                initial = {
                    "choice": services.side_of_choice(
                        assignment.judgement.choice, left_is_a=assignment.left_is_a
                    ),
                    "rationale": assignment.judgement.rationale,
                }
            form = JudgementForm(initial=initial)
    return render(
        request,
        "review/annotate.html",
        project_context(
            access,
            queue=queue,
            assignment=assignment,
            sides=sides,
            form=form,
            prev_url=prev_url,
            next_url=next_url,
            judged_count=len(judged),
            progress=selectors.queue_progress(queue),
        ),
        status=status,
    )


@login_required
@require_GET
def annotate(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    """The annotator's current pair: the one they hold (resume), or the next free one, locked for them."""
    access = access_project(request.user, slug, Capability.ANNOTATE)
    queue = access_queue(access, queue_id)
    _may_annotate_or_403(access, queue)
    assignment = services.next_pair(queue=queue, annotator=request.user)
    return _annotation_page(request, access, queue, assignment)


@login_required
@require_GET
def pair(request: HttpRequest, slug: str, queue_id: int, pair_id: int) -> HttpResponse:
    """A pair this annotator judged (to review or change) or holds."""
    access = access_project(request.user, slug, Capability.ANNOTATE)
    queue = access_queue(access, queue_id)
    _may_annotate_or_403(access, queue)
    the_pair = get_object_or_404(PreferencePair.objects.select_related("queue"), queue=queue, pk=pair_id)
    assignment = services.assignment_for(pair=the_pair, annotator=request.user, renew=True)
    if assignment is None:
        return redirect("review:annotate", slug, queue.pk)
    return _annotation_page(request, access, queue, assignment)


@login_required
@require_POST
def judge(request: HttpRequest, slug: str, queue_id: int, pair_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    queue = access_queue(access, queue_id)
    _may_annotate_or_403(access, queue)
    the_pair = get_object_or_404(
        PreferencePair.objects.select_related("queue__project"), queue=queue, pk=pair_id
    )
    assignment = services.assignment_for(pair=the_pair, annotator=request.user)
    if assignment is None:
        messages.error(
            request, "Your lock on that pair expired and another annotator took it. Here is the next one."
        )
        return redirect("review:annotate", slug, queue.pk)
    form = JudgementForm(request.POST)
    if form.is_valid():
        try:
            choice = services.choice_from_side(form.cleaned_data["choice"], left_is_a=assignment.left_is_a)
            services.judgement_submit(
                pair=the_pair, annotator=request.user, choice=choice, rationale=form.cleaned_data["rationale"]
            )
        except ValidationError as error:
            for field, field_messages in (
                error.message_dict.items() if hasattr(error, "error_dict") else [(None, error.messages)]
            ):
                form.add_error(field if field in form.fields else None, field_messages)
        else:
            revisiting = assignment.judgement is not None
            following = request.POST.get("next", "")
            if (
                revisiting
                and following
                and url_has_allowed_host_and_scheme(following, allowed_hosts={request.get_host()})
            ):
                return redirect(following)
            return redirect("review:annotate", slug, queue.pk)
    return _annotation_page(request, access, queue, assignment, form=form, status=422)
