"""The trajectory explorer: the page (with its htmx results part), saved views, and its JSON API.

Thin: resolve the project through webapp.projects.access (outsiders 404, every member may read),
parse the query string with forms.ExplorerForm, ask explorer.explorer_page for one keyset page. The
page's URLs are rollouts' (webapp/rollouts/urls_explorer.py routes here).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from webapp.projects.access import Capability, NotFound, ProjectAccess, access_project
from webapp.projects.views import project_context
from webapp.review import explorer, selectors
from webapp.review.explorer import InvalidCursor
from webapp.review.forms import ExplorerForm
from webapp.review.services import saved_views
from webapp.rollouts.compare_many import MAX_TRAJECTORIES, MIN_TRAJECTORIES


def _results(request: HttpRequest, access: ProjectAccess, form: ExplorerForm) -> dict:
    """What the results part shows: the page (or the form's errors), and the links around it."""
    query = explorer.filter_query_string(request.GET)
    context = {
        "form": form,
        "query": query,
        "page": None,
        "rows": [],
        "notice": "",
        # Ticked rows open the turn-by-turn comparison (any runs, any steps): this many at most.
        "compare_limits": (MIN_TRAJECTORIES, MAX_TRAJECTORIES),
    }
    if not form.is_valid():
        return context
    try:
        page = explorer.explorer_page(
            project=access.project, filters=form.filters(), cursor=request.GET.get("cursor") or None
        )
    except InvalidCursor as error:
        context["notice"] = f"{error} Showing the first page."
        page = explorer.explorer_page(project=access.project, filters=form.filters())
    links = explorer.row_links(access.project.slug)
    context.update(
        page=page,
        rows=[(row, links(row.trajectory)) for row in page.rows],
        notice=context["notice"] or page.notice,
    )
    return context


@login_required
@require_GET
def explorer_view(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    form = ExplorerForm(request.GET, project=access.project)
    results = _results(request, access, form)
    context = project_context(access, **results)
    # htmx swaps only the results when a filter changes or a page link is followed.
    if request.htmx and request.htmx.target == "explorer-results":
        response = render(request, "rollouts/explorer_results.html", context)
        # The address bar follows the filters, without the empty fields a form submits.
        cursor = request.GET.get("cursor", "")
        query = "&".join(
            part for part in (results["query"], urlencode({"cursor": cursor}) if cursor else "") if part
        )
        response["HX-Push-Url"] = f"{request.path}?{query}" if query else request.path
        return response
    context.update(
        v=form.submitted(),
        saved_views=selectors.saved_view_list(project=access.project, user=request.user),
        criterion_names=explorer.criterion_names(access.project),
    )
    return render(request, "rollouts/explorer.html", context)


@login_required
@require_POST
def saved_view_save(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    name = request.POST.get("name", "").strip()
    query = request.POST.get("query", "")
    if not name:
        messages.error(request, "Give the view a name.")
    else:
        view = saved_views.saved_view_save(project=access.project, user=request.user, name=name, query=query)
        messages.success(request, f"Saved the view “{view.name}”.")
        query = view.query
    url = reverse("rollouts:explorer", args=[slug])
    query = explorer.filter_query_string(_query_dict(query))
    return redirect(f"{url}?{query}" if query else url)


@login_required
@require_POST
def saved_view_delete(request: HttpRequest, slug: str, view_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    if not saved_views.saved_view_delete(project=access.project, user=request.user, view_id=view_id):
        raise NotFound("No such saved view.")  # someone else's views do not exist, as far as you can tell
    messages.success(request, "Deleted the saved view.")
    return redirect("rollouts:explorer", slug)


def _query_dict(query: str) -> QueryDict:
    return QueryDict(query.lstrip("?"))


# --- JSON API -----------------------------------------------------------------------------------------
