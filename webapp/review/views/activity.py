"""The project's activity page and the signed-in user's notifications (across projects)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from webapp.projects.access import Capability, access_project
from webapp.projects.views import project_context
from webapp.review import activity_feed, selectors, services
from webapp.review.forms import ActivityFilterForm


@login_required
@require_GET
def activity(request: HttpRequest, slug: str) -> HttpResponse:
    """Who did what, newest first: filtered by kind and person, runs of judgements as one line, and where
    what is new since the reader's last visit ends (the visit is recorded as this page is read)."""
    access = access_project(request.user, slug, Capability.READ)
    project = access.project
    form = ActivityFilterForm(request.GET or None, people=activity_feed.activity_people(project))
    filters = form.cleaned_data if form.is_valid() else {}
    since = services.activity_visit(project=project, user=request.user)
    lines = activity_feed.activity_page(
        project, kind=filters.get("kind", ""), person=filters.get("person", ""), since=since
    )
    return render(
        request,
        "review/activity.html",
        project_context(
            access,
            lines=lines,
            since=since,
            new_count=sum(line.count for line in lines if line.new),
            filter_form=form,
            filtered=bool(filters.get("kind") or filters.get("person")),
            flags=list(selectors.open_flags(project=project)[:50]),
        ),
    )


@login_required
@require_http_methods(["GET", "POST"])
def notifications(request: HttpRequest) -> HttpResponse:
    """The signed-in user's mentions and replies across projects. Opening one marks it read; POST marks all read."""
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
