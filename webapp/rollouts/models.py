from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import models, transaction

from trainers.registry import explanation_label
from trainers.rubrics.alarms import HackingFlag, trajectory_flag
from webapp.experiments.models import Run

# More turns than this (the model's: trainers.types.model_turns, as Trajectory.num_turns counts them; with
# their tool results about 8 messages): system prompts and tool output start folded.
LONG_TRACE_TURNS = 3


TASK_HEADLINE_CHARS = 120  # the task's first line as lists show it; the whole prompt is on hover
TASK_HOVER_CHARS = 1000


def task_headline(prompt: str, task_id: str = "") -> str:
    """How a task is named wherever one appears (lists, feed, headers): the first non-empty line of its
    prompt, shortened; its id when it has no prompt."""
    line = next((ln.strip() for ln in (prompt or "").splitlines() if ln.strip()), "")
    if not line:
        return task_id
    return line if len(line) <= TASK_HEADLINE_CHARS else line[: TASK_HEADLINE_CHARS - 1] + "…"


def task_hover(prompt: str, task_id: str = "") -> str:
    """The tooltip of a task's headline: its whole prompt (up to TASK_HOVER_CHARS) and its id."""
    text = (prompt or "").strip()
    if len(text) > TASK_HOVER_CHARS:
        text = text[: TASK_HOVER_CHARS - 1] + "…"
    return f"{text}\n\ntask {task_id}" if text else f"task {task_id}"


class Split(models.TextChoices):
    TRAIN = "train", "Train"
    EVAL = "eval", "Evaluation"


class TrajectoryStatus(models.TextChoices):
    OK = "ok", "OK"
    TRUNCATED = "truncated", "Truncated"
    ERROR = "error", "Error"


class Trajectory(models.Model):
    """One rollout: a sample of a GRPO group at one step (or one evaluation episode)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="trajectories")
    step = models.PositiveIntegerField()
    split = models.CharField(max_length=8, choices=Split.choices, default=Split.TRAIN)
    group_index = models.PositiveIntegerField(default=0)
    sample_index = models.PositiveIntegerField(default=0)
    task_id = models.CharField(max_length=200)
    seed = models.BigIntegerField(
        null=True, blank=True, help_text="the environment seed; null when not reported"
    )
    prompt = models.TextField(blank=True, help_text="the task prompt, for search and pairing")
    reward = models.FloatField(default=0.0)
    # [{"name", "kind", "raw", "weight", "weighted", "explanation"}] — the total is their sum.
    components = models.JSONField(default=list)
    advantage = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=TrajectoryStatus.choices, default=TrajectoryStatus.OK)
    num_turns = models.PositiveIntegerField(default=0)
    num_tool_calls = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    policy_version = models.PositiveIntegerField(default=0)
    staleness = models.PositiveIntegerField(
        default=0, help_text="policy versions between the sampler and the learner (0: on-policy)"
    )
    env_state = models.JSONField(null=True, blank=True)
    rubric_version = models.PositiveIntegerField(null=True, blank=True)
    dropped = models.BooleanField(default=False, help_text="generated but not trained on (dynamic sampling)")
    env_reward = models.FloatField(
        null=True, blank=True, help_text="the environment's own reward (null: not reported)"
    )
    correct = models.BooleanField(
        null=True, blank=True, help_text="the environment's own verdict on the answer (null: it gave none)"
    )
    answer = models.TextField(
        blank=True, help_text="the task's expected answer as text (JSON for a non-text answer)"
    )
    branch = models.JSONField(
        null=True,
        blank=True,
        help_text="where a branching rollout split off its parent (parent sample, shared prefix, entropy)",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step", "group_index", "sample_index"]
        constraints = [
            # A (split, group, sample) names one trajectory of a step. The constraint's index also serves
            # the group pages' (run, step, group) lookups, as the plain index it replaced did.
            models.UniqueConstraint(
                fields=["run", "step", "group_index", "sample_index", "split"],
                name="one_trajectory_per_sample",
            ),
        ]
        indexes = [
            models.Index(fields=["run", "-reward"], name="traj_run_reward"),
            models.Index(fields=["run", "split", "task_id", "step"], name="traj_run_task_step"),
            models.Index(fields=["task_id", "split"], name="traj_task"),
            # The explorer's keyset orders — (id), (run, id), (reward, id), (step, id) — are covering
            # indexes on Postgres (INCLUDE the filter columns) and made by hand in migration 0003.
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.step}/{self.group_index}/{self.sample_index}"

    def task_answer(self) -> Any:
        """The task's expected answer as the trainer had it: text, or the JSON value a non-text answer was
        stored as; None when the trajectory has none."""
        if not self.answer:
            return None
        if self.answer[:1] in "[{":
            try:
                return json.loads(self.answer)
            except ValueError:
                return self.answer
        return self.answer

    def folds_by_default(self) -> bool:
        """A long trace opens with its system prompts and tool output folded (the page can unfold them)."""
        return self.num_turns > LONG_TRACE_TURNS

    def hacking_flag(self) -> HackingFlag | None:
        """Whether this trajectory looks like reward hacking: a learned or judge criterion scored high
        while a verifiable one failed, the environment's verifier said wrong, or the episode was truncated
        (trainers.rubrics.alarms)."""
        return trajectory_flag(
            [c for c in self.components or [] if isinstance(c, dict)], self.status, self.correct
        )

    def reward_breakdown(self) -> RewardBreakdown:
        """The reward criterion by criterion, raw and weighted, with their sum — and whether that sum is
        the reported total (users were burned by totals that ignored the weights: the page says so)."""
        components = [
            {**c, "explanation_label": explanation_label(c.get("kind"))}
            for c in self.components or []
            if isinstance(c, dict)
        ]
        weighted = [c["weighted"] for c in components if isinstance(c.get("weighted"), int | float)]
        total = sum(weighted)
        return RewardBreakdown(components, total, bool(weighted) and abs(total - self.reward) > 1e-6)


@dataclass(frozen=True)
class RewardBreakdown:
    components: list[dict]
    total: float
    total_differs: bool


class Turn(models.Model):
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="turns")
    index = models.PositiveIntegerField()
    role = models.CharField(max_length=10)  # system / user / assistant / tool
    text = models.TextField(blank=True)
    tool_name = models.CharField(max_length=100, blank=True)
    tool_args = models.JSONField(null=True, blank=True)
    tool_result = models.TextField(blank=True)
    reward = models.FloatField(null=True, blank=True)
    token_ids = models.JSONField(null=True, blank=True)
    loss_mask = models.JSONField(null=True, blank=True)
    # Per-token statistics, packed as the wire format sends them (trainers.sdk.wire.TOKEN_STATS).
    token_stats = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["trajectory", "index"]
        constraints = [models.UniqueConstraint(fields=["trajectory", "index"], name="one_turn_per_index")]

    def __str__(self) -> str:
        return f"turn {self.index} ({self.role})"

    def text_repeats_tool_result(self) -> bool:
        """A tool turn whose text is its result (most formats report both): the page prints it once."""
        return bool(self.tool_result) and self.text.strip() == self.tool_result.strip()


class NumberListField(models.Field):
    """A list of numbers, None allowed: a Postgres array (`bigint[]` or `double precision[]`), JSON text
    elsewhere (the embedded SQLite, whose `json_each` reads it in SQL)."""

    def __init__(self, *args, floats: bool = False, **kwargs):
        self.floats = floats
        super().__init__(*args, **kwargs)

    def deconstruct(self):
        name, path, args, kwargs = super().deconstruct()
        if self.floats:
            kwargs["floats"] = True
        return name, path, args, kwargs

    def db_type(self, connection) -> str:
        if connection.vendor == "postgresql":
            return "double precision[]" if self.floats else "bigint[]"
        return "text"

    def from_db_value(self, value, expression, connection):
        return json.loads(value) if isinstance(value, str) else value

    def get_db_prep_value(self, value, connection, prepared=False):
        if value is None or connection.vendor == "postgresql":
            return value
        return json.dumps(value)


# Points per chunk at most: a batch's points of one metric are split into chunks of this size. SQLite's
# view reads a chunk's n-th value by walking its JSON text, so a chunk costs it ~n²/2 steps to read:
# 64 keeps that to ~32 per point (a 100k-point curve reads in ~0.2 s; 256 took twice that); on
# Postgres a batch of the trainer's or the bench's (1-40 steps) is one chunk per metric either way.
METRIC_CHUNK_POINTS = 64


# Step blocks of the stored downsampled tiers, finest first (webapp.rollouts.metric_tiles): a tile of level
# i sums up the chunks whose lowest step falls in one block of TILE_STEPS[i] steps. A curve read picks the
# coarsest level whose blocks are no wider than its buckets (selectors.metrics), so it reads about one row
# per bucket however long the run; each block of a level holds whole blocks of the finer one.
TILE_STEPS = (64, 2048)


class MetricChunkQuerySet(models.QuerySet):
    def delete(self) -> tuple[int, dict[str, int]]:
        """Delete the chunks and fold again the tiles they were part of (from the chunks left): the one
        place that keeps tiles true to their chunks when chunks go (a run's own delete drops its tiles
        with it). A raw SQL DELETE of chunks bypasses it."""
        from webapp.rollouts.metric_tiles import refold_tiles

        with transaction.atomic():
            touched = list(self.values_list("run_id", "key", "min_step").order_by())
            deleted = super().delete()
            refold_tiles(touched)
        return deleted


class MetricChunk(models.Model):
    """Consecutive points of one metric of one run, as one ingested batch brought them: parallel lists of
    steps, values, wall times and token counts. Stored in chunks, not one row per point, because a row
    and its index entry cost Postgres ~8 µs each: a 1,000-point batch as 25 rows of 40 takes a seventh of
    the database's CPU (docs/api.md, "Throughput"). Read through MetricPoint, the view that unnests them.

    The summary columns (`value_min` … `value_last`, written with the lists) are what the tiles fold and
    what a curve's read takes instead of a chunk's points: its lowest and highest point (ties: the lowest
    step) and its values at its first and last step. Null only on chunks written without them (the
    bench's before-and-after of the ingest path, `insert_metrics(summaries=False)`).
    """

    # No database foreign-key constraint (its check ran once per row at commit) and no run index of its
    # own (metric_chunk_run_key starts with the run); deleting a run cascades here through Django.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="metric_chunks", db_index=False, db_constraint=False
    )
    key = models.CharField(max_length=100)
    # What reads of a curve need without unnesting the lists: how many points, and their step range.
    size = models.PositiveIntegerField()
    min_step = models.PositiveIntegerField()
    max_step = models.PositiveIntegerField()
    steps = NumberListField()
    values = NumberListField(floats=True)
    wall_times = NumberListField(floats=True, help_text="unix seconds when measured (None: not reported)")
    tokens = NumberListField(help_text="tokens seen so far, for the x-axis (None: not reported)")
    value_min = models.FloatField(null=True)
    value_min_step = models.PositiveIntegerField(null=True)
    value_max = models.FloatField(null=True)
    value_max_step = models.PositiveIntegerField(null=True)
    value_first = models.FloatField(null=True, help_text="the value at min_step (the earliest such point)")
    value_last = models.FloatField(null=True, help_text="the value at max_step (the latest such point)")

    objects = MetricChunkQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["run", "key", "min_step"], name="metric_chunk_run_key"),
            # A run's chunks not folded into tiles yet (id > MetricFold.through), which every curve read
            # and every fold asks for: without it Postgres intersected the run's whole key index with
            # the id range (37 ms for a 100k-step run of 25 keys).
            models.Index(fields=["run", "id"], name="metric_chunk_run_id"),
        ]

    def __str__(self) -> str:
        return f"{self.key}@{self.min_step}-{self.max_step}"


class MetricTile(models.Model):
    """The chunks of one metric whose lowest step is in one block of TILE_STEPS[level] steps, folded:
    their point count, step range, lowest and highest point and first and last value — a chunk's summary
    columns over many chunks. Folded by ingestion (webapp.rollouts.metric_tiles.fold_run) once its run
    reaches a new block of TILE_STEPS[-1] steps, up to MetricFold.through; read by a long curve's
    downsampling instead of its points."""

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    key = models.CharField(max_length=100)
    level = models.PositiveSmallIntegerField(help_text="index into TILE_STEPS")
    block = models.PositiveIntegerField(help_text="its chunks' lowest steps // TILE_STEPS[level]")
    size = models.PositiveIntegerField()
    min_step = models.PositiveIntegerField()
    max_step = models.PositiveIntegerField()
    value_min = models.FloatField()
    value_min_step = models.PositiveIntegerField()
    value_max = models.FloatField()
    value_max_step = models.PositiveIntegerField()
    value_first = models.FloatField()
    value_last = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "key", "level", "block"], name="one_metric_tile_per_block")
        ]

    def __str__(self) -> str:
        return f"{self.key}@L{self.level}#{self.block}"


class MetricFold(models.Model):
    """How far a run's tiles are folded: every chunk of the run with an id up to `through` is in its tiles;
    reads take the later ones (at most about TILE_STEPS[-1] steps' worth) from their summary columns.
    Folding a batch's chunks as they came cost a 1,000-point batch 2.5× its time on Postgres (a read and
    an upsert of ~50 tiles); folded once per TILE_STEPS[-1] steps of progress it is a few per cent."""

    run = models.OneToOneField(
        Run, on_delete=models.CASCADE, primary_key=True, related_name="+", db_constraint=False
    )
    through = models.BigIntegerField(default=0, help_text="the highest chunk id folded into the tiles")

    def __str__(self) -> str:
        return f"run {self.run_id} folded through chunk {self.through}"


class MetricPoint(models.Model):
    """One scalar at one step, read-only: the database view `rollouts_metricpoint` unnests MetricChunk
    rows (migration 0015), so every reader filters, orders and downsamples points as before. Write points
    with webapp.rollouts.ingest.insert_metrics. `id` orders points as they arrived (chunk id ×
    65,536 + position in the chunk)."""

    id = models.BigIntegerField(primary_key=True)
    run = models.ForeignKey(
        Run, on_delete=models.DO_NOTHING, related_name="metric_points", db_constraint=False
    )
    key = models.CharField(max_length=100)
    step = models.PositiveIntegerField()
    value = models.FloatField()
    wall_time = models.FloatField(null=True, blank=True, help_text="unix seconds when measured")
    tokens = models.BigIntegerField(null=True, blank=True, help_text="tokens seen so far, for the x-axis")
    # The step range of the chunk the point is stored in: a read that wants a curve's first or last point
    # filters on it, and only the chunks that can hold it are unnested.
    chunk_min_step = models.PositiveIntegerField()
    chunk_max_step = models.PositiveIntegerField()

    class Meta:
        managed = False
        db_table = "rollouts_metricpoint"

    def __str__(self) -> str:
        return f"{self.key}@{self.step}={self.value}"


class RunEvent(models.Model):
    """Every accepted event's sequence number and compact summary.

    (run, seq) is unique, which makes ingestion idempotent; the summaries let a websocket client that
    reconnects replay exactly what it missed.
    """

    # As MetricPoint.run: no index of its own (the unique (run, seq) index starts with the run), no
    # per-row foreign-key check.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="events", db_index=False, db_constraint=False
    )
    seq = models.BigIntegerField()
    type = models.CharField(max_length=16)
    summary = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="one_event_per_seq")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"


# --- the explorer: what trajectories are found by ----------------------------------------------------
# Written at ingestion by webapp.rollouts.search.index_new_trajectories (and rebuilt from stored turns by
# search.reindex_trajectories); read by webapp.review.explorer. See docs/review.md, "Explorer".


class SearchDocumentField(models.TextField):
    """A trajectory's searchable text: a `tsvector` on Postgres (GIN-indexed, stemmed English), plain
    text on SQLite, where an FTS5 index over the column (kept by triggers, see migration 0002) answers
    the queries. Rows are written with raw SQL in webapp.rollouts.search — on Postgres through
    `to_tsvector(…)` — never assigned through the ORM."""

    def db_type(self, connection) -> str:
        return "tsvector" if connection.vendor == "postgresql" else "text"


class TrajectorySearch(models.Model):
    """One row per trajectory: the prompt and every turn's text, tool call and tool result, indexed for
    full-text search. Its own table so that ordinary trajectory reads never carry the document.

    It repeats the trajectory's run, step, split, status and reward (written once at ingestion; a
    trajectory never changes them): a text search with filters and a sort is then answered from this
    table alone — the GIN index intersected with the run index, the page sorted here — instead of
    visiting a trajectory row for every match."""

    trajectory = models.OneToOneField(
        Trajectory, on_delete=models.CASCADE, primary_key=True, related_name="search"
    )
    # No database constraint: the trajectory's own foreign key already ties the row to a real run, and a
    # constraint would add a check per row to every ingested batch.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="+", db_index=False, null=True, db_constraint=False
    )
    step = models.PositiveIntegerField(default=0)
    split = models.CharField(max_length=8, choices=Split.choices, default=Split.TRAIN)
    status = models.CharField(max_length=10, choices=TrajectoryStatus.choices, default=TrajectoryStatus.OK)
    reward = models.FloatField(default=0.0)
    document = SearchDocumentField()

    class Meta:
        indexes = [
            models.Index(fields=["run", "trajectory"], name="search_run_id"),
            models.Index(fields=["reward", "trajectory"], name="search_reward_id"),
            models.Index(fields=["step", "trajectory"], name="search_step_id"),
        ]

    def __str__(self) -> str:
        return f"search document of {self.trajectory_id}"


class CriterionScore(models.Model):
    """One rubric component of one trajectory as a row (Trajectory.components holds the same values as
    JSON): "format ≥ 0.5" becomes an index range scan instead of a walk through every JSON list.

    Like TrajectorySearch it repeats the trajectory's run, step, split, status and reward, so a page
    filtered by a criterion is found in this table alone: the matching range of the (name, value)
    index, sorted. A criterion is often part of the reward ("correct = 1, lowest reward first"), and
    walking trajectories in reward order until enough of them match could then read most of the table.
    The indexes are made by hand (covering on Postgres), see migrations 0005 to 0009."""

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="criterion_scores")
    # No database constraint: the trajectory's own foreign key already ties the row to a real run, and a
    # constraint would add a check per row to every ingested batch.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="+", db_index=False, null=True, db_constraint=False
    )
    step = models.PositiveIntegerField(default=0)
    split = models.CharField(max_length=8, choices=Split.choices, default=Split.TRAIN)
    status = models.CharField(max_length=10, choices=TrajectoryStatus.choices, default=TrajectoryStatus.OK)
    reward = models.FloatField(default=0.0)
    name = models.CharField(max_length=200)
    raw = models.FloatField()
    weighted = models.FloatField()

    def __str__(self) -> str:
        return f"{self.name}={self.raw} ({self.weighted}) on {self.trajectory_id}"


class SavedView(models.Model):
    """A user's named explorer query (the page's query string), private to them."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="saved_views")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_views")
    name = models.CharField(max_length=100)
    query = models.CharField(
        max_length=2000, blank=True, help_text="the explorer's query string, without a cursor"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "user", "name"], name="one_saved_view_name_per_user")
        ]

    def __str__(self) -> str:
        return self.name
