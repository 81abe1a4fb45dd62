"""The built-in environment kinds of this package's own environments (arithmetic, countdown, frozen lake,
Python tool, from a dataset, MCP tools), each a `KindSpec` whose JSON schema the dashboard renders as a form,
and the schema fragments kinds share. The kinds that bring an ecosystem's environment in (OpenEnv,
verifiers, reasoning-gym, TextArena, agents, Harbor) are declared in `trainers.envs.ecosystem_kinds`.

Data only, as `trainers.rubrics.kinds` is for criteria: the environment classes live in sibling modules and
are imported when a kind is built (`KindSpec.build`), so the web process lists kinds and validates configs
cheaply.
"""

from __future__ import annotations

from typing import Any

from trainers.kinds import KindSpec
from trainers.kinds import boolean_field as _bool
from trainers.kinds import integer_field as _int
from trainers.kinds import number_field as _number
from trainers.kinds import object_schema as _object

# Defaults a kind's class falls back on when built directly (`operations=None`), declared once for both.
ARITHMETIC_OPERATIONS = ("+", "-", "*")

# ---- schema fragments shared by several kinds (the generic ones, short-named, are trainers.kinds') ----


def _max_turns(default: int, maximum: int = 32) -> dict[str, Any]:
    return _int(
        "Max turns",
        "Assistant messages allowed per episode; an episode still running after this many is truncated. "
        "A run's own Max turns knob can only lower it: the smaller of the two applies.",
        default,
        1,
        maximum,
    )


def _max_tool_calls(default: int) -> dict[str, Any]:
    return _int(
        "Max tool calls",
        "Tool calls allowed per episode; calls beyond this get an error observation instead of a result.",
        default,
        0,
        32,
    )


_EVAL_FRACTION = _number(
    "Eval fraction",
    "Share of the task space (chosen by a hash of each task's content) reserved for the eval split; "
    "train and eval never share a task.",
    0.1,
    0.01,
    0.5,
)
_REWARD_CORRECT = _number(
    "Reward for a correct answer", "Environment reward when the final answer is right.", 1.0, 0.0, 10.0
)
_REWARD_VALID_TOOL_CALL = _number(
    "Reward for a valid tool call",
    "Partial credit, given once per episode, for the first well-formed tool call that runs without error. "
    "Gives a small model a signal it can reach before it can solve tasks.",
    0.1,
    0.0,
    1.0,
)
_FEW_SHOT = _bool(
    "Worked example as chat turns",
    "Before the task, show one solved episode as real messages (question, tool call, result, answer). "
    "Small models copy a format from real turns far more reliably than from a description: SmolLM2-135M "
    "wrote 0 well-formed calculator calls in 40 samples without it, 7 in 24 with it.",
    True,
)
_REQUIRE_ANSWER_TAG = _bool(
    "Require <answer> tag",
    "Count the final answer only when it is inside <answer>…</answer>; otherwise the last number in the "
    "final message is taken as the answer.",
    False,
)

MCP_SERVERS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "title": "MCP servers",
    "description": "Tools from Model Context Protocol servers, added to the environment's own. Each server: "
    'a stdio `command` run on the workers (e.g. ["python", "server.py"]) or a Streamable HTTP `url`; '
    '`allow_tools` lists the tools the model may see and call (["*"] for all); `max_calls` per episode; '
    "`timeout_s` per call. A refused, failed or timed-out call is an Error: observation.",
    "default": [],
    "maxItems": 16,
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "allow_tools"],
        "oneOf": [{"required": ["command"]}, {"required": ["url"]}],
        "properties": {
            "name": {
                "type": "string",
                "pattern": "^[A-Za-z0-9_.-]{1,64}$",
                "description": "A label for errors and limits.",
            },
            "command": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": 4000},
                "minItems": 1,
                "maxItems": 64,
                "description": "Program and arguments of a stdio server (no shell).",
            },
            "url": {
                "type": "string",
                "pattern": "^https?://",
                "maxLength": 2000,
                "description": "Streamable HTTP endpoint.",
            },
            "cwd": {
                "type": "string",
                "maxLength": 1000,
                "description": "Working directory of a stdio server.",
            },
            "env": {
                "type": "object",
                "additionalProperties": {"type": "string", "maxLength": 4000},
                "description": "Extra environment variables of a stdio server.",
            },
            "allow_tools": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": 200},
                "minItems": 1,
                "uniqueItems": True,
                "description": 'Tools the model may see and call; ["*"] for every tool the server lists.',
            },
            "max_calls": {
                "type": "integer",
                "minimum": 0,
                "maximum": 64,
                "default": 8,
                "description": "Calls per episode to this server.",
            },
            "timeout_s": {
                "type": "number",
                "minimum": 0.1,
                "maximum": 600,
                "default": 10,
                "description": "Time limit of one call, in seconds.",
            },
            "protocol": {
                "type": "string",
                "enum": ["auto", "2026-07-28", "session"],
                "default": "auto",
                "description": "For a url: 2026-07-28 speaks MCP's stateless revision (each request one "
                "self-contained POST, no handshake, no session: servers on mcp 2.x); session, the "
                "initialize handshake and an Mcp-Session-Id (earlier revisions); auto tries the stateless "
                "revision first.",
            },
        },
    },
}

_MATCH = {
    "type": "string",
    "title": "Answer check",
    "description": "How the environment's own reward compares the final answer with the task's answer: exact "
    "(normalised text), numeric (tolerance 1e-6) or contains.",
    "enum": ["exact", "numeric", "contains"],
    "default": "exact",
}

# ---- the built-in kinds -----------------------------------------------------------------------

ARITHMETIC_CALCULATOR = KindSpec(
    name="arithmetic_calculator",
    title="Arithmetic with a calculator",
    description=(
        "Multi-turn arithmetic: the model may call a `calculator` tool (a safe expression evaluator) and "
        "then answers in <answer>…</answer>. The system prompt shows a worked tool-call example; train "
        "tasks ramp from easy to hard when the curriculum is on."
    ),
    config_schema=_object(
        {
            "min_digits": _int("Min digits", "Fewest digits in an operand.", 1, 1, 6),
            "max_digits": _int("Max digits", "Most digits in an operand (the hardest tasks).", 2, 1, 6),
            "operations": {
                "type": "array",
                "title": "Operations",
                "description": "Operators tasks may use. Division tasks are generated with whole results only.",
                "items": {"type": "string", "enum": ["+", "-", "*", "/"]},
                "minItems": 1,
                "uniqueItems": True,
                "default": list(ARITHMETIC_OPERATIONS),
            },
            "min_operands": _int("Min operands", "Fewest numbers in an expression.", 2, 2, 6),
            "max_operands": _int(
                "Max operands", "Most numbers in an expression (the hardest tasks).", 3, 2, 6
            ),
            "curriculum": _bool(
                "Curriculum (easy → hard)",
                "Order train tasks from one-digit sums up to the configured maximum difficulty. Eval tasks "
                "are spread over all difficulties.",
                True,
            ),
            "max_turns": _max_turns(4),
            "few_shot": _FEW_SHOT,
            "max_tool_calls": _max_tool_calls(3),
            "max_expression_chars": _int(
                "Max expression length",
                "Longest calculator expression accepted, in characters.",
                100,
                1,
                1000,
            ),
            "require_answer_tag": _REQUIRE_ANSWER_TAG,
            "reward_correct": _REWARD_CORRECT,
            "reward_valid_tool_call": _REWARD_VALID_TOOL_CALL,
            "reward_answer_format": _number(
                "Reward for an <answer> tag",
                "Partial credit when the final message has an <answer>…</answer> tag, right or wrong.",
                0.1,
                0.0,
                1.0,
            ),
            "eval_fraction": _EVAL_FRACTION,
            "mcp_servers": MCP_SERVERS_SCHEMA,
        }
    ),
    target="trainers.envs.arithmetic:ArithmeticCalculatorEnv",
)

COUNTDOWN = KindSpec(
    name="countdown",
    title="Countdown numbers game",
    description=(
        "Reach a target number by combining the given numbers with + - * / (each number used at most "
        "once). The model answers with an expression in <answer>…</answer>; the checker parses it (no "
        "eval) and verifies the numbers used and the result."
    ),
    config_schema=_object(
        {
            "num_numbers": _int("Numbers per task", "How many numbers the model is given.", 3, 2, 6),
            "max_number": _int("Largest number", "Numbers are drawn from 1 to this value.", 20, 2, 100),
            "max_target": _int("Largest target", "Targets are at most this value.", 100, 2, 10000),
            "calculator_tool": _bool(
                "Offer a calculator tool", "Let the model check sub-expressions with a calculator.", True
            ),
            "max_turns": _max_turns(4),
            "few_shot": _FEW_SHOT,
            "max_tool_calls": _max_tool_calls(3),
            "max_expression_chars": _int(
                "Max expression length",
                "Longest expression accepted (calculator and answer), in characters.",
                100,
                1,
                1000,
            ),
            "reward_correct": _REWARD_CORRECT,
            "reward_valid_expression": _number(
                "Reward for a valid expression",
                "Partial credit for an answer that is a well-formed expression using only the given "
                "numbers (each at most once) but misses the target.",
                0.1,
                0.0,
                1.0,
            ),
            "eval_fraction": _EVAL_FRACTION,
            "mcp_servers": MCP_SERVERS_SCHEMA,
        }
    ),
    target="trainers.envs.countdown:CountdownEnv",
)

FROZEN_LAKE = KindSpec(
    name="frozen_lake",
    title="Frozen lake (text grid)",
    description=(
        "Walk from S to G on a text grid without stepping into a hole (H). Moves come through a `move` "
        "tool or as words in the text (up/down/left/right). Maps are deterministic per task and always "
        "solvable; state() returns the grid."
    ),
    config_schema=_object(
        {
            "size": _int("Grid size", "Width and height of the square grid.", 4, 3, 8),
            "hole_fraction": _number(
                "Hole fraction",
                "Share of cells that are holes (a path to the goal always exists).",
                0.2,
                0.0,
                0.5,
            ),
            "interface": {
                "type": "string",
                "title": "Move interface",
                "description": "`tool`: one `move` tool call per step. `text`: moves written as words, "
                "e.g. <answer>right right down</answer>, several per message.",
                "enum": ["tool", "text"],
                "default": "tool",
            },
            "max_turns": _max_turns(12, 64),
            "few_shot": _FEW_SHOT,
            "max_moves_per_turn": _int(
                "Max moves per message (text interface)",
                "Moves beyond this in one message are ignored.",
                8,
                1,
                64,
            ),
            "reward_goal": _number(
                "Reward for reaching the goal", "Environment reward at G.", 1.0, 0.0, 10.0
            ),
            "reward_progress": _number(
                "Partial credit for progress",
                "At the end of an episode that missed the goal, this times the share of the shortest-path "
                "distance covered (0 turns it off).",
                0.0,
                0.0,
                1.0,
            ),
            "eval_fraction": _EVAL_FRACTION,
        }
    ),
    target="trainers.envs.frozen_lake:FrozenLakeEnv",
)

PYTHON_TASK_TYPES = [
    "sum_of_squares",
    "count_primes",
    "fibonacci",
    "factorial_mod",
    "gcd",
    "digit_sum_power",
    "count_divisors",
]

PYTHON_TOOL = KindSpec(
    name="python_tool",
    title="Python tool",
    description=(
        "Compute-style questions (e.g. how many primes are below 500?) the model answers by writing "
        "Python that runs in the sandbox through a `python` tool, then giving <answer>…</answer>."
    ),
    config_schema=_object(
        {
            "task_types": {
                "type": "array",
                "title": "Task types",
                "description": "Families of questions to draw from.",
                "items": {"type": "string", "enum": PYTHON_TASK_TYPES},
                "minItems": 1,
                "uniqueItems": True,
                "default": list(PYTHON_TASK_TYPES),
            },
            "max_turns": _max_turns(4),
            "few_shot": _FEW_SHOT,
            "max_tool_calls": _max_tool_calls(3),
            "max_code_chars": _int(
                "Max code length", "Longest program accepted, in characters.", 2000, 10, 20000
            ),
            "timeout_s": _number("Time limit (s)", "Wall-clock limit per program run.", 5.0, 0.5, 60.0),
            "memory_mb": _int("Memory limit (MiB)", "Address-space limit per program run.", 256, 64, 4096),
            "require_answer_tag": _REQUIRE_ANSWER_TAG,
            "reward_correct": _REWARD_CORRECT,
            "reward_valid_tool_call": _REWARD_VALID_TOOL_CALL,
            "eval_fraction": _EVAL_FRACTION,
            "mcp_servers": MCP_SERVERS_SCHEMA,
        }
    ),
    target="trainers.envs.python_tool:PythonToolEnv",
)

FROM_DATASET = KindSpec(
    name="from_dataset",
    title="Tasks from a JSONL file",
    description=(
        'Your own tasks: a JSONL file on the workers with one {"prompt": …, "answer": …} object per '
        'line (optional "id" and "tools"). The eval split is chosen by a hash of each prompt.'
    ),
    config_schema=_object(
        {
            "path": {
                "type": "string",
                "title": "Dataset path",
                "description": "Path of the JSONL file as the workers see it.",
                "minLength": 1,
                "maxLength": 1000,
                "default": "",
            },
            "tools": {
                "type": "array",
                "title": "Tools",
                "description": 'Tools offered on every task (a line\'s own "tools" list narrows this).',
                "items": {"type": "string", "enum": ["calculator", "python"]},
                "uniqueItems": True,
                "default": [],
            },
            "match": _MATCH,
            "system_prompt": {
                "type": "string",
                "title": "System prompt",
                "description": "Extra instructions placed before the tool description (may be empty).",
                "maxLength": 10000,
                "default": "",
            },
            "max_turns": _max_turns(4),
            "few_shot": _FEW_SHOT,
            "max_tool_calls": _max_tool_calls(3),
            "reward_correct": _REWARD_CORRECT,
            "eval_fraction": _EVAL_FRACTION,
            "mcp_servers": MCP_SERVERS_SCHEMA,
        },
        required=["path"],
    ),
    target="trainers.envs.from_dataset:DatasetEnv",
)

MCP_TOOLS = KindSpec(
    name="mcp_tools",
    extra="envs",
    title="Tasks with tools from MCP servers",
    description=(
        "Try an MCP server with no code: a few tasks written here (or a JSONL file), the tools a Model Context "
        "Protocol server lists (stdio command or Streamable HTTP URL, each tool allowed by name), the final "
        "answer checked against the task's answer and scored by the rubric."
    ),
    config_schema=_object(
        {
            "tasks": {
                "type": "array",
                "title": "Tasks",
                "description": '[{"prompt": …, "answer": …, "id"?: …}, …]; the eval split is chosen by a hash '
                "of each prompt. Leave empty to read `path` instead.",
                "items": {"type": "object"},
                "maxItems": 10000,
                "default": [],
            },
            "path": {
                "type": "string",
                "title": "Dataset path",
                "description": "A JSONL file of tasks on the workers (used when `tasks` is empty).",
                "maxLength": 1000,
                "default": "",
            },
            "mcp_servers": {**MCP_SERVERS_SCHEMA, "minItems": 1},
            "match": _MATCH,
            "system_prompt": {
                "type": "string",
                "title": "System prompt",
                "description": "Instructions placed before the answer format (may be empty).",
                "maxLength": 10000,
                "default": "",
            },
            "max_turns": _max_turns(4),
            "max_tool_calls": _max_tool_calls(4),
            "reward_correct": _REWARD_CORRECT,
            "eval_fraction": _EVAL_FRACTION,
        },
        required=["mcp_servers"],
    ),
    target="trainers.envs.from_dataset:McpToolsEnv",
)

# ---- ecosystem kinds: environments people bring (the `envs` extra installs their packages) -------
