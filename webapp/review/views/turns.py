"""Per-turn judgements, posted from the trajectory page and the diff."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from webapp.projects.access import Capability, ProjectAccess, access_project, access_trajectory
from webapp.review import services
from webapp.review.views.common import error_text
from webapp.rollouts.models import Trajectory


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
    access = access_project(request.user, slug, Capability.ANNOTATE, action="judge a turn")
    trajectory = access_trajectory(access, trajectory_id)
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
                other=access_trajectory(access, int(other_id)),
                other_turn_index=_turn_index(request, "other_turn_index")
                if "other_turn_index" in request.POST
                else turn,
                annotator=request.user,
            )
        else:
            raise ValidationError("Choose a verdict: wrong, better or clear.")
    except ValidationError as error:
        messages.error(request, "The turn judgement was not saved: " + error_text(error))
    return _back_to(request, access, trajectory, request.POST.get("turn_index", ""))
