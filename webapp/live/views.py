"""HTTP side of the live pages: curve history (metrics.json), recent event summaries (events.json) for
the log tail and rollout feed, per-step histograms (histograms.json) and the trajectories of one of their
cells (bin.json), and the compare page. Every lookup goes through the access helper."""

from __future__ import annotations

import math

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from webapp.core.views import json_bytes_response
from webapp.experiments.models import Run
from webapp.live import selectors
from webapp.projects.access import Capability, access_project, access_run
from webapp.projects.views import project_context
from webapp.rollouts.selectors import metrics
from webapp.rollouts.selectors import runs as rollout_selectors

EVENT_TYPES = ("log", "trajectories", "checkpoint", "status", "metrics", "phase", "experience", "task_pool")
SPLITS = ("train", "eval")
MAX_EVENTS = 500
MAX_COMPARED_RUNS = selectors.MAX_COMPARED_RUNS


def _run(request: HttpRequest, slug: str, run_id: int) -> Run:
    return access_run(access_project(request.user, slug), run_id)


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value not in (None, "") else default
    except ValueError:
        return default


def _float(value: str | None) -> float | None:
    try:
        number = float(value) if value not in (None, "") else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None


def _choice(request: HttpRequest, name: str, choices: tuple[str, ...] | dict, default: str) -> str | None:
    value = request.GET.get(name, default)
    return value if value in choices else None


def _refused(name: str, choices: tuple[str, ...] | dict) -> JsonResponse:
    return JsonResponse({"error": f"{name} must be one of {', '.join(choices)}"}, status=400)


@require_GET
def metrics_json(request: HttpRequest, slug: str, run_id: int) -> JsonResponse:
    """?keys=reward/mean,criterion/*&x=step|time|tokens&max_points=2000&start=&end= (no keys: every key;
    start/end: the step range, a zoom)."""
    run = _run(request, slug, run_id)
    x = request.GET.get("x", "step")
    if x not in metrics.X_AXES:
        return JsonResponse({"error": f"x must be one of {', '.join(metrics.X_AXES)}"}, status=400)
    max_points = _int(request.GET.get("max_points"), metrics.DEFAULT_MAX_POINTS)
    steps: dict[str, int] = {}
    for name in ("start", "end"):
        value = request.GET.get(name)
        if value not in (None, ""):
            if not value.isdigit() or int(value) > 2**31 - 1:
                return JsonResponse({"error": f"{name} must be a step (0 … 2,147,483,647)"}, status=400)
            steps[name] = int(value)
    if steps.get("start", 0) > steps.get("end", 2**31 - 1):
        return JsonResponse({"error": "end must not be before start"}, status=400)
    # Read the high-water mark first: a point stored after it may also appear in the curves, and the
    # page drops live points at or behind a curve's last x, so the overlap never shows twice.
    last_seq = Run.objects.filter(pk=run.pk).values_list("last_seq", flat=True)[0]
    available = metrics.metric_keys(run)
    requested = [k for k in request.GET.get("keys", "").split(",") if k.strip()]
    keys = metrics.expand_keys([k.strip() for k in requested], available) if requested else available
    series = metrics.metric_series(
        run, keys, max_points=max_points, x=x, start=steps.get("start"), end=steps.get("end")
    )
    return json_bytes_response(
        {
            "run": run.pk,
            "x": x,
            "last_seq": last_seq,
            "keys": available,
            "series": {key: s.as_json() for key, s in series.items()},
        }
    )


@require_GET
def health_json(request: HttpRequest, slug: str, run_id: int) -> JsonResponse:
    """The async-health panel's sample counts: staleness histogram, truncated / aborted share per step."""
    run = _run(request, slug, run_id)
    return JsonResponse({"run": run.pk, **rollout_selectors.async_health(run=run)})


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


@require_GET
def histograms_json(request: HttpRequest, slug: str, run_id: int) -> JsonResponse:
    """?field=reward|length&split=train|eval&bins=20: per step, the trajectories in each bin."""
    run = _run(request, slug, run_id)
    field = _choice(request, "field", selectors.HISTOGRAM_FIELDS, "reward")
    split = _choice(request, "split", SPLITS, "train")
    if field is None:
        return _refused("field", selectors.HISTOGRAM_FIELDS)
    if split is None:
        return _refused("split", SPLITS)
    bins = _int(request.GET.get("bins"), selectors.DEFAULT_BINS)
    return JsonResponse(
        {"run": run.pk, **selectors.step_histograms(run, field=field, split=split, bins=bins)}
    )


@require_GET
def bin_json(request: HttpRequest, slug: str, run_id: int) -> JsonResponse:
    """?field=reward&split=train&step_min=3&step_max=3&min=0.25&max=0.5[&last=1]: one histogram cell's
    trajectories, best reward first (at most 50)."""
    run = _run(request, slug, run_id)
    field = _choice(request, "field", selectors.HISTOGRAM_FIELDS, "reward")
    split = _choice(request, "split", SPLITS, "train")
    if field is None:
        return _refused("field", selectors.HISTOGRAM_FIELDS)
    if split is None:
        return _refused("split", SPLITS)
    step_min = _int(request.GET.get("step_min"), 0)
    step_max = _int(request.GET.get("step_max"), step_min)
    rows = selectors.bin_trajectories(
        run,
        field=field,
        split=split,
        step_min=step_min,
        step_max=step_max,
        low=_float(request.GET.get("min")),
        high=_float(request.GET.get("max")),
        last_bin=request.GET.get("last") == "1",
    )
    return JsonResponse({"run": run.pk, "trajectories": rows})


@login_required
@require_GET
def compare(request: HttpRequest, slug: str) -> HttpResponse:
    """/p/<slug>/compare/?runs=1,2,3 — overlay curves, list the knobs that differ."""
    access = access_project(request.user, slug, Capability.READ)
    # ?runs=1,2,3 (links) or ?run=1&run=2 (the picker form's checkboxes)
    ids: list[int] = []
    for part in [*request.GET.get("runs", "").split(","), *request.GET.getlist("run")]:
        if part.strip().isdigit() and int(part) not in ids:
            ids.append(int(part))
    # More than the chart overlays: the first MAX_COMPARED_RUNS, and the page says so (never a silent cut).
    picked, ids = len(ids), ids[:MAX_COMPARED_RUNS]
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
            picked=picked,
            left_out=picked - len(ids),
            max_compared=MAX_COMPARED_RUNS,
            differences=selectors.config_differences(runs),
            live_runs=[
                {
                    "id": run.pk,
                    "name": run.name,
                    "status": run.status,
                    "active": run.is_active,
                    "metrics_url": reverse("live:metrics_json", args=[slug, run.pk]),
                    "ws_path": f"/ws/runs/{run.pk}/",
                    # a click on a point opens that step's groups (static/js/curve_click.js); DPO has none
                    "groups_url": None if run.is_dpo else reverse("rollouts:group_list", args=[slug, run.pk]),
                }
                for run in runs
            ],
        ),
    )
