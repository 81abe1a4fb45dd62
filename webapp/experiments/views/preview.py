"""The rubric preview's trajectory picker: any trajectory of the project, typed by id or found by its task
text (the options a datalist offers, refreshed over htmx as one types), and a trajectory page's "preview a
rubric on this" (?preview=<id> opens the rubric form with it picked)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from webapp.experiments.forms import RubricPreviewForm
from webapp.projects.access import Capability, ProjectAccess, access_project
from webapp.rollouts.selectors import runs as rollout_selectors


def preview_picker_form(request: HttpRequest, access: ProjectAccess) -> RubricPreviewForm:
    """The rubric form's preview part, with the trajectory of ?preview=<id> picked when it is one of the
    project's, and the newest trajectories offered."""
    initial = {}
    asked = request.GET.get("preview", "").strip().lstrip("#")
    if asked.isdigit():
        stored = rollout_selectors.project_trajectory(project=access.project, trajectory_id=int(asked))
        if stored is not None:
            initial["trajectory"] = rollout_selectors.preview_trajectory_label(stored)
    form = RubricPreviewForm(
        initial=initial,
        search_url=reverse("experiments:rubric_preview_trajectories", args=[access.project.slug]),
    )
    form.options = rollout_selectors.preview_trajectory_options(project=access.project)
    return form


@login_required
@require_GET
def rubric_preview_trajectories(request: HttpRequest, slug: str) -> HttpResponse:
    """htmx partial: the picker's options for what was typed (?preview-trajectory=…): by id or task text."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="preview a rubric")
    query = request.GET.get(f"{RubricPreviewForm.prefix}-trajectory", "")[:300]
    options = rollout_selectors.preview_trajectory_options(project=access.project, query=query)
    return render(request, "experiments/_preview_trajectory_options.html", {"options": options})
