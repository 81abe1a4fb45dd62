"""Pages for reading trajectories: a run's groups, one group, one trajectory (lazily rendered turns and a
JSON download), the diff of two trajectories and the entry points that pick the pair to diff.

Thin: resolve the project through webapp.projects.access (outsiders get 404), look objects up inside
it with webapp.rollouts.selectors.trajectories, render. Everything is read-only, so `read` (viewer and up) suffices.
Model output is untrusted: templates autoescape it, word diffs are escaped piece by piece in
webapp.rollouts.diff, and the JSON download is served as an attachment.
"""

from __future__ import annotations

import json
import math

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from webapp.experiments.models import Run
from webapp.projects.access import (
    Capability,
    NotFound,
    access_project,
    access_run,
    access_trajectory,
)
from webapp.projects.views import project_context
from webapp.review import selectors as review_selectors
from webapp.rollouts import compare_many
from webapp.rollouts.diff import compare_turns, components_diff, json_diff
from webapp.rollouts.diff_render import rows_html
from webapp.rollouts.models import Split, Trajectory
from webapp.rollouts.selectors import trajectories as trajectory_selectors
from webapp.rollouts.selectors.branching import branch_tree

# The first response carries this many turns; the rest arrive in chunks as the reader scrolls.
FIRST_TURNS = 30
TURNS_PER_CHUNK = 60
TASKS_PER_PAGE = 50


class BadParameter(ValueError):
    pass


def _int_param(
    request: HttpRequest, name: str, *, required: bool = True, default: int | None = None
) -> int | None:
    raw = request.GET.get(name, "").strip()
    if not raw:
        if required:
            raise BadParameter(f"'{name}' is required.")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParameter(f"'{name}' must be a whole number.") from None
    if value < 0:
        raise BadParameter(f"'{name}' must not be negative.")
    return value


def _number_param(request: HttpRequest, name: str, *, default: float) -> float:
    raw = request.GET.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadParameter(f"'{name}' must be a number.") from None
    if not math.isfinite(value):
        raise BadParameter(f"'{name}' must be a finite number.")
    return value


def _split_param(request: HttpRequest, default: str | None = Split.TRAIN) -> str | None:
    value = request.GET.get("split", "")
    return value if value in Split.values else default


def _bad_request(error: BadParameter) -> HttpResponse:
    return HttpResponseBadRequest(str(error), content_type="text/plain; charset=utf-8")


def _run_or_404(access, run_id: int):
    return access_run(access, run_id, queryset=Run.objects.select_related("rubric_version__rubric"))


def _diff_redirect(slug: str, pair) -> HttpResponse:
    a, b = pair
    return redirect(f"{reverse('rollouts:diff', args=[slug])}?a={a.pk}&b={b.pk}")


# --- groups ---------------------------------------------------------------------------------------------


@login_required
@require_GET
def group_list(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """A run's groups, newest steps first, with reward spread and the zero-variance flag."""
    access = access_project(request.user, slug, Capability.READ)
    run = _run_or_404(access, run_id)
    split = _split_param(request, default=None)
    try:
        before = _int_param(request, "before", required=False)
        step = _int_param(request, "step", required=False)
    except BadParameter as error:
        return _bad_request(error)
    page = trajectory_selectors.group_summaries(run=run, split=split, before_step=before, step=step)
    return render(
        request,
        "rollouts/group_list.html",
        project_context(
            access, run=run, split=split, page=page, splits=Split.choices, before=before, step=step
        ),
    )


@login_required
@require_GET
def group_detail(request: HttpRequest, slug: str, run_id: int, step: int, group: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    run = _run_or_404(access, run_id)
    split = _split_param(request)
    found = trajectory_selectors.group_detail(run=run, step=step, group_index=group, split=split)
    if found is None:
        raise NotFound("No such group.")
    before, after = trajectory_selectors.group_neighbours(run=run, step=step, group_index=group, split=split)
    return render(
        request,
        "rollouts/group.html",
        project_context(
            access,
            run=run,
            group=found,
            before=before,
            after=after,
            criteria=found.criteria,
            tree=branch_tree(found.members),  # [] unless the group was grown by branching rollouts
        ),
    )


@login_required
@require_GET
def diff_best_worst(request: HttpRequest, slug: str, run_id: int, step: int, group: int) -> HttpResponse:
    """Entry point: the best against the worst sample of one group."""
    access = access_project(request.user, slug, Capability.READ)
    run = _run_or_404(access, run_id)
    split = _split_param(request)
    found = trajectory_selectors.group_detail(run=run, step=step, group_index=group, split=split)
    if found is None:
        raise NotFound("No such group.")
    pair = found.best_and_worst()
    if pair is None:
        messages.info(request, "This group has a single sample: there is nothing to compare it with.")
        return redirect(f"{reverse('rollouts:group_detail', args=[slug, run.pk, step, group])}?split={split}")
    return _diff_redirect(slug, pair)


# --- evaluation tasks ---------------------------------------------------------------------------------


@login_required
@require_GET
def task_list(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """The tasks a run saw repeatedly (the fixed evaluation set by default), with entry points to diffs
    of one task across steps and across runs."""
    access = access_project(request.user, slug, Capability.READ)
    run = _run_or_404(access, run_id)
    split = _split_param(request, default=Split.EVAL)
    page = Paginator(trajectory_selectors.task_summaries(run=run, split=split), TASKS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    rows = list(page.object_list)
    trajectory_selectors.rewards_at_ends(run=run, split=split, rows=rows)
    other_runs = [
        r for r in access.project.runs.only("id", "name").order_by("-created_at")[:100] if r.pk != run.pk
    ]
    return render(
        request,
        "rollouts/task_list.html",
        project_context(
            access,
            run=run,
            split=split,
            page=page,
            rows=rows,
            steps=trajectory_selectors.split_steps(run=run, split=split),
            other_runs=other_runs,
            splits=Split.choices,
        ),
    )


@login_required
@require_GET
def task_flips(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """The evaluation tasks that flipped between two steps (checkpoints by default): right → wrong and
    wrong → right, each with a link to its diff (?a=&b=&pass=&split=)."""
    access = access_project(request.user, slug, Capability.READ)
    run = _run_or_404(access, run_id)
    split = _split_param(request, default=Split.EVAL) or Split.EVAL
    try:
        step_a = _int_param(request, "a", required=False)
        step_b = _int_param(request, "b", required=False)
        pass_mark = _number_param(request, "pass", default=trajectory_selectors.DEFAULT_PASS_MARK)
    except BadParameter as error:
        return _bad_request(error)
    flips = trajectory_selectors.task_flips(
        run=run, step_a=step_a, step_b=step_b, split=split, pass_mark=pass_mark
    )
    return render(
        request,
        "rollouts/task_flips.html",
        project_context(access, run=run, split=split, flips=flips, pass_mark=pass_mark, splits=Split.choices),
    )


@login_required
@require_GET
def diff_task_steps(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """Entry point: one task at step A against step B of the same run (?task=…&a=…&b=…&split=eval)."""
    access = access_project(request.user, slug, Capability.READ)
    run = _run_or_404(access, run_id)
    task_id = request.GET.get("task", "")
    try:
        step_a = _int_param(request, "a", required=False)
        step_b = _int_param(request, "b", required=False)
    except BadParameter as error:
        return _bad_request(error)
    pair = trajectory_selectors.task_at_steps(
        run=run, task_id=task_id, split=_split_param(request, Split.EVAL), step_a=step_a, step_b=step_b
    )
    if pair is None:
        raise NotFound("This run has no such task at those steps.")
    return _diff_redirect(slug, pair)


@login_required
@require_GET
def diff_task_runs(request: HttpRequest, slug: str) -> HttpResponse:
    """Entry point: run X against run Y on one task, the latest step of each (evaluation set preferred)."""
    access = access_project(request.user, slug, Capability.READ)
    try:
        x, y = _int_param(request, "x"), _int_param(request, "y")
    except BadParameter as error:
        return _bad_request(error)
    run_x, run_y = _run_or_404(access, x), _run_or_404(access, y)
    pair = trajectory_selectors.task_in_runs(run_x=run_x, run_y=run_y, task_id=request.GET.get("task", ""))
    if pair is None:
        raise NotFound("One of the runs never saw this task.")
    return _diff_redirect(slug, pair)


# --- one trajectory -------------------------------------------------------------------------------------


def _trajectory_or_404(access, trajectory_id: int):
    return access_trajectory(
        access, trajectory_id, queryset=Trajectory.objects.select_related("run__rubric_version__rubric")
    )


@login_required
@require_GET
def trajectory_detail(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    trajectory = _trajectory_or_404(access, trajectory_id)
    try:  # ?from=N opens the page at turn N (a search hit deep in a huge trajectory); earlier turns on request
        first = _int_param(request, "from", required=False, default=0) or 0
    except BadParameter as error:
        return _bad_request(error)
    turns, more = trajectory_selectors.turns_window(trajectory=trajectory, start=first, limit=FIRST_TURNS)
    judged = review_selectors.turn_judgements(trajectory, request.user)
    judged.annotate(turns)
    review_selectors.annotate_turn_threads(trajectory, turns)
    env_state_json = (
        json.dumps(trajectory.env_state, indent=2, sort_keys=True, ensure_ascii=False)
        if trajectory.env_state is not None
        else ""
    )
    breakdown = trajectory.reward_breakdown()
    return render(
        request,
        "rollouts/trajectory.html",
        project_context(
            access,
            run=trajectory.run,
            trajectory=trajectory,
            turns=turns,
            next_start=(turns[-1].index + 1) if more and turns else None,
            message_count=trajectory.turns.count() if more else len(turns),  # messages, not model turns
            first_turn=first,
            earlier_from=max(0, first - TURNS_PER_CHUNK) if first else None,
            chunk=TURNS_PER_CHUNK,
            env_state_json=env_state_json,
            breakdown=breakdown,
            judged=judged,
            # The token view's controls, when the first turns carry token statistics.
            token_view=any(turn.token_view for turn in turns),
            gap_flag_threshold=trajectory_selectors.GAP_FLAG_THRESHOLD,
        ),
    )


@login_required
@require_GET
def trajectory_turns(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    """htmx partial: the next chunk of turns from ?start=, ending with the trigger for the one after."""
    access = access_project(request.user, slug, Capability.READ)
    trajectory = _trajectory_or_404(access, trajectory_id)
    try:
        start = _int_param(request, "start")
    except BadParameter as error:
        return _bad_request(error)
    turns, more = trajectory_selectors.turns_window(trajectory=trajectory, start=start, limit=TURNS_PER_CHUNK)
    review_selectors.turn_judgements(trajectory, request.user).annotate(turns)
    review_selectors.annotate_turn_threads(trajectory, turns)
    next_start = (turns[-1].index + 1) if more and turns else None
    return render(
        request,
        "rollouts/_turns_chunk.html",
        project_context(
            access, trajectory=trajectory, turns=turns, next_start=next_start, chunk=TURNS_PER_CHUNK
        ),
    )


@login_required
@require_GET
def trajectory_search(request: HttpRequest, slug: str, trajectory_id: int) -> JsonResponse:
    """?q=: the turns whose text or tool output contains it (case-insensitive), first ones first, with a
    snippet around the first hit: the search inside one (huge) trajectory."""
    access = access_project(request.user, slug, Capability.READ)
    trajectory = _trajectory_or_404(access, trajectory_id)
    query = request.GET.get("q", "").strip()
    if not query or len(query) > trajectory_selectors.MAX_TURN_SEARCH_CHARS:
        return JsonResponse(
            {"errors": {"q": [f"Search for 1 to {trajectory_selectors.MAX_TURN_SEARCH_CHARS} characters."]}},
            status=400,
        )
    matches, more = trajectory_selectors.search_turns(trajectory=trajectory, query=query)
    return JsonResponse({"query": query, "matches": matches, "more": more})


@login_required
@require_GET
def trajectory_json(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    """The whole trajectory with its turns as a JSON file (an attachment, never rendered as a page)."""
    access = access_project(request.user, slug, Capability.READ)
    trajectory = _trajectory_or_404(access, trajectory_id)
    return _json_download(
        trajectory_selectors.trajectory_export(trajectory), f"trajectory-{trajectory.pk}.json"
    )


@login_required
@require_GET
def trajectory_atif(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    """The trajectory as an ATIF v1.7 document (Harbor's format), as a download."""
    access = access_project(request.user, slug, Capability.READ)
    trajectory = _trajectory_or_404(access, trajectory_id)
    return _json_download(
        trajectory_selectors.trajectory_atif(trajectory), f"trajectory-{trajectory.pk}.atif.json"
    )


def _json_download(document: dict, filename: str) -> HttpResponse:
    """A JSON document as an attachment, never rendered as a page."""
    response = JsonResponse(document, json_dumps_params={"ensure_ascii": False, "indent": 1})
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@login_required
@require_GET
def run_atif(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """Every trajectory of the run as ATIF, one document per line (?split=train|eval to keep one)."""
    access = access_project(request.user, slug, Capability.READ)
    run = _run_or_404(access, run_id)
    split = request.GET.get("split") or None
    if split not in (None, "train", "eval"):
        return HttpResponseBadRequest("split: train or eval")
    response = StreamingHttpResponse(
        trajectory_selectors.run_atif_lines(run, split=split), content_type="application/x-ndjson"
    )
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.atif.jsonl"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


# --- many trajectories side by side ----------------------------------------------------------------------


@login_required
@require_GET
def compare_trajectories(request: HttpRequest, slug: str) -> HttpResponse:
    """2–8 trajectories turn by turn: ?ids=1,2,3 or ?id=1&id=2 (the explorer's ticked rows; any of the
    project's, across runs), or ?run=…&task=…&split=… (that task's first sample at up to 8 of the run's
    steps, first and last included)."""
    access = access_project(request.user, slug, Capability.READ)
    raw_ids = [
        part.strip()
        for part in [*request.GET.get("ids", "").split(","), *request.GET.getlist("id")]
        if part.strip()
    ]
    if raw_ids:
        if not all(part.isdigit() for part in raw_ids):
            return _bad_request(BadParameter("'ids' must be trajectory ids separated by commas."))
        ids = list(dict.fromkeys(int(part) for part in raw_ids))
        if not compare_many.MIN_TRAJECTORIES <= len(ids) <= compare_many.MAX_TRAJECTORIES:
            return _bad_request(
                BadParameter(
                    f"Compare {compare_many.MIN_TRAJECTORIES} to {compare_many.MAX_TRAJECTORIES} trajectories."
                )
            )
        trajectories = [_trajectory_or_404(access, pk) for pk in ids]
    else:
        try:
            run_id = _int_param(request, "run")
        except BadParameter as error:
            return _bad_request(error)
        run = _run_or_404(access, run_id)
        task = request.GET.get("task", "")
        of_task = Trajectory.objects.filter(
            run=run, task_id=task, split=_split_param(request, Split.EVAL)
        ).order_by("step", "sample_index", "group_index", "id")
        trajectories = compare_many.task_across_steps(trajectories=list(of_task.select_related("run")))
        if len(trajectories) < compare_many.MIN_TRAJECTORIES:
            raise NotFound("This run has this task at fewer than two steps.")
    rows, cut = compare_many.compare_rows([trajectory_selectors.turns_for_diff(t) for t in trajectories])
    # Ticked rows of the explorer may be of several tasks: the page names them, so prompts that differ
    # are not read as the policy's doing.
    first_of_task: dict[str, Trajectory] = {}
    for trajectory in trajectories:
        first_of_task.setdefault(trajectory.task_id, trajectory)
    tasks = list(first_of_task.values())  # named by their text (task_tags), once each
    return render(
        request,
        "rollouts/compare_trajectories.html",
        project_context(
            access,
            trajectories=trajectories,
            tasks=tasks,
            rows=rows,
            cut=cut,
            max_rows=compare_many.MAX_ROWS,
        ),
    )


# --- diff -----------------------------------------------------------------------------------------------


@login_required
@require_GET
def diff(request: HttpRequest, slug: str) -> HttpResponse:
    """Two trajectories side by side (?a=…&b=…), aligned turn by turn."""
    access = access_project(request.user, slug, Capability.READ)
    try:
        a_id, b_id = _int_param(request, "a"), _int_param(request, "b")
    except BadParameter as error:
        return _bad_request(error)
    left, right = _trajectory_or_404(access, a_id), _trajectory_or_404(access, b_id)
    left_turns, right_turns = (
        trajectory_selectors.turns_for_diff(left),
        trajectory_selectors.turns_for_diff(right),
    )
    review_selectors.turn_judgements(left).annotate(left_turns)
    review_selectors.turn_judgements(right).annotate(right_turns)
    rows = compare_turns(left_turns, right_turns)
    both_states = left.env_state is not None and right.env_state is not None
    components = components_diff(left.components or [], right.components or [])
    return render(
        request,
        "rollouts/diff.html",
        project_context(
            access,
            left=left,
            right=right,
            sides=[("A", left), ("B", right)],
            rows=rows,
            rows_html=rows_html(rows),
            changed_rows=sum(1 for row in rows if not row.same),
            components=components,
            reward_delta=right.reward - left.reward,
            env_changes=json_diff(left.env_state, right.env_state) if both_states else None,
            env_state_one_side=(left.env_state is None) != (right.env_state is None),
            same_task=left.task_id == right.task_id,
            divergence=_divergence(left, right, rows),
            preference_sides=[("A", left, right), ("B", right, left)],
        ),
    )


def _divergence(left: Trajectory, right: Trajectory, rows) -> int | None:
    """The index of the first turn where the two trajectories of one task part ways, when both sides
    are the model's turn there: the point at which an annotator can prefer one turn over the other."""
    if left.task_id != right.task_id:
        return None
    for row in rows:
        if row.same:
            continue
        a, b = row.left, row.right
        if a is not None and b is not None and a.role == b.role == "assistant" and a.index == b.index:
            return int(a.index)
        return None
    return None
