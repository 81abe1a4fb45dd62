"""The shapes of a rollout on the run event wire format (`trainers.sdk.wire`): a trajectory, its turns, its
reward components and the per-token statistics of a model turn; the `trajectories` and `token_stats` events
carry them. Each stored field names its model column (`column`), which is all ingestion and the API need.

Adding a stored trajectory or turn field: declare it here with its `column`, add the column to the model
(`webapp/rollouts/models.py` + a migration), show it in `templates/rollouts/trajectory.html`, and
regenerate its row in docs/api.md. Nothing else changes (docs/architecture.md has a worked example).
Plain Python.
"""

from __future__ import annotations

from typing import Any

from trainers.sdk.wire_fields import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    MAX_COMPONENTS,
    MAX_TEXT,
    MAX_TOKENS_PER_TURN,
    MAX_TURNS_PER_TRAJECTORY,
    Field,
    Shape,
    int_field,
)
from trainers.sdk.wire_pack import packed_length

ROLES = ("system", "user", "assistant", "tool")
SPLITS = ("train", "eval")
TRAJECTORY_STATUSES = ("ok", "truncated", "error")


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
        int_field("group", "the GRPO group (same task) within the step", required=True, column="group_index"),
        int_field("sample", "the sample's index within its group", required=True, column="sample_index"),
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
        int_field(
            "seed",
            "the environment seed of the episode (null when unknown)",
            nullable=True,
            minimum=INT64_MIN,
            maximum=INT64_MAX,
            column="seed",
        ),
        int_field(
            "policy_version",
            "the policy version that sampled it (updates since the start)",
            default=0,
            column="policy_version",
        ),
        int_field(
            "staleness",
            "policy versions between the policy that sampled it and the one trained on it "
            "(0: on-policy; at most the run's max_staleness)",
            default=0,
            column="staleness",
        ),
        int_field("prompt_tokens", "tokens of the initial prompt", default=0, column="prompt_tokens"),
        int_field("completion_tokens", "tokens the model sampled", default=0, column="completion_tokens"),
        int_field(
            "rubric_version", "the rubric version that scored it", nullable=True, column="rubric_version"
        ),
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
        int_field("group", "the trajectory's group, as its trajectories event sent it", required=True),
        int_field("sample", "its sample index in the group", required=True),
        Field("split", "string", "its split", choices=SPLITS, default="train"),
        int_field(
            "turn", "the turn's index in the trajectory", required=True, maximum=MAX_TURNS_PER_TRAJECTORY
        ),
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
