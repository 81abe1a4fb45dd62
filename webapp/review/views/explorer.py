"""The trajectory explorer: the page (with its htmx results part), saved views, and its JSON API.

Thin: resolve the project through webapp.projects.access (outsiders 404, every member may read),
parse the query string with forms.ExplorerForm, ask explorer.explorer_page for one keyset page.
The explorer is review's, whole: its query (`webapp.review.explorer`), form, saved-view writes, these
pages and API, their URLs (`webapp/review/urls_explorer.py`, `review:explorer`) and templates
(`templates/review/explorer*.html`). Only what ingestion writes for it stays in rollouts: the search
documents and criterion rows (`webapp.rollouts.search`) and the saved views' table.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.api.schema import form_parameters
from webapp.projects.access import Capability, NotFound, ProjectAccess, access_project
from webapp.projects.views import project_context
from webapp.review import explorer
from webapp.review.explorer import ExplorerPage, InvalidCursor
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
        response = render(request, "review/explorer_results.html", context)
        # The address bar follows the filters, without the empty fields a form submits.
        cursor = request.GET.get("cursor", "")
        query = "&".join(
            part for part in (results["query"], urlencode({"cursor": cursor}) if cursor else "") if part
        )
        response["HX-Push-Url"] = f"{request.path}?{query}" if query else request.path
        return response
    context.update(
        v=form.submitted(),
        saved_views=explorer.saved_view_list(project=access.project, user=request.user),
        criterion_names=explorer.criterion_names(access.project),
    )
    return render(request, "review/explorer.html", context)


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
    url = reverse("review:explorer", args=[slug])
    query = explorer.filter_query_string(_query_dict(query))
    return redirect(f"{url}?{query}" if query else url)


@login_required
@require_POST
def saved_view_delete(request: HttpRequest, slug: str, view_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    if not saved_views.saved_view_delete(project=access.project, user=request.user, view_id=view_id):
        raise NotFound("No such saved view.")  # someone else's views do not exist, as far as you can tell
    messages.success(request, "Deleted the saved view.")
    return redirect("review:explorer", slug)


def _query_dict(query: str) -> QueryDict:
    return QueryDict(query.lstrip("?"))


# --- JSON API -----------------------------------------------------------------------------------------


# The explorer page's form validates these; the schema is derived from it (`form_parameters`).
_FILTER_PARAMETERS = [
    *form_parameters(
        ExplorerForm,
        {
            "run": "run ids of this project (repeat the parameter); all runs when absent",
            "criterion": "a rubric component's name",
            "tag": "a tag's name",
            "q": 'full text: words, "phrases", or, -exclusions',
        },
    ),
    OpenApiParameter("cursor", OpenApiTypes.STR, description="`next` or `previous` of an earlier page"),
]

_ROW_FIELDS = {
    "id": serializers.IntegerField(),
    "run": inline_serializer(
        "ExplorerRun", {"id": serializers.IntegerField(), "name": serializers.CharField()}
    ),
    "step": serializers.IntegerField(),
    "split": serializers.CharField(),
    "group_index": serializers.IntegerField(),
    "sample_index": serializers.IntegerField(),
    "task_id": serializers.CharField(),
    "reward": serializers.FloatField(),
    "advantage": serializers.FloatField(allow_null=True),
    "status": serializers.CharField(),
    "num_turns": serializers.IntegerField(),
    "num_tool_calls": serializers.IntegerField(),
    "components": serializers.ListField(child=serializers.DictField()),
    "tags": serializers.ListField(child=serializers.CharField()),
    "snippet": serializers.ListField(
        child=inline_serializer(
            "SnippetSegment", {"text": serializers.CharField(), "match": serializers.BooleanField()}
        ),
        help_text="for a text query: an excerpt as segments; `match` marks what the query found",
    ),
    "links": inline_serializer(
        "ExplorerLinks",
        {
            "trajectory": serializers.CharField(),
            "group": serializers.CharField(),
            "run": serializers.CharField(),
        },
    ),
}
_PAGE = inline_serializer(
    "ExplorerPage",
    {
        "results": inline_serializer("ExplorerTrajectory", _ROW_FIELDS, many=True),
        "next": serializers.CharField(allow_null=True, help_text="URL of the next page"),
        "previous": serializers.CharField(allow_null=True, help_text="URL of the previous page"),
        "notice": serializers.CharField(),
    },
)


def _row_json(row: explorer.ExplorerRow, links: dict[str, str]) -> dict:
    t = row.trajectory
    return {
        "id": t.pk,
        "run": {"id": t.run_id, "name": t.run.name},
        "step": t.step,
        "split": t.split,
        "group_index": t.group_index,
        "sample_index": t.sample_index,
        "task_id": t.task_id,
        "reward": t.reward,
        "advantage": t.advantage,
        "status": t.status,
        "num_turns": t.num_turns,
        "num_tool_calls": t.num_tool_calls,
        "components": t.components,
        "tags": [tag.name for tag in row.tags],
        "snippet": [{"text": text, "match": match} for text, match in row.snippet],
        "links": links,
    }


class ProjectTrajectoryExplorerView(APIView):
    """The explorer as JSON: the page's filters as query parameters, keyset pages via `cursor`."""

    @extend_schema(
        parameters=_FILTER_PARAMETERS,
        responses={200: _PAGE},
        summary="Find a project's trajectories (the explorer's filters, keyset pagination)",
    )
    def get(self, request: Request, slug: str) -> Response:
        access = access_project(request.user, slug, Capability.READ)
        form = ExplorerForm(request.query_params, project=access.project)
        if not form.is_valid():
            raise ValidationError({key: [str(m) for m in errors] for key, errors in form.errors.items()})
        try:
            page: ExplorerPage = explorer.explorer_page(
                project=access.project,
                filters=form.filters(),
                cursor=request.query_params.get("cursor") or None,
            )
        except InvalidCursor as error:
            raise ValidationError({"cursor": [str(error)]}) from error
        links = explorer.row_links(slug)
        base = request.build_absolute_uri(request.path)
        query = explorer.filter_query_string(request.query_params)

        def page_url(cursor: str | None) -> str | None:
            return None if cursor is None else f"{base}?{query}{'&' if query else ''}cursor={cursor}"

        return Response(
            {
                "results": [_row_json(row, links(row.trajectory)) for row in page.rows],
                "next": page_url(page.next_cursor),
                "previous": page_url(page.previous_cursor),
                "notice": page.notice,
            }
        )
