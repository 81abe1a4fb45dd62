"""Plain data types shared by environments, rubrics, the trainer and the dashboard.

Nothing here imports torch or Django: the web process reads these to render forms and to score
rubric previews, and the trainer uses the same definitions, so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from trainers.sdk.reasoning import visible_answer

Role = Literal["system", "user", "assistant", "tool"]
TrajectoryStatus = Literal["ok", "truncated", "error"]


@dataclass
class ToolSpec:
    """A tool an environment offers: shown to the model in the system prompt."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str | None = None  # the call's id where the format carries one (native tool messages refer to it)


@dataclass
class Turn:
    """One message of a trajectory.

    `tool_*` fields are set on assistant turns that call a tool (name, arguments) and on the tool
    turns that answer them (result). `reward` is a per-turn reward where a criterion gives one.
    `token_ids` / `loss_mask` are filled by the trainer: tool-output tokens have mask 0.
    """

    role: Role
    text: str
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    tool_result: str | None = None
    reward: float | None = None
    token_ids: list[int] | None = None
    loss_mask: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Task:
    """One problem instance. `answer` is what rubrics compare against; `meta` is free-form."""

    id: str
    prompt: str
    answer: Any = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trajectory:
    task: Task
    turns: list[Turn] = field(default_factory=list)
    status: TrajectoryStatus = "ok"
    env_reward: float = 0.0  # sum of rewards the environment itself returned from step()
    info: dict[str, Any] = field(default_factory=dict)  # e.g. tool call counts, final env state

    @property
    def final_answer(self) -> str:
        """The text of the last assistant turn (empty if the model never spoke), without its reasoning
        (a `<think>` block, harmony's analysis channel): the turn itself keeps it."""
        for turn in reversed(self.turns):
            if turn.role == "assistant":
                return visible_answer(turn.text)
        return ""

    @property
    def tool_calls(self) -> int:
        return sum(1 for t in self.turns if t.role == "assistant" and t.tool_name)

    @property
    def model_turns(self) -> int:
        return model_turns(self.turns)


def model_turns(turns: Iterable[Any]) -> int:
    """How many turns an episode took, the one definition every page, metric and knob uses: the model's
    responses (assistant messages). System prompts, user messages and tool results are messages of the
    trajectory, not turns, so `max_turns` bounds exactly the number the run's `turns` metric, the explorer
    and the trajectory page show. `turns` are Turn objects or wire dicts ({"role": …})."""
    return sum(
        1
        for turn in turns
        if (turn.get("role") if isinstance(turn, Mapping) else getattr(turn, "role", None)) == "assistant"
    )


def applied_max_turns(run_turns: int, env_turns: int) -> int:
    """The model turns an episode may take, the one rule for the two `max_turns`: the smaller of the run's
    knob and the environment's own (0 on either side: no limit from that side); 1 when neither sets one."""
    limits = [t for t in (run_turns, env_turns) if t and t > 0]
    return min(limits) if limits else 1
