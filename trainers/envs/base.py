"""The environment protocol, a base class for tool-using environments, and the episode driver.

An environment is built from its kind's config (`KindSpec.build(config)` calls the class with the
config's keys as keyword arguments) and then used like this:

    tasks = env.tasks("train", n=64, seed=0)        # deterministic; "eval" is disjoint from "train"
    first_user_message = env.reset(task, seed)
    system = env.system_prompt()                    # may depend on the task: call after reset()
    result = env.step(assistant_text)               # StepResult(observation, reward, done, info)
    snapshot = env.state()                          # JSON-able, for diffs in the dashboard

`run_episode(env, task, seed, policy)` drives any policy (messages → assistant text) through an
episode and records the Trajectory; the trainer's rollout code uses it or mirrors it.

Tool permissions (which tools, how many calls per episode, argument limits such as expression
length) are enforced inside step(): a refused call becomes an error observation, never an exception.

How tools are shown and calls are written (the studio `<tool_call>` format or the model's native
one) is the business of `env.tool_format` (`trainers.rollout.toolformats`); the rollout driver sets it with
`env.use_tool_format(fmt)` and a ToolEnvironment never looks at the syntax itself.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from trainers.envs.tools import ToolError
from trainers.rollout.toolcalls import TOOL_ERROR_PREFIX, ParseError, ToolExample, extract_answer
from trainers.rollout.toolformats import STUDIO, ToolFormat
from trainers.types import Task, ToolCall, ToolSpec, Trajectory, Turn

Split = Literal["train", "eval"]
Policy = Callable[[list[dict[str, str]]], str]


@dataclass
class StepResult:
    observation: str | None  # the next message for the model (None when the episode is over without one)
    reward: float
    done: bool
    # Keys the episode driver reads: tool_name, tool_args, tool_call_id, tool_error (bool), truncated
    # (bool); environments add their own (correct, answer…).
    info: dict[str, Any] = field(default_factory=dict)


def split_of(key: str, eval_fraction: float) -> Split:
    """Which split a task belongs to, from a hash of its content: stable across seeds and processes."""
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    return "eval" if bucket < eval_fraction else "train"


def task_id(kind: str, key: str) -> str:
    return f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


EXHAUSTED_SPACE_ATTEMPTS = 16


def draw_tasks(
    make: Callable[[random.Random, int], tuple[str, Task]],
    *,
    kind: str,
    split: Split,
    n: int,
    seed: int,
    eval_fraction: float,
    max_attempts_per_task: int = 400,
) -> list[Task]:
    """n tasks of one split from a generator `make(rng, index) -> (content key, task)`.

    Candidates whose key hashes into the other split are skipped, so train and eval never share a
    task. Within the list, repeats are avoided while the task space allows; a small space (one-digit
    sums) repeats rather than failing.
    """
    check_split(split)
    rng = random.Random(f"{kind}:{split}:{seed}")
    tasks: list[Task] = []
    seen: set[str] = set()
    # Once a task found no fresh candidate the space is used up: later ones stop looking after a few
    # candidates. Searching all 400 for each of a 100k-step run's tasks kept its setup busy for minutes,
    # deaf to Cancel (found by bench/soak.py: a run of max_steps 100000 never reached step 1).
    budget = max_attempts_per_task
    for index in range(n):
        chosen: tuple[str, Task] | None = None
        repeat: tuple[str, Task] | None = None
        for attempt in range(max_attempts_per_task):
            if attempt >= budget and repeat is not None:
                break
            key, task = make(rng, index)
            if split_of(key, eval_fraction) != split:
                continue
            if key not in seen:
                chosen = (key, task)
                break
            repeat = repeat or (key, task)
        if chosen is None:
            budget = EXHAUSTED_SPACE_ATTEMPTS
        chosen = chosen or repeat
        if chosen is None:
            raise ValueError(
                f"Could not generate a {split} task for {kind}: the task space is too small for this config."
            )
        seen.add(chosen[0])
        tasks.append(chosen[1])
    return tasks


def check_split(split: str) -> None:
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', not {split!r}")


def pool_tasks(pool: Sequence[Task], *, kind: str, split: Split, n: int, seed: int) -> list[Task]:
    """`n` tasks from a fixed pool of one split, in an order shuffled by `seed`: an eval list is at most
    the pool (a fixed set); a train list longer than the pool cycles through it again, reshuffled each
    pass. The pool is the caller's: a dataset's rows of that split, a generator's tasks hashed into it."""
    rng = random.Random(f"{kind}:{split}:{seed}")
    if split == "eval":
        order = list(pool)
        rng.shuffle(order)
        return order[:n]
    chosen: list[Task] = []
    while len(chosen) < n:
        order = list(pool)
        rng.shuffle(order)
        chosen.extend(order[: n - len(chosen)])
    return chosen


def seed_tasks(
    make: Callable[[int], tuple[str, Task]], *, split: Split, n: int, seed: int, eval_fraction: float
) -> list[Task]:
    """`n` tasks that are episode seeds of a remote or generated world (`make(seed) -> (content key,
    task)`), each seed in the split its key hashes into. Eval seeds start at 0 whatever the run's seed
    (a fixed eval set across runs); train seeds start where the run's seed says, so runs with different
    seeds see different episodes."""
    check_split(split)
    chosen: list[Task] = []
    candidate = 0 if split == "eval" else seed * 1_000_003 % 2**31
    while len(chosen) < n:
        key, task = make(candidate)
        if split_of(key, eval_fraction) == split:
            chosen.append(task)
        candidate = (candidate + 1) % 2**31
    return chosen


class Toolbox(Protocol):
    """Tools an environment offers beside its own, served elsewhere (an MCP server's:
    `trainers.envs.mcp.mcp_toolbox`): the environment shows their specs, routes their calls, and resets
    and releases the box with the episode."""

    tools: list[ToolSpec]

    def offers(self, name: str) -> bool: ...

    def call(self, call: ToolCall) -> str: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...


class Environment:
    """Base class of environments. Subclasses set `kind`, `tools`, `max_turns` and implement the methods."""

    kind: ClassVar[str] = ""
    tools: list[ToolSpec]
    max_turns: int
    tool_format: ToolFormat = STUDIO  # how tools are shown and calls parsed (trainers.rollout.toolformats)

    def use_tool_format(self, tool_format: ToolFormat) -> bool:
        """Adopt the run's tool-call format; False when this environment reads calls its own way
        (the driver then renders it with the studio format)."""
        return False

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> dict[str, list[str]]:
        """Errors the kind's JSON schema cannot express (min > max), by field name; the registry runs it
        after the schema so the form, the API and the CLI refuse what the constructor would."""
        return {}

    def system_prompt(self) -> str:
        raise NotImplementedError

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        raise NotImplementedError

    def reset(self, task: Task, seed: int) -> str:
        raise NotImplementedError

    def step(self, assistant_text: str) -> StepResult:
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        return {}

    def example_messages(self) -> list[dict[str, str]]:
        """A solved episode as chat messages, placed between the system prompt and the task.

        Not part of the trajectory's turns (rubrics must not count the example's tool call); recorded
        in `trajectory.info["prompt_examples"]`. Empty unless the environment's `few_shot` is on.
        """
        return []


class ToolEnvironment(Environment):
    """An environment where each assistant message either calls one tool or gives the final answer.

    - a message with a well-formed, permitted tool call: the tool runs, its result is the observation;
    - a malformed or refused call: an error observation (the episode goes on);
    - a message without a tool call: the final answer; `grade()` scores it and the episode ends;
    - after `max_turns` assistant messages the episode is truncated.
    Only the first tool call of a message runs (the model is told if it wrote more).
    """

    example: ToolExample | None = None  # the worked example (system prompt and few-shot turns)

    def __init__(
        self,
        *,
        max_turns: int,
        max_tool_calls: int,
        reward_valid_tool_call: float = 0.0,
        few_shot: bool = True,
        toolbox: Toolbox | None = None,
    ) -> None:
        self.max_turns, self.max_tool_calls = max_turns, max_tool_calls
        self.few_shot = few_shot
        self.reward_valid_tool_call = reward_valid_tool_call
        self.tools = []
        self.task: Task | None = None
        self.toolbox = toolbox
        self._reset_counters()

    @property
    def tools(self) -> list[ToolSpec]:
        """The environment's own tools, then those its toolbox (its MCP servers) offers."""
        return [*self._own_tools, *(self.toolbox.tools if self.toolbox is not None else [])]

    @tools.setter
    def tools(self, value: list[ToolSpec]) -> None:
        self._own_tools = list(value)

    def close(self) -> None:
        """Release what the environment holds (its toolbox's sessions); the driver calls it after the episode."""
        if self.toolbox is not None:
            self.toolbox.close()
            self.toolbox = None

    def _reset_counters(self) -> None:
        self.turn = 0
        self.tool_calls_made = 0
        self.failed_calls = 0
        self.rewarded_tool_call = False
        self.done = False
        self.last_answer: str | None = None

    def reset(self, task: Task, seed: int) -> str:
        self.task = task
        self._reset_counters()
        if self.toolbox is not None:
            clash = {t.name for t in self._own_tools} & {t.name for t in self.toolbox.tools}
            if clash:
                raise ValueError(f"MCP tools {sorted(clash)} clash with the environment's own tools")
            self.toolbox.reset()
        return task.prompt

    def use_tool_format(self, tool_format: ToolFormat) -> bool:
        self.tool_format = tool_format
        return True

    def tools_prompt(self) -> str:
        """The tools section of the system prompt, in the run's tool format (may be empty when the
        chat template shows the tools itself)."""
        return self.tool_format.tools_prompt(self.tools, self.example)

    def example_messages(self) -> list[dict[str, Any]]:
        if not self.few_shot or self.example is None or not self.tools:
            return []
        return self.tool_format.example_messages(self.example)

    # subclasses implement these two
    def run_tool(self, call: ToolCall) -> str:
        raise NotImplementedError

    def grade(self, text: str) -> tuple[float, dict[str, Any]]:
        raise NotImplementedError

    def step(self, assistant_text: str) -> StepResult:
        if self.task is None or self.done:
            raise RuntimeError("The episode is over (or never started): call reset() first.")
        self.turn += 1
        parsed = self.tool_format.parse(assistant_text, self.tools)
        reward = 0.0
        info: dict[str, Any] = {}
        observation: str | None
        if isinstance(parsed, ParseError):
            self.failed_calls += 1
            observation = parsed.observation
            info = {"tool_error": True, "tool_name": parsed.tool_name}
        elif parsed:
            call = parsed[0]
            call_id = call.id or self.tool_format.call_id(self.turn)
            info = {
                "tool_name": call.name,
                "tool_args": call.arguments,
                "tool_call_id": call_id,
                "tool_error": False,
            }
            if self.tool_calls_made >= self.max_tool_calls:
                observation = (
                    f"{TOOL_ERROR_PREFIX} You have used all {self.max_tool_calls} tool calls. "
                    "Give your final answer as <answer>…</answer>."
                )
                info["tool_error"] = True
                self.failed_calls += 1
            else:
                self.tool_calls_made += 1
                try:
                    run = (
                        self.toolbox.call
                        if self.toolbox is not None and self.toolbox.offers(call.name)
                        else self.run_tool
                    )
                    observation = self.tool_format.format_result(run(call))
                    if not self.rewarded_tool_call:
                        reward += self.reward_valid_tool_call
                        self.rewarded_tool_call = True
                except ToolError as exc:
                    observation = f"{TOOL_ERROR_PREFIX} {exc}"
                    info["tool_error"] = True
                    self.failed_calls += 1
            if len(parsed) > 1:
                observation += (
                    f"\n(Only the first tool call in a message runs; {len(parsed) - 1} more ignored.)"
                )
        else:
            # Graded without its reasoning (a <think> block, harmony's analysis): the turn keeps it.
            grade_reward, grade_info = self.grade(self.tool_format.answer_text(assistant_text))
            self.done = True
            return StepResult(None, reward + grade_reward, True, grade_info)
        if self.turn >= self.max_turns:
            self.done = True
            info["truncated"] = True
        return StepResult(observation, reward, self.done, info)

    def state(self) -> dict[str, Any]:
        return {
            "task_id": self.task.id if self.task else None,
            "turn": self.turn,
            "tool_calls": self.tool_calls_made,
            "failed_tool_calls": self.failed_calls,
            "done": self.done,
            "answer": self.last_answer,
        }


def answer_text(text: str, require_tag: bool) -> str | None:
    """The final answer of a message: the <answer> tag's content, else (if allowed) the whole text."""
    tagged = extract_answer(text)
    if tagged is not None:
        return tagged
    return None if require_tag else text


def run_episode(
    env: Environment,
    task: Task,
    seed: int,
    policy: Policy,
    *,
    tool_message_role: str = "tool",
) -> Trajectory:
    """Drive `policy` (chat messages → assistant text) through one episode and record every turn.

    Tool results are recorded as role "tool" turns carrying tool_name / tool_result; they are sent to
    the policy with `tool_message_role` (use "user" for chat templates without a tool role). Other
    observations are user turns. The environment's example messages (few-shot) go between the system
    prompt and the task: the policy sees them, the trajectory's turns do not include them. `trajectory.info` holds per-step environment rewards, tool-call
    counts, the final env.state() and the last step's info.
    """
    first = env.reset(task, seed)
    system = env.system_prompt()
    examples = env.example_messages()
    turns = [Turn("system", system), Turn("user", first)]
    messages = [
        {"role": "system", "content": system},
        *(
            {"role": tool_message_role if m["role"] == "tool" else m["role"], "content": m["content"]}
            for m in examples
        ),
        {"role": "user", "content": first},
    ]
    step_rewards: list[float] = []
    info: dict[str, Any] = {}
    while True:
        text = policy(messages)
        if not isinstance(text, str):
            raise TypeError(f"The policy must return a string, not {type(text).__name__}.")
        result = env.step(text)
        info = result.info
        turns.append(
            Turn("assistant", text, tool_name=info.get("tool_name"), tool_args=info.get("tool_args"))
        )
        messages.append({"role": "assistant", "content": text})
        step_rewards.append(float(result.reward))
        if result.observation is not None:
            is_tool = "tool_name" in info or info.get("tool_error")
            if is_tool:
                turns.append(
                    Turn(
                        "tool",
                        result.observation,
                        tool_name=info.get("tool_name"),
                        tool_result=result.observation,
                    )
                )
            else:
                turns.append(Turn("user", result.observation))
            messages.append({"role": tool_message_role if is_tool else "user", "content": result.observation})
        if result.done:
            break
    trajectory = Trajectory(task=task, turns=turns, status="truncated" if info.get("truncated") else "ok")
    trajectory.env_reward = sum(step_rewards)
    trajectory.info = {
        "seed": seed,
        "step_rewards": step_rewards,
        "tool_calls": trajectory.tool_calls,
        "final_state": env.state(),
        "last_step": _jsonable(info),
        "prompt_examples": examples,
    }
    return trajectory


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
