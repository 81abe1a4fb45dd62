"""Reads behind the pages for reading trajectories: the group view, the trajectory view, the diff and
the entry points that pick a pair to diff. Every function takes the project (or a run already looked up
inside it), so nothing here can cross a project boundary; the views resolve the project through
webapp.projects.access first.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.db.models import Avg, Count, Max, Min, Q, QuerySet

from trainers.learn.algorithms import GroupStats, group_stats
from trainers.sdk import wire
from webapp.experiments.models import Run
from webapp.rollouts.models import Split, Trajectory, Turn

# The mask bar of one turn never has more segments than this (a long, finely interleaved mask is
# drawn as equal bins, each dimmed when most of its tokens are masked).
MAX_MASK_SEGMENTS = 48
ANSWER_PREVIEW_CHARS = 600

# A turn's stored fields come from the wire format; the token lists are heavy and read only where shown.
TOKEN_FIELDS = ("token_ids", "loss_mask", "token_stats")
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


# The token view flags a token whose learner − sampler log-prob gap is at least this large (nats) unless
# the reader picks another threshold: e^0.5 ≈ 1.65, past most runs' importance-weight caps' comfort.
GAP_FLAG_THRESHOLD = 0.5


def _rounded(values: list[float | None]) -> list[float | None]:
    return [None if v is None else round(v, 4) for v in values]


def token_view(turn: Turn) -> dict[str, Any] | None:
    """What the trajectory page's token view draws for one turn (`static/js/token_view.js`): its token
    ids, the text piece of each (when the trainer sent their lengths and they add up to the text), the
    loss mask and each statistic the trainer sent, unpacked (`trainers.sdk.wire.TOKEN_STATS`). None for a
    turn without token statistics."""
    stats = turn.__dict__.get("token_stats")
    ids = turn.__dict__.get("token_ids") or []
    if not stats or not ids:
        return None
    view: dict[str, Any] = {"ids": ids, "mask": turn.loss_mask or [], "pieces": None}
    for name in wire.TOKEN_STAT_NAMES:
        if stats.get(name):
            values = wire.unpack_halves(stats[name])
            if len(values) == len(ids):
                view[name] = _rounded(values)
    lengths = wire.unpack_octets(stats["text_lengths"]) if stats.get("text_lengths") else None
    if lengths is not None and len(lengths) == len(ids) and sum(lengths) == len(turn.text):
        pieces, at = [], 0
        for length in lengths:
            pieces.append(turn.text[at : at + length])
            at += length
        view["pieces"] = pieces
    return view


def _decorate(turn: Turn) -> Turn:
    """Attach what the templates show and do not compute: pretty tool arguments and the token summary."""
    shown: Any = turn  # the attributes below are the templates', not the model's
    shown.tool_args_json = (
        json.dumps(turn.tool_args, indent=2, sort_keys=True, ensure_ascii=False)
        if turn.tool_args is not None
        else ""
    )
    shown.tokens = token_summary(turn.token_ids, turn.loss_mask) if "token_ids" in turn.__dict__ else None
    shown.token_view = token_view(turn)
    return turn


# A window of turns stops once its texts, tool output and arguments pass this many characters (at least one
# turn): turns of an agent with big tool output (tens of kB each) would otherwise make a first screen of
# megabytes (bench/huge_trajectory.py: 30 such turns were 660 kB and 1.6 s p95 to open).
WINDOW_CHARS = 120_000


def _turn_chars(turn: Any) -> int:  # a turn `_decorate` has seen
    return len(turn.text) + len(turn.tool_result) + len(turn.tool_args_json)


def turns_window(
    *, trajectory: Trajectory, start: int, limit: int, max_chars: int = WINDOW_CHARS
) -> tuple[list[Turn], bool]:
    """Up to `limit` turns from index `start` on (fewer when their text passes `max_chars`), and whether
    more follow. One indexed range scan."""
    rows = list(
        Turn.objects.filter(trajectory=trajectory, index__gte=start)
        .order_by("index")
        .only(*TURN_FIELDS, *TOKEN_FIELDS)[: limit + 1]
    )
    window: list[Turn] = []
    chars = 0
    for turn in rows[:limit]:
        if window and chars >= max_chars:
            break
        window.append(_decorate(turn))
        chars += _turn_chars(turn)
    return window, len(rows) > len(window)


MAX_TURN_SEARCH_CHARS = 200
MAX_TURN_SEARCH_HITS = 50
SNIPPET_CHARS = 80


def search_turns(*, trajectory: Trajectory, query: str) -> tuple[list[dict[str, Any]], bool]:
    """The first MAX_TURN_SEARCH_HITS turns whose text or tool output contains `query` (case-insensitive),
    as {"index", "role", "snippet"}, and whether more turns match. One scan of the trajectory's turns
    (its index range), reading only the matching rows' texts."""
    rows = list(
        Turn.objects.filter(trajectory=trajectory)
        .filter(Q(text__icontains=query) | Q(tool_result__icontains=query))
        .order_by("index")
        .values_list("index", "role", "text", "tool_result")[: MAX_TURN_SEARCH_HITS + 1]
    )
    needle = query.lower()
    matches = []
    for index, role, text, tool_result in rows[:MAX_TURN_SEARCH_HITS]:
        source = text if needle in text.lower() else tool_result
        at = source.lower().find(needle)
        start = max(0, at - SNIPPET_CHARS // 2)
        snippet = ("…" if start else "") + source[start : start + SNIPPET_CHARS + len(query)]
        matches.append({"index": index, "role": role, "snippet": snippet})
    return matches, len(rows) > MAX_TURN_SEARCH_HITS


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


def trajectory_wire_item(trajectory: Trajectory, turns: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The stored trajectory as a wire item (what its trainer posted), turns included."""
    if turns is None:
        turns = list(Turn.objects.filter(trajectory=trajectory).order_by("index").values(*wire.TURN.columns))
    names = {column: field.name for column, field in wire.TURN.columns.items()}
    item: dict[str, Any] = {
        field.name: getattr(trajectory, column) for column, field in wire.TRAJECTORY.columns.items()
    }
    item["step"] = trajectory.step
    item["turns"] = [
        {
            names[column]: value
            for column, value in turn.items()
            if column in names and value not in (None, "")
        }
        for turn in turns
    ]
    return item


def _atif_model_name(run: Run) -> str | None:
    model = (run.resolved_config or {}).get("model")
    return str(model) if isinstance(model, str) and model else None


def trajectory_atif(trajectory: Trajectory) -> dict[str, Any]:
    """The trajectory as one ATIF document (Harbor's Agent Trajectory Interchange Format, v1.7): prompt
    and completion token ids per agent step, the reward and its components in `extra.rollout_studio`."""
    from trainers.sdk.atif import wire_to_atif

    run = trajectory.run
    return wire_to_atif(
        trajectory_wire_item(trajectory),
        session_id=f"run-{run.pk}-trajectory-{trajectory.pk}",
        model_name=_atif_model_name(run),
        step=trajectory.step,
    )


def run_atif_lines(run: Run, *, split: str | None = None, step: int | None = None) -> Iterator[str]:
    """Every trajectory of the run (or of one split / step) as ATIF, one JSON document per line, in
    step order; read in chunks so a long run never sits in memory whole."""
    from trainers.sdk.atif import wire_to_atif

    rows = Trajectory.objects.filter(run=run).order_by("step", "split", "group_index", "sample_index")
    if split:
        rows = rows.filter(split=split)
    if step is not None:
        rows = rows.filter(step=step)
    model_name = _atif_model_name(run)
    ids = list(rows.values_list("pk", flat=True))
    for start in range(0, len(ids), 200):
        chunk = list(
            Trajectory.objects.filter(pk__in=ids[start : start + 200]).order_by(
                "step", "split", "group_index", "sample_index"
            )
        )
        turns: dict[int, list[dict[str, Any]]] = {t.pk: [] for t in chunk}
        for turn in (
            Turn.objects.filter(trajectory_id__in=turns)
            .order_by("trajectory_id", "index")
            .values("trajectory_id", *wire.TURN.columns)
        ):
            turns[turn.pop("trajectory_id")].append(turn)
        for trajectory in chunk:
            doc = wire_to_atif(
                trajectory_wire_item(trajectory, turns[trajectory.pk]),
                session_id=f"run-{run.pk}-trajectory-{trajectory.pk}",
                model_name=model_name,
                step=trajectory.step,
            )
            yield json.dumps(doc, ensure_ascii=False) + "\n"


# --- groups ----------------------------------------------------------------------------------------------


def competition_ranks(rewards: list[float]) -> list[int]:
    """Rank 1 is the highest reward; equal rewards share a rank and the next rank skips (1, 2, 2, 4)."""
    ordered = sorted(rewards, reverse=True)
    first_position: dict[float, int] = {}
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
    members: list[Trajectory] = field(
        default_factory=list
    )  # in sample order; each has .rank and .final_text (its final answer, cut)

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
    def tasks(self) -> list[Trajectory]:
        """One member per task of the group (its prompt and answer name the task), by task id."""
        first: dict[str, Trajectory] = {}
        for member in self.members:
            first.setdefault(member.task_id, member)
        return [first[task] for task in sorted(first)]

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
    shown: list[Any] = members  # rank, answer and cells are the page's, not the model's
    for member, rank in zip(shown, competition_ranks([m.reward for m in members]), strict=True):
        member.rank = rank
        answer = answers.get(member.pk, "")
        member.final_text = answer[:ANSWER_PREVIEW_CHARS]
        member.final_text_cut = len(answer) > ANSWER_PREVIEW_CHARS
    group = Group(run=run, step=step, split=split, group_index=group_index, members=members)
    criteria = group.criteria
    for member in shown:
        by_name = {str(c.get("name", "")): c for c in member.components or [] if isinstance(c, dict)}
        member.component_cells = [by_name.get(name) for name in criteria]  # one per column, None if unscored
    return group


def group_neighbours(
    *, run: Run, step: int, group_index: int, split: str
) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
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
    *,
    run: Run,
    split: str | None = None,
    before_step: int | None = None,
    steps_per_page: int = 20,
    step: int | None = None,
) -> GroupPage:
    """One row per group (step, split, group) with its size, reward mean / std / range, task and its best
    and worst sample, newest steps first; keyset-paginated by step so a run of 100k steps pages as fast as
    one of ten. `step`: that step's groups only (a click on a step of a curve)."""
    trajectories = Trajectory.objects.filter(run=run)
    if split:
        trajectories = trajectories.filter(split=split)
    if step is not None:
        trajectories = trajectories.filter(step=step)
    steps_query = trajectories if before_step is None else trajectories.filter(step__lt=before_step)
    steps = list(
        steps_query.values_list("step", flat=True).distinct().order_by("-step")[: steps_per_page + 1]
    )
    next_before = steps[steps_per_page - 1] if len(steps) > steps_per_page else None
    steps = steps[:steps_per_page]
    members: dict[tuple[int, str, int], list[tuple[float, str, int]]] = {}
    texts: dict[str, tuple[str, str]] = {}  # task id -> (prompt, answer)
    for step_, split_, group, reward, task, pk, prompt, answer in (
        trajectories.filter(step__in=steps)
        .order_by("-step", "split", "group_index", "sample_index")
        .values_list("step", "split", "group_index", "reward", "task_id", "id", "prompt", "answer")
    ):
        members.setdefault((step_, split_, group), []).append((reward, task, pk))
        texts.setdefault(task, (prompt, answer))
    rows = []
    for (step_, split_, group), samples in members.items():
        stats = group_stats([reward for reward, _, _ in samples], split_)
        tasks = sorted({task for _, task, _ in samples})
        best = max(samples, key=lambda sample: sample[0])
        worst = min(samples, key=lambda sample: sample[0])
        rows.append(
            {
                "step": step_,
                "best": {"id": best[2], "reward": best[0]},
                "worst": {"id": worst[2], "reward": worst[0]},
                "split": split_,
                "group_index": group,
                "n": stats.size,
                "mean": stats.mean,
                "std": stats.std,
                "low": stats.low,
                "high": stats.high,
                "zero_variance": stats.zero_variance,
                "task": tasks[0],
                "task_prompt": texts[tasks[0]][0],
                "task_answer": texts[tasks[0]][1],
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
        .annotate(
            steps=Count("step", distinct=True),
            first=Min("step"),
            last=Max("step"),
            mean=Avg("reward"),
            prompt=Max("prompt"),
            answer=Max("answer"),
        )
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


# --- evaluation tasks that flipped between two steps ----------------------------------------------------

# A task counts as solved at a step when its reward there is at least this (the page can ask for another).
DEFAULT_PASS_MARK = 0.5


@dataclass(frozen=True)
class TaskFlip:
    task_id: str
    reward_a: float
    reward_b: float


@dataclass
class Flips:
    step_a: int | None
    step_b: int | None
    steps: list[int]  # the split's steps with trajectories (the choices)
    checkpoint_steps: list[int]
    broke: list[TaskFlip] = field(default_factory=list)  # right → wrong
    fixed: list[TaskFlip] = field(default_factory=list)  # wrong → right
    compared: int = 0  # tasks seen at both steps


def task_flips(
    *,
    run: Run,
    step_a: int | None = None,
    step_b: int | None = None,
    split: str = Split.EVAL,
    pass_mark: float = DEFAULT_PASS_MARK,
) -> Flips:
    """The tasks whose first sample passed (reward ≥ `pass_mark`) at step A and failed at step B, and the
    reverse. By default A and B are the last two checkpoints' steps the split was evaluated at (else its
    first and last steps)."""
    steps = split_steps(run=run, split=split)
    checkpoint_steps = sorted(
        set(run.checkpoints.filter(deleted=False).values_list("step", flat=True)) & set(steps)
    )
    if step_a is None or step_b is None:
        ends = checkpoint_steps[-2:] if len(checkpoint_steps) >= 2 else (steps[:1] + steps[-1:])
        if len(ends) == 2:
            step_a = ends[0] if step_a is None else step_a
            step_b = ends[1] if step_b is None else step_b
    flips = Flips(step_a=step_a, step_b=step_b, steps=steps, checkpoint_steps=checkpoint_steps)
    if step_a is None or step_b is None:
        return flips
    first: dict[tuple[str, int], float] = {}
    for task_id, step, reward in (
        Trajectory.objects.filter(run=run, split=split, step__in=(step_a, step_b))
        .order_by("-sample_index", "-group_index", "-id")
        .values_list("task_id", "step", "reward")
    ):
        first[(task_id, step)] = reward  # the last written wins: the lowest sample index
    tasks = sorted({task for task, _ in first})
    for task in tasks:
        a, b = first.get((task, step_a)), first.get((task, step_b))
        if a is None or b is None:
            continue
        flips.compared += 1
        if (a >= pass_mark) != (b >= pass_mark):
            (flips.broke if a >= pass_mark else flips.fixed).append(TaskFlip(task, a, b))
    return flips
