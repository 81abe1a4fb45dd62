"""Built-in rubric criterion kinds: `KindSpec`s whose JSON schemas describe each criterion's params.

Data only; the criterion classes are imported when a rubric is built.
"""

from __future__ import annotations

from trainers.kinds import KindSpec
from trainers.kinds import boolean_field as _bool
from trainers.kinds import choice_field as _enum
from trainers.kinds import integer_field as _int
from trainers.kinds import number_field as _number
from trainers.kinds import object_schema as _object

# The checks a `format` criterion makes when built without `checks` (its class falls back on these too).
FORMAT_CHECKS = ("answer_tag", "tool_call_syntax")

_CRITERIA_MODULE = "trainers.rubrics.criteria"

_TARGET = {
    "type": ["string", "null"],
    "title": "Expected answer",
    "description": "Compare with this instead of the task's answer (leave empty to use the task's answer).",
    "maxLength": 10000,
    "default": None,
}
_UNIT = _enum(
    "Length unit",
    "auto: tokens when the trajectory carries token ids, else whitespace-separated words. The "
    "explanation says which unit was used.",
    ["auto", "tokens", "words", "chars"],
    "auto",
)
_SCOPE = _enum(
    "What is measured",
    "all_assistant: every assistant message together (the completion); final_answer: the last one; "
    "longest_message: the longest assistant message (what runs into the per-message token budget).",
    ["all_assistant", "final_answer", "longest_message"],
    "all_assistant",
)

EXACT_MATCH = KindSpec(
    name="exact_match",
    title="Exact match",
    description="1 when the extracted answer equals the expected answer after normalisation, else 0.",
    config_schema=_object(
        {
            "extract": _enum(
                "Answer extraction",
                "answer_tag_or_full: the text inside the last <answer>…</answer>, else the whole final "
                "message; answer_tag: only the tag (no tag scores 0); full: the whole final message; "
                "last_line: its last non-empty line.",
                ["answer_tag_or_full", "answer_tag", "full", "last_line"],
                "answer_tag_or_full",
            ),
            "match": _enum(
                "Match",
                "equals: the whole answer must match; contains: the expected text appears in it.",
                ["equals", "contains"],
                "equals",
            ),
            "case_sensitive": _bool("Case sensitive", "Compare letter case.", False),
            "collapse_whitespace": _bool(
                "Collapse whitespace", "Trim and turn runs of whitespace into one space.", True
            ),
            "strip_punctuation": _bool("Strip punctuation", "Drop punctuation before comparing.", False),
            "target": _TARGET,
        }
    ),
    target=f"{_CRITERIA_MODULE}:ExactMatch",
    explanation_label="how the answer compared",
    typical_range="0 or 1",
    signal="verifiable",
)

NUMERIC_MATCH = KindSpec(
    name="numeric_match",
    title="Numeric match",
    description="1 when a number extracted from the answer is within tolerance of the expected number, else 0.",
    config_schema=_object(
        {
            "extract": _enum(
                "Number extraction",
                "Which number of the final message is the answer: inside the <answer> tag, the last or "
                "the first number in the text, or the tag falling back to the last number.",
                ["answer_tag_or_last_number", "answer_tag", "last_number", "first_number"],
                "answer_tag_or_last_number",
            ),
            "abs_tolerance": _number("Absolute tolerance", "|answer − expected| ≤ this passes.", 1e-6, 0.0),
            "rel_tolerance": _number(
                "Relative tolerance", "|answer − expected| ≤ this × |expected| passes too.", 0.0, 0.0, 1.0
            ),
            "target": {
                "type": ["number", "null"],
                "title": "Expected number",
                "description": "Compare with this instead of the task's answer (leave empty to use the task's answer).",
                "default": None,
            },
        }
    ),
    target=f"{_CRITERIA_MODULE}:NumericMatch",
    explanation_label="how the numbers compared",
    typical_range="0 or 1",
    signal="verifiable",
)

REGEX = KindSpec(
    name="regex",
    title="Regular expression",
    description="1 when the pattern matches (or, with 'must match' off, when it does not), else 0.",
    config_schema=_object(
        {
            "pattern": {
                "type": "string",
                "title": "Pattern",
                "description": "A Python regular expression.",
                "minLength": 1,
                "maxLength": 2000,
                "default": "",
            },
            "must_match": _bool(
                "Must match", "On: reward a match. Off: reward the absence of a match.", True
            ),
            "full_match": _bool(
                "Whole text", "The pattern must match the whole text, not just part of it.", False
            ),
            "flags": {
                "type": "array",
                "title": "Flags",
                "description": "Regular expression flags.",
                "items": {"type": "string", "enum": ["IGNORECASE", "MULTILINE", "DOTALL"]},
                "uniqueItems": True,
                "default": [],
            },
            "scope": _enum(
                "Where to look",
                "final_answer: the last assistant message; all_assistant: all assistant messages joined; "
                "each_assistant: the share of assistant messages that pass, with a per-turn reward each.",
                ["final_answer", "all_assistant", "each_assistant"],
                "final_answer",
            ),
        },
        required=["pattern"],
    ),
    target=f"{_CRITERIA_MODULE}:RegexCriterion",
    explanation_label="what the pattern matched",
    typical_range="0 or 1",
    signal="verifiable",
)

FORMAT = KindSpec(
    name="format",
    title="Format checks",
    description=(
        "The share of chosen format checks that pass (partial credit): an <answer> tag, well-formed "
        "tool calls, at least one tool call, nothing after the answer."
    ),
    config_schema=_object(
        {
            "checks": {
                "type": "array",
                "title": "Checks",
                "description": "answer_tag: the final message has <answer>…</answer>; tool_call_syntax: "
                "every <tool_call> block is well-formed JSON with a name (passes when there is none); "
                "used_tool: at least one well-formed tool call; nothing_after_answer: no text after "
                "</answer>.",
                "items": {
                    "type": "string",
                    "enum": ["answer_tag", "tool_call_syntax", "used_tool", "nothing_after_answer"],
                },
                "minItems": 1,
                "uniqueItems": True,
                "default": list(FORMAT_CHECKS),
            }
        }
    ),
    target=f"{_CRITERIA_MODULE}:FormatCriterion",
    explanation_label="format check",
    typical_range="0 to 1",
    signal="verifiable",
)

LENGTH = KindSpec(
    name="length",
    title="Length in range",
    description=(
        "1 inside [min, max]; below min it falls linearly to 0 at length 0, above max linearly to 0 at "
        "twice max."
    ),
    config_schema=_object(
        {
            "min_len": _int("Min length", "Shortest length that scores 1.", 0, 0, 1_000_000),
            "max_len": _int("Max length", "Longest length that scores 1.", 256, 1, 1_000_000),
            "unit": _UNIT,
            "scope": _SCOPE,
        }
    ),
    target=f"{_CRITERIA_MODULE}:LengthCriterion",
    explanation_label="length check",
    typical_range="0 to 1",
    signal="verifiable",
)

OVERLONG_PENALTY = KindSpec(
    name="overlong_penalty",
    title="Overlong penalty (DAPO)",
    description=(
        "Soft penalty: 0 up to max_len − buffer, then linear down to −1 at max_len, −1 beyond. Give it a "
        "positive weight: the raw value is already negative."
    ),
    config_schema=_object(
        {
            "max_len": _int("Max length", "Length at which the penalty reaches −1.", 512, 1, 1_000_000),
            "buffer": _int("Buffer", "Width of the linear ramp before max length.", 128, 0, 1_000_000),
            "unit": _UNIT,
            "scope": _SCOPE,
        }
    ),
    target=f"{_CRITERIA_MODULE}:OverlongPenalty",
    explanation_label="why the penalty",
    typical_range="−1 to 0",
    signal="verifiable",
)

TOOL_CALLS = KindSpec(
    name="tool_calls",
    title="Tool-call count and efficiency",
    description=(
        "Rewards a number of tool calls inside a target range, minus a penalty per call beyond the range "
        "and per failed call; gives per-turn rewards to each calling turn."
    ),
    config_schema=_object(
        {
            "min_calls": _int("Min calls", "Fewest tool calls that earn the in-range reward.", 1, 0, 100),
            "max_calls": _int("Max calls", "Most tool calls that earn the in-range reward.", 3, 0, 100),
            "reward_in_range": _number(
                "In-range reward", "Raw value when the count is in range.", 1.0, 0.0, 10.0
            ),
            "penalty_per_extra_call": _number(
                "Penalty per extra call", "Subtracted for each call beyond max calls.", 0.25, 0.0, 10.0
            ),
            "penalty_per_failed_call": _number(
                "Penalty per failed call",
                "Subtracted for each call that was malformed, refused or raised an error.",
                0.25,
                0.0,
                10.0,
            ),
        }
    ),
    target=f"{_CRITERIA_MODULE}:ToolCallsCriterion",
    explanation_label="tool calls counted",
    typical_range="about −1 to 1",
    signal="verifiable",
)

ENV_REWARD = KindSpec(
    name="env_reward",
    title="Environment reward",
    description="The reward the environment itself returned over the episode (its step() rewards summed).",
    config_schema=_object({}),
    target=f"{_CRITERIA_MODULE}:EnvRewardCriterion",
    explanation_label="environment says",
    typical_range="as the environment rewards",
    # The environment's reward is its own check of the task (an answer, a game won, tests passed), and in
    # the usual rubric — a learned reward beside the environment's — the only check: without it the
    # hacking alarm had nothing to compare the learned reward with (docs/review.md, "Reward-hacking alarm").
    signal="verifiable",
)

# A learned criterion's gate (trainers/rubrics/scoring.py applies it). Under GRPO's per-group
# normalisation a criterion that varies inside a group where the checks do not drives the update whatever
# its weight: bench/preference_loop.py's reward model, which had learned "shorter is better", took the
# bundled model from 50 % to 12.5 % (weight 0.5) and 0 % (weight 0.2) held-out accuracy in six steps.
ONLY_WHEN_CHECKS_PASS = _bool(
    "Only when the checks pass",
    "Count this criterion only on trajectories that pass every verifiable criterion of the rubric "
    "(correctness, format, the environment's reward…) and were not cut off: it then ranks the answers the "
    "checks accept (say, by conciseness) and cannot pay a policy for failing them. Off: it counts on every "
    "trajectory, which a policy can learn to please instead of doing the task.",
    False,
)

DEFAULT_JUDGE_TEMPLATE = (
    "You are grading an answer.\n"
    "Question: {prompt}\n"
    "Reference answer: {answer}\n"
    "Answer to grade: {response}\n"
    "Explain briefly, then finish with a line 'Score: N' where N is from 0 to 10."
)
# Group mode (ART's RULER idea): the whole GRPO group in one prompt, scored relative to each other.
DEFAULT_GROUP_TEMPLATE = (
    "You are comparing several answers to the same question; grade each relative to the others.\n"
    "Question: {prompt}\n"
    "Reference answer: {answer}\n\n"
    "{responses}\n\n"
    "Explain briefly, then write one line per answer, 'Answer K: N', where N is its score from 0 to 10 "
    "(the best answer highest)."
)
DEFAULT_SCORE_PATTERN = r"(?i)score\s*[:=]\s*(-?\d+(?:\.\d+)?)"
DEFAULT_GROUP_SCORE_PATTERN = (
    r"(?i)answer\s*#?\s*(\d+)\s*(?:score)?\s*[:=\-]\s*(?:score\s*[:=]?\s*)?(-?\d+(?:\.\d+)?)"
)
# Project secret names: what a criterion names to get an endpoint's key (never the key itself). Written like
# environment variable names, so a CLI run can take the key from the variable of the same name.
SECRET_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"

LLM_JUDGE = KindSpec(
    name="llm_judge",
    title="LLM judge",
    description=(
        "A chat model grades the response with a prompt template; the score is parsed from its reply and "
        "its reasoning kept as the explanation. The model runs where the criterion says: 'policy' (the "
        "run's frozen starting weights), a model the workers serve (loaded once per run), or an "
        "OpenAI-compatible endpoint (base URL, model, and a key from a project secret)."
    ),
    config_schema=_object(
        {
            "model": {
                "type": "string",
                "title": "Judge model",
                "description": "'policy' = a frozen copy of the model the run starts from; a model the "
                "workers serve (the bundled smollm2-135m, a Hugging Face id in their cache, a path they "
                "list); with a base URL, the endpoint's model name. Also part of the cache key.",
                "minLength": 1,
                "maxLength": 500,
                "default": "policy",
            },
            "base_url": {
                "type": "string",
                "title": "Endpoint base URL",
                "description": "An OpenAI-compatible endpoint (e.g. https://api.example.com/v1): the judge "
                "calls its /chat/completions. Empty: the model runs on the worker.",
                "maxLength": 500,
                "default": "",
            },
            "api_key_secret": {
                "type": "string",
                "title": "API key (project secret)",
                "description": "Name of the project secret holding the endpoint's key (Project → Secrets). "
                "The key itself is never stored in the rubric or the run.",
                "maxLength": 64,
                "default": "",
            },
            "mode": _enum(
                "Mode",
                "per_trajectory: one prompt per response, an absolute score. group: the whole GRPO group in "
                "one prompt, each response scored relative to the others (like ART's RULER).",
                ["per_trajectory", "group"],
                "per_trajectory",
            ),
            "template": {
                "type": "string",
                "title": "Prompt template",
                "description": "Per-trajectory mode. Fields: {prompt}, {response}, {answer}, {transcript}. "
                "Write {{ and }} for literal braces.",
                "minLength": 1,
                "maxLength": 20000,
                "default": DEFAULT_JUDGE_TEMPLATE,
            },
            "group_template": {
                "type": "string",
                "title": "Group prompt template",
                "description": "Group mode. Fields: {prompt}, {answer}, {responses} (the group's answers, "
                "numbered 'Answer 1:', 'Answer 2:', …).",
                "minLength": 1,
                "maxLength": 20000,
                "default": DEFAULT_GROUP_TEMPLATE,
            },
            "score_pattern": {
                "type": "string",
                "title": "Score pattern",
                "description": "Per-trajectory mode: a regular expression whose first group captures the "
                "score; the last match wins.",
                "minLength": 1,
                "maxLength": 500,
                "default": DEFAULT_SCORE_PATTERN,
            },
            "group_score_pattern": {
                "type": "string",
                "title": "Group score pattern",
                "description": "Group mode: a regular expression whose first group captures the answer's "
                "number and the second its score; the last match for each answer wins.",
                "minLength": 1,
                "maxLength": 500,
                "default": DEFAULT_GROUP_SCORE_PATTERN,
            },
            "min_score": _number("Lowest score", "Lowest score the template asks for.", 0.0),
            "max_score": _number("Highest score", "Highest score the template asks for.", 10.0),
            "normalize": _bool("Scale to 0–1", "Map [lowest, highest] to [0, 1] (values clipped).", True),
            "on_parse_failure": _number(
                "Value when no score is found", "Raw value when the judge's reply has no parsable score.", 0.0
            ),
            "max_new_tokens": _int(
                "Reply length",
                "Most tokens the judge writes per reply (the endpoint's max_tokens).",
                256,
                1,
                8192,
            ),
            "reply_prefix": {
                "type": "string",
                "title": "Reply starts with",
                "description": "Text written at the start of the judge's reply before it continues (models on "
                "the workers only), e.g. 'Score:' so a small model answers with the number at once. It is "
                "part of the reply that is parsed.",
                "maxLength": 200,
                "default": "",
            },
            "timeout_s": _number("Endpoint timeout (s)", "Limit of one endpoint call.", 60.0, 1.0, 600.0),
            "only_when_checks_pass": ONLY_WHEN_CHECKS_PASS,
        }
    ),
    target="trainers.rubrics.judge:LLMJudge",
    needs_model=True,
    explanation_label="judge says",
    typical_range="0 to 1 (scaled); the template's scale otherwise",
    signal="learned",
)

LEARNED_REWARD = KindSpec(
    name="learned_reward",
    title="Learned reward model",
    description=(
        "A reward model trained from preference judgements (a Bradley–Terry head over the policy "
        "model's mean-pooled embeddings), loaded from a directory on the workers (needs a model)."
    ),
    config_schema=_object(
        {
            "path": {
                "type": "string",
                "title": "Reward model directory",
                "description": "Directory holding reward_model.json and its weights, as the workers see it.",
                "minLength": 1,
                "maxLength": 1000,
                "default": "",
            },
            "batch_size": _int("Batch size", "Texts scored per forward pass.", 8, 1, 256),
            "bounded": {
                "type": "boolean",
                "title": "Standardise and bound",
                "description": "tanh((score − mean) / std) with the model's training-text statistics, so the "
                "criterion lies in (−1, 1) like the others; off: the raw, unbounded score.",
                "default": True,
            },
            "per_turn": {
                "type": "boolean",
                "title": "Score each turn",
                "description": "Also score the conversation after each assistant turn: a turn's reward is "
                "how much it moved the score (the run's per-turn advantage weight uses them). Costs one "
                "more scoring per assistant turn.",
                "default": False,
            },
            "only_when_checks_pass": ONLY_WHEN_CHECKS_PASS,
        },
        required=["path"],
    ),
    target="trainers.rubrics.reward_model:LearnedReward",
    needs_model=True,
    explanation_label="reward model says",
    typical_range="−1 to 1 (standardised, bounded); unbounded raw otherwise",
    signal="learned",
)

CUSTOM_PYTHON = KindSpec(
    name="custom_python",
    title="Custom Python function",
    description=(
        "A reward function installed on the workers, named by its entry point (group "
        "rollout_studio.reward_functions) or as module:function. It receives the trajectory and the "
        "arguments below. Nothing typed here is ever evaluated as code."
    ),
    config_schema=_object(
        {
            "function": {
                "type": "string",
                "title": "Function",
                "description": "An entry point name (e.g. my_reward) or a dotted path (e.g. my_pkg.rewards:score).",
                "pattern": r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_]*)?$",
                "minLength": 1,
                "maxLength": 300,
                "default": "",
            },
            "args": {
                "type": "object",
                "title": "Arguments",
                "description": "Keyword arguments passed to the function (JSON object).",
                "default": {},
            },
        },
        required=["function"],
    ),
    target=f"{_CRITERIA_MODULE}:CustomPython",
    explanation_label="your function says",
    typical_range="as the function returns",
)

MATH_VERIFY = KindSpec(
    name="math_verify",
    extra="envs",
    title="Math answer equivalence (math-verify)",
    description=(
        "1 when the answer is mathematically equivalent to the expected one, checked symbolically by "
        "math-verify: 1/2 = 0.5 = \\frac{1}{2}, {1,2} = {2,1}, (x+1)^2 = x^2+2x+1. The explanation shows what was read."
    ),
    config_schema=_object(
        {
            "extract": _enum(
                "Answer extraction",
                "answer_tag_or_full: the text inside the last <answer>…</answer>, else the whole final message; "
                "answer_tag: only the tag (no tag scores 0); full: the whole final message.",
                ["answer_tag_or_full", "answer_tag", "full"],
                "answer_tag_or_full",
            ),
            "target": _TARGET,
            "float_rounding": _int(
                "Decimal places", "Numbers are compared after rounding to this many places.", 6, 0, 15
            ),
            "strict": _bool(
                "Strict",
                "Off: also accept an equation for its right-hand side and a set for one "
                "of its orderings where math-verify allows it.",
                True,
            ),
            "timeout_s": _int(
                "Time limit (s)", "Longest symbolic check per answer (main thread only).", 5, 1, 60
            ),
        }
    ),
    target="trainers.rubrics.ecosystem:MathVerifyCriterion",
    explanation_label="verifier says",
    typical_range="0 or 1",
    signal="verifiable",
)

VERIFIERS_RUBRIC = KindSpec(
    name="verifiers_rubric",
    extra="envs",
    title="verifiers rubric function",
    description=(
        "A reward function of a verifiers environment's rubric, as the `verifiers` environment computed it "
        "at the end of the episode. Name one function (its value is the raw score; give it its weight here) "
        "or leave empty for the rubric's weighted total."
    ),
    config_schema=_object(
        {
            "function": {
                "type": "string",
                "title": "Reward function",
                "description": "The function's name in the environment's rubric, e.g. correct_answer. Empty: "
                "the weighted sum of all of them with the environment's weights.",
                "maxLength": 200,
                "default": "",
            },
        }
    ),
    target="trainers.rubrics.ecosystem:VerifiersRubricCriterion",
    explanation_label="verifiers rubric says",
    typical_range="as the verifiers rubric returns",
)

BUILTIN_CRITERIA: list[KindSpec] = [
    EXACT_MATCH,
    NUMERIC_MATCH,
    REGEX,
    FORMAT,
    LENGTH,
    OVERLONG_PENALTY,
    TOOL_CALLS,
    ENV_REWARD,
    LLM_JUDGE,
    LEARNED_REWARD,
    CUSTOM_PYTHON,
    MATH_VERIFY,
    VERIFIERS_RUBRIC,
]
