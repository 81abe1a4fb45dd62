"""The run event wire format, declared once.

Every event a trainer reports — the built-in trainer through `trainers.sdk.reporting.HttpSink`, any other
through `trainers.sdk` or its own HTTP client — is a JSON object of one of the shapes below. The declaration
is this module and the two it builds on:

- `trainers.sdk.wire_fields`: the limits (what fits a column, a batch, an event) and `Field` / `Shape`;
- `trainers.sdk.wire_trajectory`: a trajectory, its turns, reward components and per-token statistics
  (where a new stored trajectory or turn field is declared);
- here: the events themselves (`EVENT`, `EVENTS`) and their vocabularies (statuses, phases, log levels).

This module is the one to import (`trainers.sdk.wire`, `trainers.wire` for users): it re-exports the other
two and the packing helpers (`trainers.sdk.wire_pack`). Everything else is derived from the declaration:

- `check_batch` / `check_item` (`trainers.sdk.wire_check`): the validator ingestion runs on every batch (compiled from the shapes
  into plain closures: it is on the hot path) and the SDK runs on what it is about to send, so a piece
  the server would refuse is dropped at the client with the same message;
- `Shape.columns`: which model field each stored value lands in, so ingestion stores and the API
  serializes a new field without code of their own;
- `json_schema()` (`trainers.sdk.wire_docs`): the JSON Schema of a batch, published in the OpenAPI document;
- `markdown_table()` (`trainers.sdk.wire_docs`): the field tables of docs/api.md (a test keeps the two equal).

Plain Python: no Django, no torch (the SDK installs without either).
"""

from __future__ import annotations

# Re-exported (noqa: F401): `trainers.sdk.wire` stays the one import for every shape, limit and packing helper
# of the wire format, as it was before they got modules of their own; users import them from here.
from trainers.sdk.wire_fields import (  # noqa: F401
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    MAX_COMPONENTS,
    MAX_EVENTS_PER_BATCH,
    MAX_ITEMS_PER_EVENT,
    MAX_JSON_DEPTH,
    MAX_METRIC_NAME,
    MAX_METRICS_PER_EVENT,
    MAX_TEXT,
    MAX_TOKENS_PER_TURN,
    MAX_TURNS_PER_TRAJECTORY,
    Errors,
    Field,
    Shape,
    int_field,
)
from trainers.sdk.wire_pack import (  # noqa: F401
    HALF_MAX,
    pack_halves,
    pack_octets,
    packed_length,
    unpack_halves,
    unpack_octets,
)
from trainers.sdk.wire_trajectory import (  # noqa: F401
    COMPONENT,
    ROLES,
    SPLITS,
    TOKEN_STAT_NAMES,
    TOKEN_STATS,
    TRAJECTORY,
    TRAJECTORY_STATUSES,
    TURN,
    TURN_TOKEN_STATS,
)

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
        int_field("group", "the group whose contrast prompted it", default=0),
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
        int_field("born", "the step after which it was generated", default=0),
        Field("state", "string", "where it is now", choices=TASK_POOL_STATES, default="new"),
        int_field("attempts", "groups rolled out on it", default=0),
        Field("rate", "number", "the newest group's success rate", nullable=True),
        Field(
            "difficulty", "string", "its metadata's numbers for how hard it is", max_length=200, default=""
        ),
    ),
)

EVENT = Shape(
    "event",
    (
        int_field(
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
            int_field("step", "the step reached"),
        ),
    ),
    "metrics": Shape(
        "metrics",
        (
            int_field("step", "the training step", required=True),
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
            int_field("tokens", "tokens seen so far, an alternative x-axis", maximum=INT64_MAX),
        ),
    ),
    "trajectories": Shape(
        "trajectories",
        (
            int_field("step", "the training step", required=True),
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
            int_field("step", "the step saved", required=True),
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
            int_field("step", "the step it works towards"),
            int_field("done", "units of the phase finished (tasks evaluated, groups generated…)"),
            int_field("total", "units the phase has in all (0: unknown)"),
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
            int_field("step", "the step of the trajectories the turns belong to", required=True),
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
            int_field(
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
            int_field(
                "groups_asked", "groups with a contrast the experience model was asked about", default=0
            ),
            int_field("prompt_tokens", "the experience model's prompt tokens this step", default=0),
            int_field("completion_tokens", "the experience model's answer tokens this step", default=0),
        ),
    ),
    "task_pool": Shape(
        "task_pool",
        (
            int_field("step", "the step whose groups the pool has seen", required=True),
            int_field("size", "tasks the pool knows", default=0),
            int_field("frontier", "tasks waiting on the frontier", default=0),
            int_field("replay", "tasks in the replay buffer of past successes", default=0),
            Field("drawn", "numbers", "the step's tasks by origin: tasks, frontier, replay", max_length=10),
            Field("generator", "string", "variants by: environment, llm:<model>", max_length=250, default=""),
            int_field("generated", "variants the step's failures seeded", default=0),
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
            int_field(
                "peak_rss_mb",
                "the trainer process's peak resident memory (MB) since the run started; the run keeps the "
                "highest reported (trainers.sdk.resources)",
            ),
            int_field("peak_gpu_mb", "the most GPU memory it allocated at once (MB), where it uses a GPU"),
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
