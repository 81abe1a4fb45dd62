"""Each user's saved views of the trajectory explorer: a name and the explorer's query string, kept in
its normal form (`webapp.review.explorer.filter_query_string`). The table is rollouts' `SavedView`."""

from __future__ import annotations

from django.http import QueryDict

from webapp.projects.models import Project
from webapp.review.explorer import filter_query_string
from webapp.rollouts.models import SavedView


def saved_view_save(*, project: Project, user, name: str, query: str) -> SavedView:
    """Save the explorer's current query under `name` (replacing the user's view of that name)."""
    params = QueryDict(query.lstrip("?"))
    view, _ = SavedView.objects.update_or_create(
        project=project,
        user=user,
        name=name.strip()[:100],
        defaults={"query": filter_query_string(params)[:2000]},
    )
    return view


def saved_view_delete(*, project: Project, user, view_id: int) -> bool:
    """Delete one of the user's own views; False when they have none with that id."""
    deleted, _ = SavedView.objects.filter(project=project, user=user, pk=view_id).delete()
    return deleted > 0
