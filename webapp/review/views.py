"""Review pages: the collaboration panel of a trajectory (comments, tags, flags), activity, notifications,
preference queues, the pairwise annotation page, agreement and dataset exports.

Thin: resolve the project through webapp.projects.access (outsiders 404, too small a role 403), then one
service or selector call. Capabilities: read for comments/tags/flags and activity; annotate to write
them and to judge; launch to create queues, snapshots and downloads.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from trainers.texts import trajectory_text
from webapp.core.views import flash_job_cancel, flash_job_queued
from webapp.experiments.services.dpo import dpo_base_model, run_create_dpo
from webapp.projects.access import (
    Capability,
    Forbidden,
    ProjectAccess,
    access_comment,
    access_flag,
    access_project,
    access_queue,
    access_snapshot,
    access_tag,
    access_trajectory,
)
from webapp.projects.views import project_context
from webapp.review import agreement, exports, selectors, services
from webapp.review.forms import (
    AnnotatorsForm,
    CommentForm,
    FlagForm,
    JudgeForm,
    JudgementForm,
    QueueForm,
    TagForm,
)
from webapp.review.models import Comment, PreferencePair, PreferenceQueue, PreferenceSnapshot, QueueJudge
from webapp.rollouts.models import Trajectory


def _error_text(error: ValidationError) -> str:
    return " ".join(error.messages)


# --- collaboration panel -------------------------------------------------------------------------------


def _trajectory(access: ProjectAccess, trajectory_id: int) -> Trajectory:
    return access_trajectory(access, trajectory_id)


def _panel(
    request: HttpRequest, access: ProjectAccess, trajectory: Trajectory, *, comment_form=None, error: str = ""
) -> HttpResponse:
    turn_indexes = list(trajectory.turns.order_by("index").values_list("index", flat=True))
    return render(
        request,
        "review/_collaboration.html",
        project_context(
            access,
            trajectory=trajectory,
            panel=selectors.collaboration_panel(trajectory),
            comment_form=comment_form or CommentForm(turn_indexes=turn_indexes, auto_id="id_comment_%s"),
            tag_form=TagForm(auto_id="id_tag_%s"),
            flag_form=FlagForm(auto_id="id_flag_%s"),
            error=error,
        ),
    )


def _after_write(request: HttpRequest, access: ProjectAccess, trajectory: Trajectory) -> HttpResponse:
    """htmx swaps the panel in place; a plain form post goes back to the trajectory page."""
    if request.htmx:
        return _panel(request, access, trajectory)
    return redirect(
        reverse("rollouts:trajectory_detail", args=[access.project.slug, trajectory.pk]) + "#collaboration"
    )


def _refuse(
    request: HttpRequest, access: ProjectAccess, trajectory: Trajectory, error: ValidationError
) -> HttpResponse:
    if request.htmx:  # htmx swaps 2xx only: the panel comes back with the message in it
        return _panel(request, access, trajectory, error=_error_text(error))
    messages.error(request, _error_text(error))
    return _after_write(request, access, trajectory)


@login_required
@require_GET
def collaboration_panel(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    return _panel(request, access, _trajectory(access, trajectory_id))


@login_required
@require_POST
def comment_create(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    trajectory = _trajectory(access, trajectory_id)
    turn_indexes = list(trajectory.turns.values_list("index", flat=True))
    form = CommentForm(request.POST, turn_indexes=turn_indexes, auto_id="id_comment_%s")
    if not form.is_valid():
        if request.htmx:
            return _panel(request, access, trajectory, comment_form=form)
        messages.error(
            request,
            "The comment was not saved: " + "; ".join(e for errs in form.errors.values() for e in errs),
        )
        return _after_write(request, access, trajectory)
    try:
        services.comment_create(trajectory=trajectory, author=request.user, **form.cleaned_data)
    except ValidationError as error:
        return _refuse(request, access, trajectory, error)
    return _after_write(request, access, trajectory)


def _comment(access: ProjectAccess, comment_id: int) -> Comment:
    return access_comment(access, comment_id)


@login_required
@require_POST
def comment_edit(request: HttpRequest, slug: str, comment_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    comment = _comment(access, comment_id)
    try:
        services.comment_edit(comment=comment, user=request.user, body=request.POST.get("body", ""))
    except ValidationError as error:
        return _refuse(request, access, comment.trajectory, error)
    return _after_write(request, access, comment.trajectory)


@login_required
@require_POST
def comment_delete(request: HttpRequest, slug: str, comment_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    comment = _comment(access, comment_id)
    try:
        services.comment_delete(comment=comment, user=request.user)
    except ValidationError as error:
        return _refuse(request, access, comment.trajectory, error)
    return _after_write(request, access, comment.trajectory)


@login_required
@require_POST
def tag_add(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    trajectory = _trajectory(access, trajectory_id)
    try:
        services.tag_add(trajectory=trajectory, user=request.user, name=request.POST.get("name", ""))
    except ValidationError as error:
        return _refuse(request, access, trajectory, error)
    return _after_write(request, access, trajectory)


@login_required
@require_POST
def tag_remove(request: HttpRequest, slug: str, trajectory_id: int, tag_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    trajectory = _trajectory(access, trajectory_id)
    tag = access_tag(access, tag_id)
    services.tag_remove(trajectory=trajectory, user=request.user, tag=tag)
    return _after_write(request, access, trajectory)


@login_required
@require_POST
def flag_raise(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    trajectory = _trajectory(access, trajectory_id)
    try:
        services.flag_raise(
            trajectory=trajectory,
            user=request.user,
            reason=request.POST.get("reason", ""),
            note=request.POST.get("note", ""),
        )
    except ValidationError as error:
        return _refuse(request, access, trajectory, error)
    return _after_write(request, access, trajectory)


@login_required
@require_POST
def flag_resolve(request: HttpRequest, slug: str, flag_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    flag = access_flag(access, flag_id)
    services.flag_resolve(flag=flag, user=request.user)
    return _after_write(request, access, flag.trajectory)


# --- activity and notifications ------------------------------------------------------------------------


@login_required
@require_GET
def activity(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    return render(
        request,
        "review/activity.html",
        project_context(
            access,
            activities=selectors.recent_activity(project=access.project, limit=200),
            flags=list(selectors.open_flags(project=access.project)[:50]),
        ),
    )


@login_required
@require_http_methods(["GET", "POST"])
def notifications(request: HttpRequest) -> HttpResponse:
    """The signed-in user's mentions across projects. Opening one marks it read; POST marks all read."""
    if request.method == "POST":
        services.notifications_mark_read(user=request.user)
        return redirect("notifications:list")
    items = selectors.notification_list(request.user)
    return render(request, "review/notifications.html", {"notifications": items})


@login_required
@require_GET
def notification_open(request: HttpRequest, notification_id: int) -> HttpResponse:
    notification = get_object_or_404(
        request.user.notifications.select_related("project", "trajectory"), pk=notification_id
    )
    services.notifications_mark_read(user=request.user, ids=[notification.pk])
    # Membership may have ended since: the trajectory page checks access again.
    url = reverse("rollouts:trajectory_detail", args=[notification.project.slug, notification.trajectory_id])
    return redirect(f"{url}#comment-{notification.comment_id}")


# --- queues --------------------------------------------------------------------------------------------


def _queue(access: ProjectAccess, queue_id: int) -> PreferenceQueue:
    return access_queue(access, queue_id)


@login_required
@require_GET
def queue_list(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    queues = selectors.queue_list(access=access)
    return render(request, "review/queue_list.html", project_context(access, queues=queues))


@login_required
@require_http_methods(["GET", "POST"])
def queue_create(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH)
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


@login_required
@require_GET
def queue_detail(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    queue = _queue(access, queue_id)
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
            **_judges_context(access, queue),
        )
    return render(request, "review/queue_detail.html", project_context(access, **context))


def _judges_context(access: ProjectAccess, queue: PreferenceQueue, form: JudgeForm | None = None) -> dict:
    judges = selectors.queue_judges(queue)
    return {
        "judges": judges,
        "judges_active": any(judge.is_active for judge in judges),
        "judge_form": form or JudgeForm(project=access.project),
    }


@login_required
@require_GET
def queue_judges(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    """The judges panel alone, polled by htmx while a judge is queued or judging."""
    access = access_project(request.user, slug, Capability.LAUNCH)
    queue = _queue(access, queue_id)
    context = _judges_context(access, queue)
    response = render(request, "review/_judges.html", project_context(access, queue=queue, **context))
    if not context["judges_active"] and request.headers.get("HX-Request"):
        response["HX-Refresh"] = "true"  # a judge just ended: reload so agreement and bias include it
    return response


@login_required
@require_POST
def queue_judge_start(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    """Ask an LLM-judge criterion to annotate the queue (both orders, on a worker)."""
    access = access_project(request.user, slug, Capability.LAUNCH)
    queue = _queue(access, queue_id)
    form = JudgeForm(request.POST, project=access.project)
    if form.is_valid():
        try:
            judge = services.queue_judge_start(queue=queue, user=request.user, **form.service_arguments())
        except ValidationError as error:
            messages.error(request, _error_text(error))
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
    return redirect(reverse("review:queue_detail", args=[slug, queue.pk]) + "#judges")


@login_required
@require_POST
def queue_judge_snapshots(request: HttpRequest, slug: str, queue_id: int, judge_id: int) -> HttpResponse:
    """Whether this judge's verdicts vote in the queue's next dataset snapshots."""
    access = access_project(request.user, slug, Capability.LAUNCH)
    queue = _queue(access, queue_id)
    judge = get_object_or_404(QueueJudge, queue=queue, pk=judge_id)
    services.queue_judge_set_in_snapshots(judge=judge, in_snapshots=request.POST.get("in_snapshots") == "on")
    return redirect(reverse("review:queue_detail", args=[slug, queue.pk]) + "#judges")


@login_required
@require_POST
def queue_judge_cancel(request: HttpRequest, slug: str, queue_id: int, judge_id: int) -> HttpResponse:
    """Stop an LLM judge (its answers so far stay; asking it again resumes from them)."""
    access = access_project(request.user, slug, Capability.LAUNCH)
    queue = _queue(access, queue_id)
    judge = get_object_or_404(QueueJudge, queue=queue, pk=judge_id)
    flash_job_cancel(request, judge, lambda: services.queue_judge_cancel(judge=judge))
    return redirect(reverse("review:queue_detail", args=[slug, queue.pk]) + "#judges")


@login_required
@require_POST
def queue_annotators(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    """Replace the queue's annotators (judgements already made stay)."""
    access = access_project(request.user, slug, Capability.LAUNCH)
    queue = _queue(access, queue_id)
    form = AnnotatorsForm(request.POST, project=access.project)
    if not form.is_valid():
        messages.error(request, "Choose the annotators among the project's members.")
    else:
        try:
            services.queue_assign(
                queue=queue, user=request.user, annotators=list(form.cleaned_data["annotators"])
            )
        except ValidationError as error:
            messages.error(request, _error_text(error))
        else:
            messages.success(request, "Annotators updated.")
    return redirect("review:queue_detail", slug, queue.pk)


def _matrix_rows(summary: agreement.AgreementSummary) -> list[dict]:
    return [
        {
            "rater": first,
            "is_judge": summary.is_judge(first),
            "cells": [summary.cell(first, second) if first != second else None for second in summary.raters],
        }
        for first in summary.raters
    ]


def _may_annotate_or_403(access: ProjectAccess, queue: PreferenceQueue) -> None:
    if not queue.annotatable_by(access.membership):
        raise Forbidden("You are not an annotator of this queue.")


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
    prev_url = next_url = None
    if assignment is not None:
        current = assignment.pair.pk
        position = judged.index(current) if current in judged else len(judged)
        if position > 0:
            prev_url = reverse("review:pair", args=[access.project.slug, queue.pk, judged[position - 1]])
        if position < len(judged) - 1:
            next_url = reverse("review:pair", args=[access.project.slug, queue.pk, judged[position + 1]])
        elif position == len(judged) - 1:
            next_url = reverse("review:annotate", args=[access.project.slug, queue.pk])
    elif judged:
        prev_url = reverse("review:pair", args=[access.project.slug, queue.pk, judged[-1]])
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
    queue = _queue(access, queue_id)
    _may_annotate_or_403(access, queue)
    assignment = services.next_pair(queue=queue, annotator=request.user)
    return _annotation_page(request, access, queue, assignment)


@login_required
@require_GET
def pair(request: HttpRequest, slug: str, queue_id: int, pair_id: int) -> HttpResponse:
    """A pair this annotator judged (to review or change) or holds."""
    access = access_project(request.user, slug, Capability.ANNOTATE)
    queue = _queue(access, queue_id)
    _may_annotate_or_403(access, queue)
    the_pair = get_object_or_404(PreferencePair, queue=queue, pk=pair_id)
    assignment = services.assignment_for(pair=the_pair, annotator=request.user)
    if assignment is None:
        return redirect("review:annotate", slug, queue.pk)
    return _annotation_page(request, access, queue, assignment)


@login_required
@require_POST
def judge(request: HttpRequest, slug: str, queue_id: int, pair_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE)
    queue = _queue(access, queue_id)
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


# --- per-turn preferences ------------------------------------------------------------------------------


def _back_to(request: HttpRequest, access: ProjectAccess, trajectory: Trajectory, turn: str) -> HttpResponse:
    """Back where the judgement was made: the page in `next` (the diff), else the trajectory at the turn."""
    following = request.POST.get("next", "")
    if following and url_has_allowed_host_and_scheme(following, allowed_hosts={request.get_host()}):
        return redirect(following)
    url = reverse("rollouts:trajectory_detail", args=[access.project.slug, trajectory.pk])
    return redirect(f"{url}#turn-{turn}" if turn.isdigit() else url)


def _turn_index(request: HttpRequest, name: str = "turn_index") -> int | None:
    value = request.POST.get(name, "")
    return int(value) if value.isdigit() else None


@login_required
@require_POST
def turn_judge(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    """Mark the turn where the trajectory went wrong (`verdict=wrong`), prefer its turn over another
    trajectory's at the same point (`verdict=better`, `other`), or withdraw one's marks (`verdict=clear`)."""
    access = access_project(request.user, slug, Capability.ANNOTATE)
    trajectory = _trajectory(access, trajectory_id)
    verdict = request.POST.get("verdict", "")
    turn = _turn_index(request)
    try:
        if verdict == "clear":
            services.turn_judgements_withdraw(trajectory=trajectory, annotator=request.user)
        elif verdict == "wrong":
            services.turn_mark_wrong(trajectory=trajectory, annotator=request.user, turn_index=turn)
        elif verdict == "better":
            other_id = request.POST.get("other", "")
            if not other_id.isdigit():
                raise ValidationError("Say which trajectory this turn beats.")
            services.turn_prefer(
                trajectory=trajectory,
                turn_index=turn,
                other=_trajectory(access, int(other_id)),
                other_turn_index=_turn_index(request, "other_turn_index")
                if "other_turn_index" in request.POST
                else turn,
                annotator=request.user,
            )
        else:
            raise ValidationError("Choose a verdict: wrong, better or clear.")
    except ValidationError as error:
        messages.error(request, "The turn judgement was not saved: " + _error_text(error))
    return _back_to(request, access, trajectory, request.POST.get("turn_index", ""))


# --- snapshots and exports -----------------------------------------------------------------------------


@login_required
@require_POST
def snapshot_create(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH)
    queue = _queue(access, queue_id)
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


def _snapshot(access: ProjectAccess, snapshot_id: int) -> PreferenceSnapshot:
    return access_snapshot(access, snapshot_id)


@login_required
@require_GET
def snapshot_dpo(request: HttpRequest, slug: str, snapshot_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH)
    return exports.download_response(_snapshot(access, snapshot_id), "dpo")


@login_required
@require_POST
def snapshot_dpo_run(request: HttpRequest, slug: str, snapshot_id: int) -> HttpResponse:
    """One click: a DPO run on this preference dataset with the default knobs (trainers/learn/dpo.py)."""
    access = access_project(request.user, slug, Capability.LAUNCH)
    snapshot = _snapshot(access, snapshot_id)
    # The one knob beside the button: how many steps (the rest are trainers/learn/dpo.py's defaults; the API
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
            start_from=selectors.project_checkpoint(access.project, start) if start else None,
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
    access = access_project(request.user, slug, Capability.LAUNCH)
    return exports.download_response(_snapshot(access, snapshot_id), "dpo-text")


@login_required
@require_GET
def snapshot_parquet(request: HttpRequest, slug: str, snapshot_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH)
    return exports.download_response(_snapshot(access, snapshot_id), "parquet")
