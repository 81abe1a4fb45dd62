"""Reads behind the pages for reading trajectories: the group view, the trajectory view, the diff and
the entry points that pick a pair to diff. Every function takes the project (or a run already looked up
inside it), so nothing here can cross a project boundary; the views resolve the project through
webapp.projects.access first.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.db.models import Avg, Count, Max, Min, Q, QuerySet

from trainers import wire
from trainers.algorithms import GroupStats, group_stats
from webapp.experiments.models import Run
from webapp.rollouts.models import Split, Trajectory, Turn

# The mask bar of one turn never has more segments than this (a long, finely interleaved mask is
# drawn as equal bins, each dimmed when most of its tokens are masked).
MAX_MASK_SEGMENTS = 48
ANSWER_PREVIEW_CHARS = 600

# A turn's stored fields come from the wire format; the token lists are heavy and read only where shown.
TOKEN_FIELDS = ("token_ids", "loss_mask")
TURN_FIELDS = ("id", "trajectory_id", "index", *(c for c in wire.TURN.columns if c not in TOKEN_FIELDS))


# --- one trajectory ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MaskSegment:
    masked: bool
    length: int


@dataclass(frozen=True)
class TokenSummary:
    """How many of a turn's tokens the loss sees. Decode-free: counts and a bar, never token text."""

    total: int
    trained: int
    masked: int
    mask_known: bool
    segments: tuple[MaskSegment, ...] = ()

    @property
    def fully_masked(self) -> bool:
        return self.mask_known and self.total > 0 and self.trained == 0

    @property
    def partly_masked(self) -> bool:
        return self.mask_known and self.masked > 0 and self.trained > 0


def token_summary(token_ids: list | None, loss_mask: list | None) -> TokenSummary | None:
    """Counts of trained and masked tokens and the mask as runs; None when the turn reported no tokens."""
    if not token_ids and not loss_mask:
        return None
    if not loss_mask:
        return TokenSummary(total=len(token_ids or []), trained=0, masked=0, mask_known=False)
    mask = [1 if value else 0 for value in loss_mask]
    trained = sum(mask)
    runs: list[MaskSegment] = []
    for value in mask:
        if runs and runs[-1].masked == (value == 0):
            runs[-1] = MaskSegment(runs[-1].masked, runs[-1].length + 1)
        else:
            runs.append(MaskSegment(value == 0, 1))
    if len(runs) > MAX_MASK_SEGMENTS:
        width = math.ceil(len(mask) / MAX_MASK_SEGMENTS)
        bins = [mask[i : i + width] for i in range(0, len(mask), width)]
        runs = [MaskSegment(sum(b) * 2 < len(b), len(b)) for b in bins]
    total = max(len(mask), len(token_ids or []))
    return TokenSummary(
        total=total, trained=trained, masked=len(mask) - trained, mask_known=True, segments=tuple(runs)
    )


def _decorate(turn: Turn) -> Turn:
    """Attach what the templates show and do not compute: pretty tool arguments and the token summary."""
    turn.tool_args_json = (
        json.dumps(turn.tool_args, indent=2, sort_keys=True, ensure_ascii=False)
        if turn.tool_args is not None
        else ""
    )
    turn.tokens = token_summary(turn.token_ids, turn.loss_mask) if "token_ids" in turn.__dict__ else None
    return turn


def turns_window(*, trajectory: Trajectory, start: int, limit: int) -> tuple[list[Turn], bool]:
    """Up to `limit` turns from index `start` on, and whether more follow. One indexed range scan."""
    rows = list(
        Turn.objects.filter(trajectory=trajectory, index__gte=start)
        .order_by("index")
        .only(*TURN_FIELDS, *TOKEN_FIELDS)[: limit + 1]
    )
    more = len(rows) > limit
    return [_decorate(turn) for turn in rows[:limit]], more


def turns_for_diff(trajectory: Trajectory) -> list[Turn]:
    """All turns, without token ids (the diff does not show them)."""
    return list(Turn.objects.filter(trajectory=trajectory).order_by("index").only(*TURN_FIELDS))


def trajectory_export(trajectory: Trajectory) -> dict[str, Any]:
    """The whole trajectory with its turns as plain JSON values (the download)."""
    run = trajectory.run
    rubric = run.rubric_version
    turns = list(
        Turn.objects.filter(trajectory=trajectory).order_by("index").values("index", *wire.TURN.columns)
    )
    return {
        "id": trajectory.pk,
        "run": {
            "id": run.pk,
            "name": run.name,
            "rubric": {"name": rubric.rubric.name, "version": rubric.number} if rubric else None,
        },
        "step": trajectory.step,
        **{column: getattr(trajectory, column) for column in wire.TRAJECTORY.columns},
        "num_turns": trajectory.num_turns,
        "num_tool_calls": trajectory.num_tool_calls,
        "created_at": trajectory.created_at.isoformat(),
        "turns": turns,
    }


# --- groups ----------------------------------------------------------------------------------------------


def competition_ranks(rewards: list[float]) -> list[int]:
    """Rank 1 is the highest reward; equal rewards share a rank and the next rank skips (1, 2, 2, 4)."""
    ordered = sorted(rewards, reverse=True)
    first_position = {}
    for position, reward in enumerate(ordered, start=1):
        first_position.setdefault(reward, position)
    return [first_position[reward] for reward in rewards]


@dataclass
class Group:
    """All samples of one task at one step: the unit GRPO compares."""

    run: Run
    step: int
    split: str
    group_index: int
    members: list[Trajectory] = field(default_factory=list)  # in sample order; each has .rank and .answer

    @property
    def rewards(self) -> list[float]:
        return [member.reward for member in self.members]

    @cached_property
    def stats(self) -> GroupStats:
        return group_stats(self.rewards, self.split)

    @property
    def mean(self) -> float:
        return self.stats.mean

    @property
    def std(self) -> float:
        return self.stats.std

    @property
    def span(self) -> float:
        return self.stats.high - self.stats.low

    @property
    def worst_rank(self) -> int:
        return max((getattr(member, "rank", 1) for member in self.members), default=1)

    @property
    def zero_variance(self) -> bool:
        """A training group whose samples all scored the same: it teaches nothing."""
        return self.stats.zero_variance

    @property
    def task_ids(self) -> list[str]:
        return sorted({member.task_id for member in self.members})

    @property
    def criteria(self) -> list[str]:
        """Criterion names across the members, in first-seen order (the columns of the group table)."""
        names: dict[str, None] = {}
        for member in self.members:
            for component in member.components or []:
                if isinstance(component, dict):
                    names.setdefault(str(component.get("name", "")), None)
        return list(names)

    def best_and_worst(self) -> tuple[Trajectory, Trajectory] | None:
        """The highest and the lowest reward (first by sample index on ties), two different samples."""
        if len(self.members) < 2:
            return None
        best = max(self.members, key=lambda m: (m.reward, -m.sample_index))
        others = [m for m in self.members if m.pk != best.pk]
        worst = min(others, key=lambda m: (m.reward, m.sample_index))
        return best, worst


def _last_assistant_texts(trajectory_ids: list[int]) -> dict[int, str]:
    """Each trajectory's final assistant message (what the group's samples answered), two queries."""
    last = (
        Turn.objects.filter(trajectory_id__in=trajectory_ids, role="assistant")
        .values("trajectory_id")
        .annotate(last=Max("index"))
        .order_by()
    )
    condition = Q(pk__in=[])
    for row in last:
        condition |= Q(trajectory_id=row["trajectory_id"], index=row["last"])
    return dict(Turn.objects.filter(condition).values_list("trajectory_id", "text"))


def group_detail(*, run: Run, step: int, group_index: int, split: str = Split.TRAIN) -> Group | None:
    members = list(
        Trajectory.objects.filter(run=run, step=step, group_index=group_index, split=split).order_by(
            "sample_index", "id"
        )
    )
    if not members:
        return None
    answers = _last_assistant_texts([member.pk for member in members])
    for member, rank in zip(members, competition_ranks([m.reward for m in members]), strict=True):
        member.rank = rank
        answer = answers.get(member.pk, "")
        member.answer = answer[:ANSWER_PREVIEW_CHARS]
        member.answer_cut = len(answer) > ANSWER_PREVIEW_CHARS
    group = Group(run=run, step=step, split=split, group_index=group_index, members=members)
    criteria = group.criteria
    for member in members:
        by_name = {str(c.get("name", "")): c for c in member.components or [] if isinstance(c, dict)}
        member.component_cells = [by_name.get(name) for name in criteria]  # one per column, None if unscored
    return group


def group_neighbours(*, run: Run, step: int, group_index: int, split: str) -> tuple[dict | None, dict | None]:
    """The groups just before and after this one in (step, group) order, as {"step", "group_index"}."""
    same = Trajectory.objects.filter(run=run, split=split).values("step", "group_index").order_by()
    before = (
        same.filter(Q(step__lt=step) | Q(step=step, group_index__lt=group_index))
        .order_by("-step", "-group_index")
        .first()
    )
    after = (
        same.filter(Q(step__gt=step) | Q(step=step, group_index__gt=group_index))
        .order_by("step", "group_index")
        .first()
    )
    return before, after


@dataclass
class GroupPage:
    rows: list[dict]
    next_before: int | None  # pass as ?before= for older steps; None on the last page


def group_summaries(
    *, run: Run, split: str | None = None, before_step: int | None = None, steps_per_page: int = 20
) -> GroupPage:
    """One row per group (step, split, group) with its size, reward mean / std / range and task, newest
    steps first; keyset-paginated by step so a run of 100k steps pages as fast as one of ten."""
    trajectories = Trajectory.objects.filter(run=run)
    if split:
        trajectories = trajectories.filter(split=split)
    steps_query = trajectories if before_step is None else trajectories.filter(step__lt=before_step)
    steps = list(
        steps_query.values_list("step", flat=True).distinct().order_by("-step")[: steps_per_page + 1]
    )
    next_before = steps[steps_per_page - 1] if len(steps) > steps_per_page else None
    steps = steps[:steps_per_page]
    members: dict[tuple[int, str, int], list[tuple[float, str]]] = {}
    for step, split_, group, reward, task in (
        trajectories.filter(step__in=steps)
        .order_by("-step", "split", "group_index")
        .values_list("step", "split", "group_index", "reward", "task_id")
    ):
        members.setdefault((step, split_, group), []).append((reward, task))
    rows = []
    for (step, split_, group), samples in members.items():
        stats = group_stats([reward for reward, _ in samples], split_)
        tasks = sorted({task for _, task in samples})
        rows.append(
            {
                "step": step,
                "split": split_,
                "group_index": group,
                "n": stats.size,
                "mean": stats.mean,
                "std": stats.std,
                "low": stats.low,
                "high": stats.high,
                "zero_variance": stats.zero_variance,
                "task": tasks[0],
                "tasks": len(tasks),
            }
        )
    return GroupPage(rows=rows, next_before=next_before)


# --- evaluation tasks and pairs to diff -----------------------------------------------------------------


def task_summaries(*, run: Run, split: str = Split.EVAL) -> QuerySet:
    """One row per task of the split: how many steps saw it, the first and last, the mean reward."""
    return (
        Trajectory.objects.filter(run=run, split=split)
        .values("task_id")
        .annotate(steps=Count("step", distinct=True), first=Min("step"), last=Max("step"), mean=Avg("reward"))
        .order_by("task_id")
    )


def rewards_at_ends(*, run: Run, split: str, rows: list[dict]) -> None:
    """Add `first_reward` / `last_reward` (the first sample's) to task summary rows, one query."""
    if not rows:
        return
    condition = Q(pk__in=[])
    for row in rows:
        condition |= Q(task_id=row["task_id"], step__in=(row["first"], row["last"]))
    found: dict[tuple[str, int], float] = {}
    for task_id, step, reward in (
        Trajectory.objects.filter(condition, run=run, split=split)
        .order_by("-sample_index", "-group_index", "-id")
        .values_list("task_id", "step", "reward")
    ):
        found[(task_id, step)] = reward  # the last written wins: the lowest sample index
    for row in rows:
        row["first_reward"] = found.get((row["task_id"], row["first"]))
        row["last_reward"] = found.get((row["task_id"], row["last"]))


def split_steps(*, run: Run, split: str) -> list[int]:
    return list(
        Trajectory.objects.filter(run=run, split=split)
        .values_list("step", flat=True)
        .distinct()
        .order_by("step")
    )


def _first_sample(trajectories: QuerySet[Trajectory]) -> Trajectory | None:
    return trajectories.order_by("sample_index", "group_index", "id").first()


def task_at_steps(
    *, run: Run, task_id: str, split: str = Split.EVAL, step_a: int | None = None, step_b: int | None = None
) -> tuple[Trajectory, Trajectory] | None:
    """The task's first sample at step A and at step B (by default its first and its last step)."""
    of_task = Trajectory.objects.filter(run=run, split=split, task_id=task_id)
    if step_a is None or step_b is None:
        ends = of_task.aggregate(first=Min("step"), last=Max("step"))
        if ends["first"] is None:
            return None
        step_a = ends["first"] if step_a is None else step_a
        step_b = ends["last"] if step_b is None else step_b
    a = _first_sample(of_task.filter(step=step_a))
    b = _first_sample(of_task.filter(step=step_b))
    return (a, b) if a and b else None


def latest_of_task(*, run: Run, task_id: str) -> Trajectory | None:
    """The run's latest trajectory of the task: from the evaluation set when it has one, else training."""
    for split in (Split.EVAL, Split.TRAIN):
        of_task = Trajectory.objects.filter(run=run, split=split, task_id=task_id)
        last = of_task.aggregate(last=Max("step"))["last"]
        if last is not None:
            return _first_sample(of_task.filter(step=last))
    return None


def task_in_runs(*, run_x: Run, run_y: Run, task_id: str) -> tuple[Trajectory, Trajectory] | None:
    a = latest_of_task(run=run_x, task_id=task_id)
    b = latest_of_task(run=run_y, task_id=task_id)
    return (a, b) if a and b else None
