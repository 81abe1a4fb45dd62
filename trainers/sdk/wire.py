"""The run event wire format, declared once.

Every event a trainer reports — the built-in trainer through `trainers.sdk.reporting.HttpSink`, any other
through `trainers.sdk` or its own HTTP client — is a JSON object of one of the shapes below. This module
is their only declaration; everything else is derived from it:

- `check_batch` / `check_item` (`trainers.sdk.wire_check`): the validator ingestion runs on every batch (compiled from the shapes
  into plain closures: it is on the hot path) and the SDK runs on what it is about to send, so a piece
  the server would refuse is dropped at the client with the same message;
- `Shape.columns`: which model field each stored value lands in, so ingestion stores and the API
  serializes a new field without code of their own;
- `json_schema()` (`trainers.sdk.wire_docs`): the JSON Schema of a batch, published in the OpenAPI document;
- `markdown_table()` (`trainers.sdk.wire_docs`): the field tables of docs/api.md (a test keeps the two equal).

Plain Python: no Django, no torch (the SDK installs without either).

Adding a stored trajectory or turn field: declare it here with its `column`, add the column to the model
(`webapp/rollouts/models.py` + a migration), show it in `templates/rollouts/trajectory.html`, and
regenerate its row in docs/api.md. Nothing else changes (docs/architecture.md has a worked example).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Per-token values travel packed (base64 half floats or bytes), re-exported from trainers.sdk.wire_pack.
from trainers.sdk.wire_pack import (  # noqa: F401
    HALF_MAX,
    pack_halves,
    pack_octets,
    packed_length,
    unpack_halves,
    unpack_octets,
)

# Integer columns: Django's PositiveIntegerField is a signed 32-bit `integer` on Postgres,
# BigIntegerField a 64-bit `bigint`. A value must fit its column, or the database refuses the batch.
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

MAX_TEXT = 200_000
# The dashboard answers 413 past this many events in one batch (its INGEST_MAX_EVENTS setting defaults to it).
MAX_EVENTS_PER_BATCH = 5000
MAX_ITEMS_PER_EVENT = 2000
MAX_TURNS_PER_TRAJECTORY = 2000
MAX_COMPONENTS = 100
MAX_METRICS_PER_EVENT = 10_000
MAX_METRIC_NAME = 100
MAX_TOKENS_PER_TURN = 1_000_000
# Free-form JSON objects (tool arguments, environment state, provenance) nest at most this deep: deeper
# documents are refused rather than risking Python's recursion limit when they are read back.
MAX_JSON_DEPTH = 32

ROLES = ("system", "user", "assistant", "tool")
SPLITS = ("train", "eval")
TRAJECTORY_STATUSES = ("ok", "truncated", "error")
EXPERIENCE_OPS = ("add", "modify", "delete")
TASK_POOL_STATES = ("new", "frontier", "retired", "failed", "mastered", "seen")
# What a trainer may report; QUEUED and LOST are the dashboard's own.
TRAINER_STATUSES = ("STARTING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
FINAL_STATUSES = ("SUCCEEDED", "FAILED", "CANCELLED")
LOG_LEVELS = ("debug", "info", "warning", "error")
CHECKPOINT_KINDS = ("full", "adapter")
# What a trainer is doing now (the run page's progress line). `done` / `total` count the phase's units:
# evaluation tasks, groups generated, micro-batches learned.
PHASES = (
    "loading",
    "evaluating",
    "generating",
    "scoring",
    "updating",
    "syncing",
    "checkpointing",
    "finishing",
)
# How a step's `time/<part>` metrics (seconds) group into what the run page stacks in its step-time chart
# and the trainer writes in its per-step log line: generate, score, learn, sync.
STEP_TIME_PARTS = {
    "generate": ("generate",),
    "score": ("score",),
    "learn": ("forward", "backward", "optimizer"),
    "sync": ("weight_sync",),
}

Errors = dict[str, list[str]]


@dataclass(frozen=True)
class Field:
    """One field of a shape.

    `type`: integer | number | string | boolean | integers (a list of integers) | numbers (an object of
    name → number or null) | object (free-form JSON, depth-limited) | list (of objects of `items`) |
    record (one object of `items`) | halves / octets (a packed array: `pack_halves`, `pack_octets`;
    `max_length` counts entries).
    `column`: the model field a stored value lands in (None: not a column of its own). `default`: what is
    stored when the field is left out.
    """

    name: str
    type: str
    doc: str
    required: bool = False
    nullable: bool = False
    minimum: float | None = None
    maximum: float | None = None
    min_length: int = 0
    max_length: int | None = None
    choices: tuple[str, ...] | None = None
    items: Shape | None = None
    default: Any = None
    column: str | None = None


@dataclass(frozen=True)
class Shape:
    name: str
    fields: tuple[Field, ...]
    # Rules across fields: obj → [(field name, message)]; run when every field is valid on its own.
    rules: tuple[Callable[[dict[str, Any]], list[tuple[str, str]]], ...] = ()
    _by_name: dict[str, Field] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {f.name: f for f in self.fields})

    def __getitem__(self, name: str) -> Field:
        return self._by_name[name]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def columns(self) -> dict[str, Field]:
        """{model field: wire field} of the fields stored as columns."""
        return {f.column: f for f in self.fields if f.column}

    def stored_values(self, obj: dict[str, Any]) -> dict[str, Any]:
        """{model field: value} for a valid object, defaults filled in."""
        return {column: obj.get(f.name, f.default) for column, f in self.columns.items()}


# --- packed per-token arrays ----------------------------------------------------------------------------
# --- the shapes -------------------------------------------------------------------------------------------


def _int(name: str, doc: str, *, maximum: int = INT32_MAX, minimum: int = 0, **kw: Any) -> Field:
    return Field(name, "integer", doc, minimum=minimum, maximum=maximum, **kw)


def _equal_token_lengths(turn: dict[str, Any]) -> list[tuple[str, str]]:
    ids, mask = turn.get("token_ids"), turn.get("loss_mask")
    if ids is not None and mask is not None and len(ids) != len(mask):
        return [("loss_mask", f"Must have one entry per token id ({len(ids)}), not {len(mask)}.")]
    return []


# Per-token statistics of a model turn (what the trajectory page colours tokens by). All optional; each
# array has one entry per token id of its turn.
TOKEN_STATS = Shape(
    "token_stats",
    (
        Field(
            "logprob",
            "halves",
            "log-probability of each token under the policy that sampled it (the rollout engine's)",
            max_length=MAX_TOKENS_PER_TURN,
        ),
        Field(
            "entropy",
            "halves",
            "entropy (nats) of the learner's next-token distribution at each position",
            max_length=MAX_TOKENS_PER_TURN,
        ),
        Field(
            "advantage",
            "halves",
            "the advantage the loss gave each token: its advantage × its loss mask (0 where masked)",
            max_length=MAX_TOKENS_PER_TURN,
        ),
        Field(
            "gap",
            "halves",
            "learner log-prob − sampling log-prob of each token: the train/inference mismatch "
            "(0 when both engines agree)",
            max_length=MAX_TOKENS_PER_TURN,
        ),
        Field(
            "text_lengths",
            "octets",
            "characters (Unicode code points) of the turn's text each token decodes to, so the page can "
            "show the text token by token; only when the pieces add up to the text",
            max_length=MAX_TOKENS_PER_TURN,
        ),
    ),
)
TOKEN_STAT_NAMES = ("logprob", "entropy", "advantage", "gap")


def _token_stats_fit(turn: dict[str, Any]) -> list[tuple[str, str]]:
    stats, ids = turn.get("token_stats"), turn.get("token_ids")
    if not stats:
        return []
    if ids is None:
        return [("token_stats", "Needs the turn's token_ids (one entry per token).")]
    width = {"halves": 2, "octets": 1}
    problems = []
    for name, packed in stats.items():
        if packed is None:
            continue
        count = packed_length(packed, width[TOKEN_STATS[name].type])
        if count != len(ids):
            problems.append(
                (f"token_stats.{name}", f"Must have one entry per token id ({len(ids)}), not {count}.")
            )
    return problems


TURN = Shape(
    "turn",
    (
        Field("role", "string", "who speaks", required=True, choices=ROLES, column="role"),
        Field("text", "string", "the message", max_length=MAX_TEXT, default="", column="text"),
        Field(
            "tool_name",
            "string",
            "on an assistant turn that calls a tool, and on the tool's answer",
            max_length=100,
            default="",
            column="tool_name",
        ),
        Field("tool_args", "object", "the call's arguments", nullable=True, column="tool_args"),
        Field(
            "tool_result",
            "string",
            "what the tool returned (tool turns)",
            max_length=MAX_TEXT,
            default="",
            column="tool_result",
        ),
        Field(
            "reward",
            "number",
            "this turn's own reward, where a criterion gives one (process rewards)",
            nullable=True,
            column="reward",
        ),
        Field(
            "token_ids",
            "integers",
            "the turn's tokens as the model saw or sampled them",
            nullable=True,
            minimum=0,
            maximum=INT32_MAX,
            max_length=MAX_TOKENS_PER_TURN,
            column="token_ids",
        ),
        Field(
            "loss_mask",
            "integers",
            "1 where the token was sampled by the model (it trains), 0 elsewhere; one entry per token id",
            nullable=True,
            minimum=0,
            maximum=1,
            max_length=MAX_TOKENS_PER_TURN,
            column="loss_mask",
        ),
        Field(
            "token_stats",
            "record",
            "per-token statistics of a model turn, packed (below); opt-in per run",
            nullable=True,
            items=TOKEN_STATS,
            column="token_stats",
        ),
    ),
    rules=(_equal_token_lengths, _token_stats_fit),
)

COMPONENT = Shape(
    "component",
    (
        Field(
            "name",
            "string",
            "the criterion's name in the rubric",
            required=True,
            min_length=1,
            max_length=200,
        ),
        Field("raw", "number", "the criterion's own value", required=True),
        Field("weight", "number", "its weight in the rubric", required=True),
        Field(
            "weighted",
            "number",
            "its share of the total reward (the total is the sum of these)",
            required=True,
        ),
        Field("kind", "string", "the criterion kind (exact_match, regex, llm_judge…)", max_length=64),
        Field("explanation", "string", "why it scored so, shown beside the value", max_length=MAX_TEXT),
        Field("normalized", "number", "the group z-score (group-normalized rubrics)", nullable=True),
        Field(
            "turn_rewards", "numbers", "per-turn values of this criterion (turn index → value)", nullable=True
        ),
        Field("skipped", "boolean", "could not score here; weighted is 0"),
        Field(
            "counted",
            "boolean",
            "false: scored, but not counted because a check it is gated on failed; weighted is 0",
        ),
        Field("provenance", "object", "where the value came from (model, version…)", nullable=True),
    ),
)

TRAJECTORY = Shape(
    "trajectory",
    (
        _int("group", "the GRPO group (same task) within the step", required=True, column="group_index"),
        _int("sample", "the sample's index within its group", required=True, column="sample_index"),
        Field(
            "task_id",
            "string",
            'stable across steps: "this task at step 10 vs step 200" pairs on it',
            required=True,
            min_length=1,
            max_length=200,
            column="task_id",
        ),
        Field(
            "reward",
            "number",
            "the total reward (normally the sum of the components' weighted)",
            required=True,
            column="reward",
        ),
        Field(
            "turns",
            "list",
            "the conversation (may be empty)",
            required=True,
            items=TURN,
            max_length=MAX_TURNS_PER_TRAJECTORY,
        ),
        Field(
            "prompt",
            "string",
            "the task prompt, for search and pairing",
            max_length=MAX_TEXT,
            default="",
            column="prompt",
        ),
        Field(
            "components",
            "list",
            "the reward per rubric criterion, raw and weighted",
            items=COMPONENT,
            max_length=MAX_COMPONENTS,
            default=[],
            column="components",
        ),
        Field(
            "advantage", "number", "the sample's advantage in its group", nullable=True, column="advantage"
        ),
        Field(
            "split",
            "string",
            "training sample or held-out evaluation",
            choices=SPLITS,
            default="train",
            column="split",
        ),
        Field(
            "status",
            "string",
            "how the episode ended",
            choices=TRAJECTORY_STATUSES,
            default="ok",
            column="status",
        ),
        _int(
            "seed",
            "the environment seed of the episode (null when unknown)",
            nullable=True,
            minimum=INT64_MIN,
            maximum=INT64_MAX,
            column="seed",
        ),
        _int(
            "policy_version",
            "the policy version that sampled it (updates since the start)",
            default=0,
            column="policy_version",
        ),
        _int(
            "staleness",
            "policy versions between the policy that sampled it and the one trained on it "
            "(0: on-policy; at most the run's max_staleness)",
            default=0,
            column="staleness",
        ),
        _int("prompt_tokens", "tokens of the initial prompt", default=0, column="prompt_tokens"),
        _int("completion_tokens", "tokens the model sampled", default=0, column="completion_tokens"),
        _int("rubric_version", "the rubric version that scored it", nullable=True, column="rubric_version"),
        Field(
            "env_state",
            "object",
            "the environment's final state, shown on the trajectory page",
            nullable=True,
            column="env_state",
        ),
        Field(
            "dropped",
            "boolean",
            "generated but not trained on (a zero-variance group dynamic sampling replaced)",
            default=False,
            column="dropped",
        ),
        Field(
            "env_reward",
            "number",
            "the sum of the rewards the environment itself returned (what an env_reward criterion reads)",
            nullable=True,
            column="env_reward",
        ),
        Field(
            "correct",
            "boolean",
            "the environment's own verdict on the answer (null: it gave none); the truth the reward-hacking "
            "alarm and the judge check compare a judge's scores with",
            nullable=True,
            column="correct",
        ),
        Field(
            "answer",
            "string",
            "the task's expected answer as text (JSON for a non-text answer; empty when the task has none)",
            max_length=MAX_TEXT,
            default="",
            column="answer",
        ),
        Field(
            "branch",
            "object",
            "where a branching rollout split off its parent (rollout_strategy branching): parent (its sample), "
            "prefix_tokens and turn (what they share), entropy, initial_entropy, rise; null for a whole sample",
            nullable=True,
            column="branch",
        ),
    ),
)

# Statistics known only after a trajectory was sent (the learner's, computed by the update that follows
# the step's early report) travel in a `token_stats` event, one item per turn, and join the turn's own.
TURN_TOKEN_STATS = Shape(
    "turn_token_stats",
    (
        _int("group", "the trajectory's group, as its trajectories event sent it", required=True),
        _int("sample", "its sample index in the group", required=True),
        Field("split", "string", "its split", choices=SPLITS, default="train"),
        _int("turn", "the turn's index in the trajectory", required=True, maximum=MAX_TURNS_PER_TRAJECTORY),
        Field(
            "stats",
            "record",
            "what to add to the turn's token_stats (a quantity already there is replaced); one entry per "
            "token id of the turn",
            required=True,
            items=TOKEN_STATS,
        ),
    ),
)

# Training-Free GRPO's experience library (trainers.recipes.training_free_grpo): one event per step.
EXPERIENCE_ITEM = Shape(
    "experience_item",
    (
        Field(
            "id", "string", 'the insight\'s id, never reused in a run ("G3")', required=True, max_length=20
        ),
        Field("text", "string", "the insight as the prompt shows it", required=True, max_length=2000),
    ),
)

EXPERIENCE_EDIT = Shape(
    "experience_edit",
    (
        Field("op", "string", "what the experience model asked for", required=True, choices=EXPERIENCE_OPS),
        Field("id", "string", "the insight it added or named", max_length=20, default=""),
        Field("text", "string", "the new text (add, modify)", max_length=2000, default=""),
        Field(
            "before", "string", "the text a modify replaced or a delete removed", max_length=2000, default=""
        ),
        Field("applied", "boolean", "false: refused (see reason)", default=True),
        Field("reason", "string", "why it was refused", max_length=200, default=""),
        _int("group", "the group whose contrast prompted it", default=0),
    ),
)

# The curriculum from failures (trainers.learn.curriculum): its task pool, one event per step.
TASK_POOL_ENTRY = Shape(
    "task_pool_entry",
    (
        Field("id", "string", "the task's id", required=True, max_length=200),
        Field("prompt", "string", "the first line of its prompt", max_length=2000, default=""),
        Field(
            "parent", "string", "the failed task it came from; empty: the run's", max_length=200, default=""
        ),
        Field("generator", "string", "what made it: environment, llm:<model>", max_length=250, default=""),
        _int("born", "the step after which it was generated", default=0),
        Field("state", "string", "where it is now", choices=TASK_POOL_STATES, default="new"),
        _int("attempts", "groups rolled out on it", default=0),
        Field("rate", "number", "the newest group's success rate", nullable=True),
        Field(
            "difficulty", "string", "its metadata's numbers for how hard it is", max_length=200, default=""
        ),
    ),
)

EVENT = Shape(
    "event",
    (
        _int(
            "seq",
            "the event's per-run sequence number; unique within the batch",
            required=True,
            minimum=1,
            maximum=INT64_MAX,
        ),
        Field("type", "string", "the event type, below", required=True),
        Field("time", "number", "Unix seconds when it happened (the metrics' wall-clock axis)"),
    ),
)

EVENTS: dict[str, Shape] = {
    "status": Shape(
        "status",
        (
            Field(
                "status",
                "string",
                "the trainer's lifecycle; applied where the status machine allows it",
                required=True,
                choices=TRAINER_STATUSES,
            ),
            Field("message", "string", "for FAILED, the run's error message", max_length=5000),
            Field(
                "traceback", "string", "for FAILED, shown on the run page", max_length=MAX_TEXT, nullable=True
            ),
            _int("step", "the step reached"),
        ),
    ),
    "metrics": Shape(
        "metrics",
        (
            _int("step", "the training step", required=True),
            Field(
                "values",
                "numbers",
                "metric name (1–100 characters) → finite number, or null (skipped: how a NaN travels)",
                required=True,
                min_length=1,
                max_length=MAX_METRICS_PER_EVENT,
            ),
            Field(
                "split",
                "string",
                "train or eval (informational; eval metrics are named eval/…)",
                choices=SPLITS,
            ),
            _int("tokens", "tokens seen so far, an alternative x-axis", maximum=INT64_MAX),
        ),
    ),
    "trajectories": Shape(
        "trajectories",
        (
            _int("step", "the training step", required=True),
            Field(
                "items",
                "list",
                "the rollouts",
                required=True,
                items=TRAJECTORY,
                min_length=1,
                max_length=MAX_ITEMS_PER_EVENT,
            ),
        ),
    ),
    "checkpoint": Shape(
        "checkpoint",
        (
            _int("step", "the step saved", required=True),
            Field(
                "path",
                "string",
                "where the trainer saved it (as the workers see it)",
                required=True,
                min_length=1,
                max_length=500,
            ),
            Field("kind", "string", "full weights or adapters only", choices=CHECKPOINT_KINDS),
            Field("metrics", "numbers", "metrics at the checkpoint", nullable=True, max_length=1000),
        ),
    ),
    "log": Shape(
        "log",
        (
            Field(
                "message", "string", "one line (or a few) for the run's log", required=True, max_length=20_000
            ),
            Field("level", "string", "severity", choices=LOG_LEVELS),
        ),
    ),
    "phase": Shape(
        "phase",
        (
            Field("phase", "string", "what the trainer is doing now", required=True, choices=PHASES),
            _int("step", "the step it works towards"),
            _int("done", "units of the phase finished (tasks evaluated, groups generated…)"),
            _int("total", "units the phase has in all (0: unknown)"),
            Field("message", "string", 'the phase in words, e.g. "generating turn 2"', max_length=500),
            Field(
                "elapsed_s",
                "number",
                "seconds since the phase began (0 when it starts; progress updates of one "
                "phase carry the time so far)",
            ),
        ),
    ),
    "token_stats": Shape(
        "token_stats",
        (
            _int("step", "the step of the trajectories the turns belong to", required=True),
            Field(
                "items",
                "list",
                "statistics for turns already sent (below)",
                required=True,
                items=TURN_TOKEN_STATS,
                min_length=1,
                max_length=MAX_ITEMS_PER_EVENT * 8,
            ),
        ),
    ),
    "experience": Shape(
        "experience",
        (
            _int(
                "step",
                "the step whose groups made these edits (0: the library the run starts with)",
                required=True,
            ),
            Field(
                "items",
                "list",
                "the library after the step",
                items=EXPERIENCE_ITEM,
                max_length=1000,
                default=[],
            ),
            Field(
                "edits",
                "list",
                "the step's edits in order",
                items=EXPERIENCE_EDIT,
                max_length=2000,
                default=[],
            ),
            _int("groups_asked", "groups with a contrast the experience model was asked about", default=0),
            _int("prompt_tokens", "the experience model's prompt tokens this step", default=0),
            _int("completion_tokens", "the experience model's answer tokens this step", default=0),
        ),
    ),
    "task_pool": Shape(
        "task_pool",
        (
            _int("step", "the step whose groups the pool has seen", required=True),
            _int("size", "tasks the pool knows", default=0),
            _int("frontier", "tasks waiting on the frontier", default=0),
            _int("replay", "tasks in the replay buffer of past successes", default=0),
            Field("drawn", "numbers", "the step's tasks by origin: tasks, frontier, replay", max_length=10),
            Field("generator", "string", "variants by: environment, llm:<model>", max_length=250, default=""),
            _int("generated", "variants the step's failures seeded", default=0),
            Field("refused", "numbers", "LLM variants refused, by reason", max_length=20, default={}),
            Field(
                "entries",
                "list",
                "the newest pool entries",
                items=TASK_POOL_ENTRY,
                max_length=1000,
                default=[],
            ),
        ),
    ),
    "heartbeat": Shape(
        "heartbeat",
        (
            _int(
                "peak_rss_mb",
                "the trainer process's peak resident memory (MB) since the run started; the run keeps the "
                "highest reported (trainers.sdk.resources)",
            ),
            _int("peak_gpu_mb", "the most GPU memory it allocated at once (MB), where it uses a GPU"),
        ),
    ),
}
EVENT_TYPES = tuple(EVENTS)
# Events that show a trainer moving forward (a heartbeat or a log line alone does not): the dashboard flags
# a run that heartbeats without any of these for a while as stalled.
PROGRESS_EVENTS = ("status", "metrics", "trajectories", "checkpoint", "phase")


__all__ = [
    "COMPONENT",
    "EVENT",
    "EVENTS",
    "EVENT_TYPES",
    "PHASES",
    "TOKEN_STATS",
    "TOKEN_STAT_NAMES",
    "TURN_TOKEN_STATS",
    "TRAJECTORY",
    "TURN",
    "Field",
    "Shape",
    "pack_halves",
    "pack_octets",
    "unpack_halves",
    "unpack_octets",
]
