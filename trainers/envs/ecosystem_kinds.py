"""The built-in kinds that bring another ecosystem's environments in: OpenEnv servers, verifiers
packages, reasoning-gym datasets, TextArena games, agent programs, Harbor tasks. Data only (as
`trainers.envs.kinds`, whose shared schema fragments they use); each adapter is imported when its kind is
built, and its package only then.
"""

from __future__ import annotations

from trainers.envs.kinds import (
    _EVAL_FRACTION,
    _REQUIRE_ANSWER_TAG,
    _REWARD_CORRECT,
    _max_tool_calls,
    _max_turns,
)
from trainers.kinds import KindSpec
from trainers.kinds import boolean_field as _bool
from trainers.kinds import choice_field as _enum
from trainers.kinds import integer_field as _int
from trainers.kinds import number_field as _number
from trainers.kinds import object_schema as _object
from trainers.kinds import text_field as _text

OPENENV = KindSpec(
    name="openenv",
    extra="envs",
    title="OpenEnv server",
    description=(
        "Any OpenEnv environment server (reset / step / state over HTTP, or one /ws session per episode). "
        "Give its address, or a Python app or command that each rollout worker starts on a free local "
        "port. The model's message becomes the action; the server's reward and done drive the episode."
    ),
    config_schema=_object(
        {
            "url": _text(
                "Server address",
                "Base URL of a running server, e.g. http://127.0.0.1:8000. Leave "
                "empty to start the server below instead.",
                max_length=500,
            ),
            "server_app": _text(
                "Server app to start",
                "A Python ASGI app as module:attribute, e.g. "
                "my_env.server.app:app, run with uvicorn on a free 127.0.0.1 port by each rollout "
                "worker and stopped when it exits.",
                max_length=300,
            ),
            "server_command": _text(
                "Server command to start",
                "A command line that starts the server; write "
                "{port} where it should listen, e.g. python -m my_env.server --port {port}.",
                max_length=2000,
            ),
            "server_cwd": _text(
                "Server working directory",
                "Directory the started server runs in (and imports from); empty: the worker's own.",
                max_length=1000,
            ),
            "image": _text(
                "Docker image to start",
                "An OpenEnv environment's image (as openenv build makes one): each rollout worker runs one "
                "container of it, its port published on a free 127.0.0.1 port, and removes it at exit.",
                max_length=500,
            ),
            "container_port": _int(
                "Container port", "The port the server listens on inside the image.", 8000, 1, 65535
            ),
            "container_env": {
                "type": "object",
                "title": "Container environment",
                "description": "Environment variables of the container (JSON object of strings).",
                "additionalProperties": {"type": "string", "maxLength": 4000},
                "default": {},
            },
            "transport": _enum(
                "Transport",
                "auto: a /ws session per episode when the server offers one, else "
                "HTTP. http: stateless POST /reset and /step (only for servers that keep the "
                "episode's state themselves).",
                ["auto", "ws", "http"],
                "auto",
            ),
            "action_format": _enum(
                "How the model acts",
                "text: the whole message is sent as one text field of the action. json: the model writes the "
                "action as a JSON object, checked against the server's action schema. tools: the server's MCP "
                "tools are offered as tools; each call is one step.",
                ["text", "json", "tools"],
                "text",
            ),
            "action_field": _text(
                "Action text field",
                "For text actions: the action field that receives the "
                'message. Empty: the action schema\'s only text field (or "message").',
                max_length=200,
            ),
            "observation_field": _text(
                "Observation text field",
                "Which observation field the model reads. "
                "Empty: its only field when it has one, else the whole observation as "
                "JSON.",
                max_length=200,
            ),
            "system_prompt": _text(
                "System prompt",
                "Instructions for the model, placed before the action format.",
                max_length=10000,
            ),
            "task_prompt": _text(
                "Text before the first observation",
                "Placed before what the server says at reset (e.g. the goal of the game).",
                max_length=10000,
            ),
            "reset_args": {
                "type": "object",
                "title": "Extra reset arguments",
                "description": "Sent with every reset besides seed and episode_id (JSON object).",
                "default": {},
            },
            "max_turns": _max_turns(8, 64),
            "max_tool_calls": _max_tool_calls(8),
            "connect_timeout_s": _number(
                "Connect timeout (s)", "Longest wait to connect to the server.", 5.0, 0.1, 120.0
            ),
            "step_timeout_s": _number(
                "Step timeout (s)", "Longest wait for the server's answer to one step.", 30.0, 0.1, 3600.0
            ),
            "startup_timeout_s": _number(
                "Startup timeout (s)",
                "Longest wait for a started server to become "
                "healthy (OpenEnv servers import gradio: tens of seconds on a "
                "busy machine).",
                120.0,
                1.0,
                600.0,
            ),
            "eval_fraction": _EVAL_FRACTION,
        }
    ),
    target="trainers.envs.openenv:OpenEnvEnvironment",
)

VERIFIERS = KindSpec(
    name="verifiers",
    extra="envs",
    title="verifiers environment package",
    description=(
        "An installed verifiers environment (a package exposing load_environment()): its dataset gives the "
        "tasks, its multi-turn or tool protocol runs the episode, and its rubric's reward functions and "
        "weights score it (each one also available as a verifiers_rubric criterion)."
    ),
    config_schema=_object(
        {
            "environment": _text(
                "Environment",
                "The installed environment's id or module, e.g. vf-wordle or vf_wordle (as in `vf-eval`).",
                max_length=200,
                minLength=1,
                pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$",
            ),
            "env_args": {
                "type": "object",
                "title": "Environment arguments",
                "description": "Keyword arguments for load_environment() (JSON object).",
                "default": {},
            },
            "max_turns": _int(
                "Max turns", "Assistant messages per episode; 0 keeps the environment's own limit.", 0, 0, 64
            ),
            "max_tool_calls": _max_tool_calls(8),
            "eval_fraction": _number(
                "Eval fraction",
                "When the environment has no eval dataset: the share of "
                "its dataset (by a hash of each prompt) held out for eval.",
                0.1,
                0.01,
                0.5,
            ),
            "step_timeout_s": _number(
                "Step timeout (s)",
                "Longest wait for the environment's answer (tool call, env response or scoring) in one step; "
                "with verifiers 0.4, for a whole episode.",
                60.0,
                1.0,
                3600.0,
            ),
            "api": _enum(
                "verifiers API",
                "classic: verifiers 0.1.9-0.3.x in the worker's own venv (load_environment). v1: verifiers 0.4 "
                "(Taskset, Harness, Toolset) served from its own venv (see python).",
                ["classic", "v1"],
                "classic",
            ),
            "python": _text(
                "verifiers 0.4 Python",
                "The interpreter of a venv with verifiers 0.4 and the environment installed (e.g. "
                ".venv-vf04/bin/python); empty with api v1: $ROLLOUT_STUDIO_VF04_PYTHON.",
                "",
                max_length=500,
            ),
            "harness": _text(
                "Harness (verifiers 0.4)",
                "The harness that plays each episode: null (the tool-less chat loop; with the taskset's "
                "toolsets, its MCP tools), bash, or any harness id verifiers or the package provides.",
                "null",
                max_length=100,
                pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$",
            ),
            "max_tasks": _int(
                "Max tasks (verifiers 0.4)",
                "How many tasks of an endless taskset (generated games…) are used.",
                1000,
                1,
                100000,
            ),
            "harness_args": {
                "type": "object",
                "title": "Harness arguments (verifiers 0.4)",
                "description": "More fields of the harness's config (JSON object).",
                "default": {},
            },
        },
        required=["environment"],
    ),
    target="trainers.envs.verifiers_env:VerifiersEnvironment",
)

# reasoning-gym's task generators (reasoning_gym.factory.DATASETS of the pinned version; a test keeps the two
# equal): the environment form offers them as a list, and a typo is answered with the valid names.
REASONING_GYM_DATASETS = [
    "ab",
    "acre",
    "advanced_geometry",
    "aiw",
    "arc_1d",
    "arc_agi",
    "base_conversion",
    "basic_arithmetic",
    "bf",
    "binary_alternation",
    "binary_matrix",
    "bitwise_arithmetic",
    "boxnet",
    "caesar_cipher",
    "calendar_arithmetic",
    "chain_sum",
    "circuit_logic",
    "codeio",
    "coin_flip",
    "color_cube_rotation",
    "complex_arithmetic",
    "composite",
    "count_bits",
    "count_primes",
    "countdown",
    "course_schedule",
    "cryptarithm",
    "decimal_arithmetic",
    "decimal_chain_sum",
    "dice",
    "emoji_mystery",
    "family_relationships",
    "figlet_font",
    "fraction_simplification",
    "futoshiki",
    "game_of_life",
    "game_of_life_halting",
    "gcd",
    "graph_color",
    "group_anagrams",
    "gsm_symbolic",
    "intermediate_integration",
    "isomorphic_strings",
    "jugs",
    "kakurasu",
    "knight_swap",
    "knights_knaves",
    "largest_island",
    "lcm",
    "leg_counting",
    "letter_counting",
    "letter_jumble",
    "list_functions",
    "mahjong_puzzle",
    "manipulate_matrix",
    "maze",
    "mini_sudoku",
    "modulo_grid",
    "n_queens",
    "needle_haystack",
    "number_filtering",
    "number_format",
    "number_sequence",
    "number_sorting",
    "palindrome_generation",
    "palindrome_partitioning",
    "path_star",
    "polynomial_equations",
    "polynomial_multiplication",
    "pool_matrix",
    "power_function",
    "prime_factorization",
    "products",
    "propositional_logic",
    "puzzle24",
    "quantum_lock",
    "ransom_note",
    "rearc",
    "rectangle_count",
    "rotate_matrix",
    "rotten_oranges",
    "rubiks_cube",
    "rush_hour",
    "self_reference",
    "sentence_reordering",
    "shortest_path",
    "simple_equations",
    "simple_geometry",
    "simple_integration",
    "sokoban",
    "spell_backward",
    "spiral_matrix",
    "string_insertion",
    "string_manipulation",
    "string_splitting",
    "string_synthesis",
    "sudoku",
    "survo",
    "syllogism",
    "time_intervals",
    "tower_of_hanoi",
    "tsumego",
    "word_ladder",
    "word_sequence_reversal",
    "word_sorting",
    "zebra_puzzles",
]

REASONING_GYM = KindSpec(
    name="reasoning_gym",
    extra="envs",
    title="reasoning-gym task",
    description=(
        "One of reasoning-gym's procedural task generators (arithmetic, puzzles, logic…): tasks come from "
        "the generator's config and seed, the answer goes in <answer>…</answer>, and the generator's own "
        "score_answer grades it. Everything is generated locally."
    ),
    config_schema=_object(
        {
            "dataset": _enum(
                "Task generator",
                "reasoning-gym dataset name, e.g. basic_arithmetic, leg_counting, chain_sum.",
                REASONING_GYM_DATASETS,
                "basic_arithmetic",
            ),
            "dataset_config": {
                "type": "object",
                "title": "Generator config",
                "description": "The generator's "
                'own options (JSON object), e.g. {"min_terms": 2, "max_terms": 2}.',
                "default": {},
            },
            "system_prompt": _text(
                "System prompt",
                "Instructions for the model. Empty: reasoning-gym's own "
                "default, asking for the answer in <answer>…</answer>.",
                max_length=10000,
            ),
            "require_answer_tag": _REQUIRE_ANSWER_TAG,
            "few_shot": _bool(
                "Worked example as chat turns",
                "Before the task, show one solved train task as "
                "real messages (question, then the answer in <answer>…</answer>). SmolLM2-135M put "
                "0 of 32 answers in the tag without it.",
                True,
            ),
            "max_turns": _max_turns(1, 8),
            "reward_correct": _REWARD_CORRECT,
            "pool_size": _int(
                "Task pool size",
                "How many tasks to generate per seed before train and eval "
                "are split by a hash of each question.",
                2000,
                10,
                1_000_000,
            ),
            "eval_fraction": _EVAL_FRACTION,
        }
    ),
    target="trainers.envs.reasoning_gym_env:ReasoningGymEnvironment",
)

TEXTARENA_GAMES = [
    "GuessTheNumber-v0",
    "Mastermind-v0",
    "Minesweeper-v0",
    "Sudoku-v0",
    "TowerOfHanoi-v0",
    "FifteenPuzzle-v0",
    "LightsOut-v0",
    "FrozenLake-v0",
    "Countdown-v0",
    "Cryptarithm-v0",
    "Crosswords-v0",
    "LogicPuzzle-v0",
    "PegJump-v0",
    "RushHour-v0",
    "Slitherlink-v0",
    "Sokoban-v0",
    "Blackjack-v0",
    "Bandit-v0",
    "Secretary-v0",
]

TEXTARENA = KindSpec(
    name="textarena",
    extra="envs",
    title="TextArena single-player game",
    description=(
        "A single-player text game from TextArena (guess the number, Mastermind, Minesweeper, Sudoku, "
        "Tower of Hanoi…), played turn by turn: the model's message is its move, the game's messages come "
        "back, and the game's own reward ends the episode. Only games that run offline are listed."
    ),
    config_schema=_object(
        {
            "game": _enum("Game", "The TextArena game id.", TEXTARENA_GAMES, "GuessTheNumber-v0"),
            "game_args": {
                "type": "object",
                "title": "Game options",
                "description": "Keyword arguments of the "
                'game (JSON object), e.g. {"max_turns": 10} for GuessTheNumber.',
                "default": {},
            },
            "system_prompt": _text("System prompt", "Placed before the game's own rules.", max_length=10000),
            "max_turns": _max_turns(12, 200),
            "eval_fraction": _EVAL_FRACTION,
        }
    ),
    target="trainers.envs.textarena_env:TextArenaEnvironment",
)


AGENT = KindSpec(
    name="agent",
    extra="agents",
    title="Your own agent (OpenAI-compatible)",
    description=(
        "Train an agent you already have, unchanged: for each episode it gets the task and an OpenAI client "
        "whose base URL is the run's gateway; every model call is sampled from the current policy and recorded "
        "as tokens (tool results masked from the loss). Set an entry point (a Python function run(task, client)) "
        "or a command. A crash or time-out marks that episode as an error and the run goes on."
    ),
    config_schema=_object(
        {
            "entry_point": {
                "type": "string",
                "title": "Entry point",
                "description": "module:function, called as run(task, client) with the task as a dict and an "
                'openai.OpenAI client; it may return the reward (a number, or a dict with "reward" and e.g. '
                '"correct"). Leave empty to run a command instead.',
                "pattern": r"^$|^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$",
                "maxLength": 500,
                "default": "",
            },
            "command": {
                "type": "array",
                "title": "Command",
                "description": "Program and arguments run once per episode (no shell); {base_url}, {task_json}, "
                "{session_id} and {gateway_url} are replaced, and OPENAI_BASE_URL / OPENAI_API_KEY are set. It "
                "reports a reward with POST {gateway_url}/v1/sessions/{session_id}/reward.",
                "items": {"type": "string", "minLength": 1, "maxLength": 4000},
                "maxItems": 64,
                "default": [],
            },
            "isolation": {
                "type": "string",
                "title": "Run the entry point in",
                "description": "`thread`: the trainer's process (fast; a hung agent is abandoned after its time-out). "
                "`process`: a child Python per episode, killed when it times out.",
                "enum": ["thread", "process"],
                "default": "thread",
            },
            "tasks": {
                "type": "array",
                "title": "Tasks",
                "description": '[{"prompt": …, "answer"?: …, "id"?: …, any other field}, …], handed to the agent '
                "as they are. Leave empty to read `path` instead. The eval split is chosen by a hash of each prompt.",
                "items": {"type": "object"},
                "maxItems": 10000,
                "default": [],
            },
            "path": {
                "type": "string",
                "title": "Tasks file",
                "description": "A JSONL file of tasks on the workers (used when `tasks` is empty).",
                "maxLength": 1000,
                "default": "",
            },
            "timeout_s": _number(
                "Time-out per episode (s)",
                "An episode still running after this long ends as an error.",
                300.0,
                1.0,
                86400.0,
            ),
            "max_turns": _max_turns(8, 64),
            "max_parallel": _int(
                "Episodes at once", "How many agents run together (0: all episodes of a step).", 0, 0, 4096
            ),
            "gateway_port": _int(
                "Gateway port", "Port of the gateway on 127.0.0.1 (0: any free port).", 0, 0, 65535
            ),
            "batch_window_ms": _number(
                "Batching window (ms)",
                "The least time a model call waits for other "
                "agents' calls to share its batch when not every agent has one waiting (2 % "
                "of the last batch's sampling time when that is longer).",
                20.0,
                0.0,
                2000.0,
            ),
            "model_name": {
                "type": "string",
                "title": "Model name",
                "description": "The name GET /v1/models lists (requests may name any model).",
                "minLength": 1,
                "maxLength": 200,
                "default": "policy",
            },
            "cwd": {
                "type": "string",
                "title": "Working directory",
                "description": "Where the command (or the process-isolated entry point) runs; empty: the trainer's.",
                "maxLength": 1000,
                "default": "",
            },
            "env": {
                "type": "object",
                "title": "Environment variables",
                "description": "Extra environment variables of the command or process.",
                "additionalProperties": {"type": "string", "maxLength": 4000},
                "default": {},
            },
            "eval_fraction": _EVAL_FRACTION,
        }
    ),
    target="trainers.envs.agent:AgentEnv",
)

HARBOR = KindSpec(
    name="harbor",
    title="Harbor task",
    description=(
        "Harbor task folders (task.toml, instruction.md, environment/Dockerfile, tests/test.sh): the agent "
        "works in the task's Docker container through a bash tool, and the task's own tests/test.sh gives "
        "the reward (/logs/verifier/reward.txt or reward.json), as Harbor's verifier reads it."
    ),
    config_schema=_object(
        {
            "path": _text(
                "Task folder",
                "A Harbor task folder (with task.toml) or a folder of them, on the worker.",
                max_length=1000,
                minLength=1,
            ),
            "max_turns": _max_turns(8, 64),
            "max_tool_calls": _max_tool_calls(8),
            "command_timeout_s": _number(
                "Command timeout (s)", "Longest one bash command may run in the container.", 60.0, 1.0, 3600.0
            ),
            "network": _bool("Network", "Give the task's container a network (off: --network none).", False),
            "eval_fraction": _EVAL_FRACTION,
        },
        required=["path"],
    ),
    target="trainers.envs.harbor_task:HarborTaskEnvironment",
)
