"""HTTP side of the live pages: curve history (metrics.json), recent event summaries (events.json) for
the log tail and rollout feed, and the compare page. Every lookup goes through the access helper."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from webapp.experiments.models import Run
from webapp.live import selectors
from webapp.projects.access import access_object, access_project
from webapp.projects.views import project_context

EVENT_TYPES = ("log", "trajectories", "checkpoint", "status", "metrics")
MAX_EVENTS = 500
MAX_COMPARED_RUNS = 8


def _run(request: HttpRequest, slug: str, run_id: int) -> Run:
    return access_object(request.user, Run.objects.filter(project__slug=slug), need="read", pk=run_id)


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value not in (None, "") else default
    except ValueError:
        return default


@require_GET
def metrics_json(request: HttpRequest, slug: str, run_id: int) -> JsonResponse:
    """?keys=reward/mean,criterion/*&x=step|time|tokens&max_points=2000 (no keys: every key)."""
    run = _run(request, slug, run_id)
    x = request.GET.get("x", "step")
    if x not in selectors.X_AXES:
        return JsonResponse({"error": f"x must be one of {', '.join(selectors.X_AXES)}"}, status=400)
    max_points = _int(request.GET.get("max_points"), selectors.DEFAULT_MAX_POINTS)
    # Read the high-water mark first: a point stored after it may also appear in the curves, and the
    # page drops live points at or behind a curve's last x, so the overlap never shows twice.
    last_seq = Run.objects.filter(pk=run.pk).values_list("last_seq", flat=True)[0]
    available = selectors.metric_keys(run)
    requested = [k for k in request.GET.get("keys", "").split(",") if k.strip()]
    keys = selectors.expand_keys([k.strip() for k in requested], available) if requested else available
    series = selectors.metric_series(run, keys, max_points=max_points, x=x)
    return JsonResponse(
        {
            "run": run.pk,
            "x": x,
            "last_seq": last_seq,
            "keys": available,
            "series": {key: s.as_json() for key, s in series.items()},
        }
    )


@require_GET
def events_json(request: HttpRequest, slug: str, run_id: int) -> JsonResponse:
    """?type=log&limit=200&until_seq=N: the newest stored summaries of one type, oldest first."""
    run = _run(request, slug, run_id)
    kind = request.GET.get("type", "log")
    if kind not in EVENT_TYPES:
        return JsonResponse({"error": f"type must be one of {', '.join(EVENT_TYPES)}"}, status=400)
    limit = max(1, min(MAX_EVENTS, _int(request.GET.get("limit"), 200)))
    until = request.GET.get("until_seq")
    events = selectors.recent_events(run, kind, limit=limit, until_seq=_int(until, 0) if until else None)
    return JsonResponse({"run": run.pk, "type": kind, "events": events})


@login_required
@require_GET
def compare(request: HttpRequest, slug: str) -> HttpResponse:
    """/p/<slug>/compare/?runs=1,2,3 — overlay curves, list the knobs that differ."""
    access = access_project(request.user, slug, "read")
    # ?runs=1,2,3 (links) or ?run=1&run=2 (the picker form's checkboxes)
    ids: list[int] = []
    for part in [*request.GET.get("runs", "").split(","), *request.GET.getlist("run")]:
        if part.strip().isdigit() and int(part) not in ids:
            ids.append(int(part))
    ids = ids[:MAX_COMPARED_RUNS]
    found = {
        run.pk: run
        for run in Run.objects.filter(project=access.project, pk__in=ids).select_related(
            "environment_version__environment", "rubric_version__rubric"
        )
    }
    runs = [found[i] for i in ids if i in found]  # ids of other projects' runs are simply not there
    recent = Run.objects.filter(project=access.project).order_by("-created_at", "-pk")[:30]
    return render(
        request,
        "live/compare.html",
        project_context(
            access,
            runs=runs,
            recent_runs=recent,
            selected_ids=[run.pk for run in runs],
            differences=selectors.config_differences(runs),
            live_runs=[
                {
                    "id": run.pk,
                    "name": run.name,
                    "status": run.status,
                    "active": run.is_active,
                    "metrics_url": reverse("live:metrics_json", args=[slug, run.pk]),
                    "ws_path": f"/ws/runs/{run.pk}/",
                }
                for run in runs
            ],
        ),
    )
