"""The discussion panel of a trajectory: threads of comments and replies, tags and flags; and the thread
beside a turn. htmx swaps the panel in place after each write; a plain form post goes back to the
trajectory page. Teammates' open pages fetch the panel again when its discussion changes (ws/review/)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from webapp.projects.access import (
    Capability,
    ProjectAccess,
    access_comment,
    access_flag,
    access_project,
    access_tag,
    access_trajectory,
)
from webapp.projects.views import project_context
from webapp.review import selectors, services
from webapp.review.forms import CommentForm, FlagForm, TagForm
from webapp.review.views.common import error_text
from webapp.rollouts.models import Trajectory


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
            panel=selectors.collaboration_panel(
                trajectory, request.user, can_launch=access.can(Capability.LAUNCH)
            ),
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
        return _panel(request, access, trajectory, error=error_text(error))
    messages.error(request, error_text(error))
    return _after_write(request, access, trajectory)


@login_required
@require_GET
def collaboration_panel(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    return _panel(request, access, access_trajectory(access, trajectory_id))


@login_required
@require_POST
def comment_create(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE, action="comment")
    trajectory = access_trajectory(access, trajectory_id)
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
    data = dict(form.cleaned_data)
    reply_to = data.pop("reply_to", None)
    if reply_to is not None:
        data["reply_to"] = access_comment(access, reply_to)
    try:
        services.comment_create(trajectory=trajectory, author=request.user, **data)
    except ValidationError as error:
        return _refuse(request, access, trajectory, error)
    return _after_write(request, access, trajectory)


@login_required
@require_POST
def thread_resolve(request: HttpRequest, slug: str, comment_id: int) -> HttpResponse:
    """POST resolved=1 settles the comment's thread, resolved=0 opens it again."""
    access = access_project(request.user, slug, Capability.ANNOTATE, action="resolve a thread")
    comment = access_comment(access, comment_id)
    resolved = request.POST.get("resolved", "1") != "0"
    try:
        services.comment_thread_resolve(comment=comment, user=request.user, resolved=resolved)
    except ValidationError as error:
        return _refuse(request, access, comment.trajectory, error)
    return _after_write(request, access, comment.trajectory)


@login_required
@require_GET
def turn_discussion(request: HttpRequest, slug: str, trajectory_id: int, turn_index: int) -> HttpResponse:
    """The marker and threads beside one turn (fetched again when that turn's discussion changes)."""
    access = access_project(request.user, slug, Capability.READ)
    trajectory = access_trajectory(access, trajectory_id)
    turn = trajectory.turns.filter(index=turn_index).first()
    if turn is None:
        raise Http404("No such turn.")
    selectors.annotate_turn_threads(trajectory, [turn])
    return render(
        request, "review/_turn_discussion.html", project_context(access, trajectory=trajectory, turn=turn)
    )


@login_required
@require_POST
def comment_edit(request: HttpRequest, slug: str, comment_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE, action="edit a comment")
    comment = access_comment(access, comment_id)
    try:
        services.comment_edit(comment=comment, user=request.user, body=request.POST.get("body", ""))
    except ValidationError as error:
        return _refuse(request, access, comment.trajectory, error)
    return _after_write(request, access, comment.trajectory)


@login_required
@require_POST
def comment_delete(request: HttpRequest, slug: str, comment_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE, action="delete a comment")
    comment = access_comment(access, comment_id)
    try:
        services.comment_delete(comment=comment, user=request.user)
    except ValidationError as error:
        return _refuse(request, access, comment.trajectory, error)
    return _after_write(request, access, comment.trajectory)


@login_required
@require_POST
def tag_add(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE, action="tag a trajectory")
    trajectory = access_trajectory(access, trajectory_id)
    try:
        services.tag_add(trajectory=trajectory, user=request.user, name=request.POST.get("name", ""))
    except ValidationError as error:
        return _refuse(request, access, trajectory, error)
    return _after_write(request, access, trajectory)


@login_required
@require_POST
def tag_remove(request: HttpRequest, slug: str, trajectory_id: int, tag_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE, action="remove a tag")
    trajectory = access_trajectory(access, trajectory_id)
    tag = access_tag(access, tag_id)
    services.tag_remove(trajectory=trajectory, user=request.user, tag=tag)
    return _after_write(request, access, trajectory)


@login_required
@require_POST
def flag_raise(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.ANNOTATE, action="flag a trajectory")
    trajectory = access_trajectory(access, trajectory_id)
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
    access = access_project(request.user, slug, Capability.ANNOTATE, action="resolve a flag")
    flag = access_flag(access, flag_id)
    services.flag_resolve(flag=flag, user=request.user)
    return _after_write(request, access, flag.trajectory)
