"""Reads of a run's rollouts, metrics and checkpoints. Callers have already checked access to the run.

Metric curves are read through `webapp.rollouts.selectors.metrics` (the one downsampling).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

from django.db.models import Prefetch, Q, QuerySet

from trainers.rubrics import alarms
from trainers.rubrics.judge import judge_where
from trainers.types import Role, Task
from trainers.types import Trajectory as TrainerTrajectory
from trainers.types import TrajectoryStatus as TrainerStatus
from trainers.types import Turn as TrainerTurn
from webapp.experiments.models import Checkpoint, Run
from webapp.rollouts.models import MetricPoint, RunEvent, Trajectory, Turn, task_headline


def trajectory_list(
    *,
    run: Run,
    step: int | None = None,
    split: str | None = None,
    min_reward: float | None = None,
    max_reward: float | None = None,
    group_index: int | None = None,
    task_id: str | None = None,
    status: str | None = None,
) -> QuerySet[Trajectory]:
    """A run's trajectories in (step, group, sample) order, filtered by whichever arguments are given."""
    trajectories = Trajectory.objects.filter(run=run)
    if step is not None:
        trajectories = trajectories.filter(step=step)
    if split:
        trajectories = trajectories.filter(split=split)
    if min_reward is not None:
        trajectories = trajectories.filter(reward__gte=min_reward)
    if max_reward is not None:
        trajectories = trajectories.filter(reward__lte=max_reward)
    if group_index is not None:
        trajectories = trajectories.filter(group_index=group_index)
    if task_id:
        trajectories = trajectories.filter(task_id=task_id)
    if status:
        trajectories = trajectories.filter(status=status)
    return trajectories.order_by("step", "group_index", "sample_index", "id")


def trajectory_get(*, run: Run, trajectory_id: int) -> Trajectory | None:
    """One trajectory of `run` with its turns in order (None when the run has no such trajectory)."""
    return (
        Trajectory.objects.filter(run=run, pk=trajectory_id)
        .prefetch_related(Prefetch("turns", queryset=Turn.objects.order_by("index")))
        .first()
    )


def checkpoint_list(*, run: Run, include_deleted: bool = True) -> QuerySet[Checkpoint]:
    checkpoints = Checkpoint.objects.filter(run=run)
    if not include_deleted:
        checkpoints = checkpoints.filter(deleted=False)
    return checkpoints.order_by("step")


def run_event_lines(*, run: Run, chunk: int = 2000) -> Iterator[str]:
    """The run's event log as JSON lines, oldest first: one {"seq", "type", "received_at", ...summary}
    per accepted event (what ingestion kept of it). Read in chunks, so a long log streams."""
    events = (
        RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", "type", "summary", "created_at")
    )
    for seq, kind, summary, created_at in events.iterator(chunk_size=chunk):
        line = {**(summary or {}), "seq": seq, "type": kind, "received_at": created_at.isoformat()}
        yield json.dumps(line, separators=(",", ":"), default=str) + "\n"


def lineage_trajectories(*, run: Run) -> QuerySet[Trajectory]:
    """A run's trajectories as its lineage saw them: for a resumed run, the parent's (recursively)
    up to the checkpoint it resumed from, then its own. Steps the parent trained after that
    checkpoint were redone by the resumed run, so each step appears exactly once."""
    from django.db.models import Q

    condition = Q(run=run)
    child = run
    while child.lineage == "resume" and child.parent_id and child.parent_checkpoint is not None:
        condition |= Q(run_id=child.parent_id, step__lte=child.parent_checkpoint.step)
        # Each ancestor contributes only up to where its own child resumed from it.
        parent = Run.objects.select_related("parent_checkpoint").get(pk=child.parent_id)
        child = parent
    return Trajectory.objects.filter(condition).order_by("step", "split", "group_index", "sample_index")


def trajectory_queryset() -> QuerySet[Trajectory]:
    """Trajectories with the run and project the access helper and the review services read."""
    return Trajectory.objects.select_related("run__project")


def _alarm_criteria(run: Run) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    criteria = ((run.resolved_config or {}).get("rubric") or {}).get("criteria") or []
    learned, verifiable = alarms.criteria_by_signal(criteria)
    return criteria, learned, verifiable


def run_can_raise_hacking_alarm(run: Run) -> bool:
    """Whether the run's rubric has a learned (or judge) criterion to compare with its verifiable criteria
    or with the truth: the environment's verifier and held-out accuracy."""
    _criteria, learned, _verifiable = _alarm_criteria(run)
    return bool(learned)


def run_hacking_alarm(run: Run, *, window: int = alarms.WINDOW) -> alarms.RunAlarm | None:
    """The run-level reward-hacking alarm (trainers.rubrics.alarms.run_alarm) from the run's rubric, its
    last steps of per-criterion means (`criterion/<name>` metrics), the environment verifier's accuracy on
    them (`accuracy`) and every held-out evaluation (`eval/accuracy`)."""
    criteria, learned, verifiable = _alarm_criteria(run)
    if not learned:
        return None
    keys = {f"criterion/{name}": name for name in (*learned, *verifiable)}
    recent = max(window, alarms.VERIFIER_WINDOW)
    steps = list(
        MetricPoint.objects.filter(run=run, key__in=list(keys))
        .order_by("-step")
        .values_list("step", flat=True)
        .distinct()[:recent]
    )
    if not steps:
        return None
    series: dict[str, list[tuple[int, float]]] = {}
    checks: dict[str, list[tuple[int, float]]] = {}
    wanted = [*keys, alarms.VERIFIER]
    # The criteria alarm reads the last `window` of these steps; the verifier check all of them.
    recent_points = MetricPoint.objects.filter(run=run, key__in=wanted, step__gte=min(steps))
    for key, step, value in recent_points.values_list("key", "step", "value"):
        if key in keys:
            series.setdefault(keys[key], []).append((step, value))
        else:
            checks.setdefault(key, []).append((step, value))
    checks[alarms.HELD_OUT] = list(
        MetricPoint.objects.filter(run=run, key=alarms.HELD_OUT).values_list("step", "value")
    )
    return alarms.run_alarm(criteria, series, checks=checks, window=window)


ALARM_EXAMPLES = 5


def hacking_alarm_examples(run: Run, alarm: alarms.RunAlarm) -> list[Trajectory]:
    """The trajectories that show the alarm: of its steps (the held-out ones for a held-out alarm), those
    its learned criteria scored high while a check failed (`Trajectory.hacking_flag`), highest reward
    first, at most ALARM_EXAMPLES."""
    rows = Trajectory.objects.filter(run=run, step__gte=alarm.first_step, step__lte=alarm.last_step)
    if alarm.check == alarms.HELD_OUT:
        rows = rows.filter(split="eval", step=alarm.last_step)
    elif alarm.check == alarms.VERIFIER:
        rows = rows.filter(split="train", correct=False)
    else:
        rows = rows.filter(split="train")
    fields = ("id", "step", "split", "reward", "components", "status", "correct", "task_id", "prompt")
    flagged = [t for t in rows.order_by("-step", "-reward").only(*fields)[:200] if t.hacking_flag()]
    return flagged[:ALARM_EXAMPLES]


# --- the rubric preview on a stored trajectory ------------------------------------------------------

PREVIEW_TRAJECTORY_CHOICES = 40  # options the picker offers at a time; any trajectory can be typed or found


def preview_trajectory_label(trajectory: Trajectory) -> str:
    """ "#812 · What is 40 + 2? · run-a · train step 3 · reward 0.5": how the rubric preview's picker names a
    trajectory (its task as text, never its hash: models.task_headline, shortened). The leading #id is
    what the form reads back (RubricPreviewForm.clean_trajectory)."""
    task = task_headline(trajectory.prompt, trajectory.task_id)
    if len(task) > PREVIEW_TASK_CHARS:
        task = task[: PREVIEW_TASK_CHARS - 1] + "…"
    return (
        f"#{trajectory.pk} · {task} · {trajectory.run.name} · {trajectory.split} step {trajectory.step}"
        f" · reward {trajectory.reward:.4g}"
    )


PREVIEW_TASK_CHARS = 60


def preview_trajectory_options(*, project: Any, query: str = "") -> list[tuple[int, str]]:
    """Trajectories of the project for the rubric preview's picker, newest first, as (id, label): the
    newest ones for an empty query; else the one with that id ("812", "#812") and those whose task id or
    prompt contains the text. At most PREVIEW_TRAJECTORY_CHOICES."""
    rows = (
        Trajectory.objects.filter(run__project=project)
        .select_related("run")
        .only("pk", "run__name", "step", "split", "task_id", "prompt", "reward")
    )
    query = query.strip()
    number = query.lstrip("#").split(" ", 1)[0]
    if query:
        matches = Q(task_id__icontains=query) | Q(prompt__icontains=query)
        if number.isdigit():
            matches |= Q(pk=int(number))
        rows = rows.filter(matches)
    found = list(rows.order_by("-pk")[:PREVIEW_TRAJECTORY_CHOICES])
    if number.isdigit():  # the id asked for first
        found.sort(key=lambda t: t.pk != int(number))
    return [(t.pk, preview_trajectory_label(t)) for t in found]


def project_trajectory(*, project: Any, trajectory_id: int) -> Trajectory | None:
    """The project's trajectory with this id, None when it has none such."""
    return Trajectory.objects.filter(run__project=project, pk=trajectory_id).select_related("run").first()


def stored_trajectory(stored: Trajectory, *, answer: str | None = None) -> TrainerTrajectory:
    """A stored trajectory as the rubric scorer reads one: its turns, the environment's own reward and the
    task's expected answer, as they were stored — so the rubric that scored it previews it to its stored
    total. `answer` stands in only where the trajectory has none (one stored before answers were kept);
    so does the env_reward component for a trajectory stored before the environment's reward was."""
    turns = [
        TrainerTurn(
            role=cast(Role, turn.role),  # stored from the wire format, which allows only these
            text=turn.text,
            tool_name=turn.tool_name or None,
            tool_args=turn.tool_args,
            tool_result=turn.tool_result or None,
            reward=turn.reward,
        )
        for turn in stored.turns.order_by("index")
    ]
    env_reward = stored.env_reward
    if env_reward is None:
        env_reward = sum(
            c.get("raw") or 0.0
            for c in stored.components or []
            if isinstance(c, dict) and c.get("kind") == "env_reward"
        )
    return TrainerTrajectory(
        task=Task(id=stored.task_id, prompt=stored.prompt, answer=stored.task_answer() or answer),
        turns=turns,
        status=cast(TrainerStatus, stored.status),
        env_reward=float(env_reward),
    )


JUDGE_COST_KEYS = ("calls", "tokens", "seconds")
JUDGE_EXPLANATIONS_SHOWN = 4


def run_judges(run: Run) -> list[dict[str, Any]]:
    """The run's LLM judges as its page shows them: where each runs (an endpoint's secret by name, never its
    value), its mode, its cost (calls, tokens, seconds: the latest step's and the run's total, from the
    `judge/<name>/…` metrics the trainer reports each step) and what it said about the latest rollouts."""
    criteria = [
        c
        for c in ((run.resolved_config or {}).get("rubric") or {}).get("criteria") or []
        if isinstance(c, dict) and c.get("kind") == "llm_judge"
    ]
    if not criteria:
        return []
    keys = [f"judge/{c.get('name')}/{k}" for c in criteria for k in JUDGE_COST_KEYS]
    points = MetricPoint.objects.filter(run=run, key__in=keys).values_list("key", "step", "value")
    totals: dict[str, float] = {}
    latest: dict[str, tuple[int, float]] = {}
    steps: dict[str, set[int]] = {}
    for key, step, value in points:
        totals[key] = totals.get(key, 0.0) + value
        steps.setdefault(key, set()).add(step)
        if key not in latest or step >= latest[key][0]:
            latest[key] = (step, value)
    recent = list(
        Trajectory.objects.filter(run=run, split="train")
        .order_by("-step", "group_index", "sample_index")
        .values_list("pk", "step", "components")[: 4 * JUDGE_EXPLANATIONS_SHOWN]
    )
    judges = []
    for criterion in criteria:
        name = str(criterion.get("name") or "")
        params = criterion.get("params") or {}
        said = [
            {"trajectory": pk, "step": step, "raw": c.get("raw"), "explanation": c.get("explanation", "")}
            for pk, step, components in recent
            for c in components or []
            if isinstance(c, dict) and c.get("name") == name and c.get("kind") == "llm_judge"
        ][:JUDGE_EXPLANATIONS_SHOWN]
        cost = {}
        for part in JUDGE_COST_KEYS:
            key = f"judge/{name}/{part}"
            measured = len(steps.get(key, ()))
            cost[part] = {
                "latest": latest[key][1] if key in latest else None,
                "total": totals.get(key),
                "per_step": totals[key] / measured if measured else None,
            }
        judges.append(
            {
                "name": name,
                "where": judge_where(params),
                "model": params.get("model", "policy"),
                "base_url": params.get("base_url", ""),
                "secret": params.get("api_key_secret", ""),
                "mode": params.get("mode", "per_trajectory"),
                "cost": cost,
                "steps_measured": max((len(v) for v in steps.values()), default=0),
                "said": said,
            }
        )
    return judges


def async_health(*, run: Run) -> dict[str, Any]:
    """What the run page's async-health panel draws from the stored training samples: how many were how
    stale (policy versions behind the learner that trained on them), and per step the share that ended
    truncated or in an error (aborted). Two grouped counts over the run's train trajectories."""
    from django.db.models import Count

    train = Trajectory.objects.filter(run=run, split="train")
    staleness = list(train.values_list("staleness").annotate(n=Count("id")).order_by("staleness"))
    by_step: dict[int, dict[str, int]] = {}
    for step, status, n in train.values_list("step", "status").annotate(n=Count("id")).order_by("step"):
        by_step.setdefault(step, {})[status] = n
    steps = sorted(by_step)
    totals = [sum(by_step[s].values()) for s in steps]
    return {
        "staleness": [[int(k), int(n)] for k, n in staleness],
        "steps": steps,
        "truncated": [by_step[s].get("truncated", 0) / t for s, t in zip(steps, totals, strict=True)],
        "aborted": [by_step[s].get("error", 0) / t for s, t in zip(steps, totals, strict=True)],
        "samples": totals,
    }
