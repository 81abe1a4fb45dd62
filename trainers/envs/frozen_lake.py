"""frozen_lake: walk from S to G on a text grid without stepping into a hole.

    S . . H
    . H . .
    . . . H
    H . . G

Maps are generated per task from the task seed and always have a path (checked by BFS); the grid
travels in `task.meta`, so any recorded task can be replayed. No slipping: moves are deterministic.
Two interfaces: a `move` tool (one move per call, the grid comes back), or moves written as words
in the text (several per message). state() returns the grid with the player's position.
"""

from __future__ import annotations

import random
import re
from collections import deque
from typing import Any

from trainers.envs.base import Environment, Split, StepResult, draw_tasks, task_id
from trainers.rollout.toolcalls import TOOL_ERROR_PREFIX, ParseError, extract_answer
from trainers.rollout.toolformats import ToolFormat
from trainers.types import Task, ToolCall, ToolSpec

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_MOVE_WORDS = re.compile(r"\b(up|down|left|right)\b", re.IGNORECASE)

MOVE_TOOL = ToolSpec(
    name="move",
    description="Moves you one cell on the grid and shows the grid again.",
    parameters={
        "type": "object",
        "properties": {"direction": {"type": "string", "enum": list(MOVES), "description": "where to move"}},
        "required": ["direction"],
        "additionalProperties": False,
    },
)


def shortest_path(grid: list[str], start: tuple[int, int]) -> list[str] | None:
    """Moves of a shortest safe path from start to G, or None when there is none."""
    size = len(grid)
    queue = deque([start])
    came: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    while queue:
        r, c = queue.popleft()
        if grid[r][c] == "G":
            path = []
            node = (r, c)
            while came[node] is not None:
                node, move = came[node]  # type: ignore[misc]
                path.append(move)
            return path[::-1]
        for move, (dr, dc) in MOVES.items():
            nr, nc = r + dr, c + dc
            if 0 <= nr < size and 0 <= nc < size and grid[nr][nc] != "H" and (nr, nc) not in came:
                came[(nr, nc)] = ((r, c), move)
                queue.append((nr, nc))
    return None


def render(grid: list[str], position: tuple[int, int] | None = None) -> str:
    rows = []
    for r, row in enumerate(grid):
        cells = list(row)
        if position is not None and position[0] == r:
            cells[position[1]] = "P"
        rows.append(" ".join(cells))
    return "\n".join(rows)


class FrozenLakeEnv(Environment):
    kind = "frozen_lake"

    def __init__(
        self,
        size: int = 4,
        hole_fraction: float = 0.2,
        interface: str = "tool",
        max_turns: int = 12,
        few_shot: bool = True,
        max_moves_per_turn: int = 8,
        reward_goal: float = 1.0,
        reward_progress: float = 0.0,
        eval_fraction: float = 0.1,
    ) -> None:
        if interface not in ("tool", "text"):
            raise ValueError("interface must be 'tool' or 'text'")
        self.size, self.hole_fraction, self.interface = size, hole_fraction, interface
        self.max_turns, self.max_moves_per_turn, self.few_shot = max_turns, max_moves_per_turn, few_shot
        self.reward_goal, self.reward_progress = reward_goal, reward_progress
        self.eval_fraction = eval_fraction
        self.tools = [MOVE_TOOL] if interface == "tool" else []
        self.task: Task | None = None
        self.grid: list[str] = []
        self.position = (0, 0)
        self.turn = 0
        self.moves: list[str] = []
        self.outcome: str | None = None  # "goal", "hole", "stopped", "truncated"

    def system_prompt(self) -> str:
        rules = (
            "You walk on a frozen lake shown as a grid. S is the start, G the goal, H a hole, . safe ice, "
            "P where you are. Row 1 is the top. Reach G without stepping on H. Moves: up, down, left, right."
        )
        if self.interface == "text":
            return rules + (
                " Write your moves in <answer></answer>, for example <answer>right right down</answer>. "
                "You will see the grid after your moves."
            )
        fmt = self.tool_format
        right, down = ToolCall("move", {"direction": "right"}), ToolCall("move", {"direction": "down"})
        example = (
            ""
            if fmt.native
            else "\n".join(
                [
                    "",
                    "Example:",
                    "User: Reach G from S.\nS .\nH G",
                    f"Assistant: {fmt.call_text(right)}",
                    f"Tool: {fmt.format_result('You moved right.' + chr(10) + 'S P' + chr(10) + 'H G')}",
                    f"Assistant: {fmt.call_text(down)}",
                    f"Tool: {fmt.format_result('You moved down and reached the goal!' + chr(10) + 'S .' + chr(10) + 'H P')}",
                ]
            )
        )
        return (
            rules
            + " Move with the move tool, one move per message; the walk ends at G, in a hole, or when you "
            "reply without a move.\n\n" + fmt.tools_prompt(self.tools) + "\n" + example
        )

    def use_tool_format(self, tool_format: ToolFormat) -> bool:
        self.tool_format = tool_format
        return True

    def example_messages(self) -> list[dict[str, Any]]:
        if not self.few_shot:
            return []
        grid = ["S.", "HG"]
        if self.interface == "text":
            return [
                {
                    "role": "user",
                    "content": f"Reach G from S.\n{render(grid)}\nWrite your moves in <answer></answer>.",
                },
                {"role": "assistant", "content": "<answer>right down</answer>"},
            ]
        fmt = self.tool_format
        right = ToolCall("move", {"direction": "right"}, fmt.call_id(1))
        down = ToolCall("move", {"direction": "down"}, fmt.call_id(2))
        return [
            {"role": "user", "content": f"Reach G from S.\n{render(grid)}\nUse the move tool."},
            fmt.assistant_message(fmt.call_text(right), [right]),
            fmt.tool_message(fmt.format_result(f"You moved right.\n{render(grid, (0, 1))}"), right),
            fmt.assistant_message(fmt.call_text(down), [down]),
            fmt.tool_message(
                fmt.format_result(f"You moved down and reached the goal!\n{render(grid, (1, 1))}"), down
            ),
        ]

    # ---- tasks ----

    def _make_grid(self, rng: random.Random) -> list[str]:
        cells = [(r, c) for r in range(self.size) for c in range(self.size)][1:-1]
        for _ in range(500):
            holes = {cell for cell in cells if rng.random() < self.hole_fraction}
            grid = [
                "".join(
                    "S"
                    if (r, c) == (0, 0)
                    else "G"
                    if (r, c) == (self.size - 1,) * 2
                    else "H"
                    if (r, c) in holes
                    else "."
                    for c in range(self.size)
                )
                for r in range(self.size)
            ]
            if shortest_path(grid, (0, 0)) is not None:
                return grid
        raise ValueError("could not generate a solvable lake; lower hole_fraction")

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        def make(rng: random.Random, index: int) -> tuple[str, Task]:
            grid = self._make_grid(rng)
            key = "/".join(grid)
            path = shortest_path(grid, (0, 0)) or []
            how = (
                "Use the move tool." if self.interface == "tool" else "Write your moves in <answer></answer>."
            )
            prompt = f"Reach G from S.\n{render(grid)}\n{how}"
            meta = {"grid": grid, "shortest_path": path}
            return key, Task(id=task_id(self.kind, key), prompt=prompt, answer=" ".join(path), meta=meta)

        return draw_tasks(make, kind=self.kind, split=split, n=n, seed=seed, eval_fraction=self.eval_fraction)

    # ---- episode ----

    def reset(self, task: Task, seed: int) -> str:
        grid = task.meta.get("grid")
        if not isinstance(grid, list) or len(grid) < 2 or any(len(row) != len(grid) for row in grid):
            raise ValueError(f"task {task.id} has no square grid in meta['grid']")
        self.task, self.grid = task, list(grid)
        self.position, self.turn, self.moves, self.outcome = (0, 0), 0, [], None
        self.initial_distance = len(shortest_path(self.grid, (0, 0)) or [])
        return task.prompt

    def _move(self, direction: str) -> str:
        dr, dc = MOVES[direction]
        r, c = self.position[0] + dr, self.position[1] + dc
        self.moves.append(direction)
        if not (0 <= r < len(self.grid) and 0 <= c < len(self.grid)):
            return f"You cannot move {direction}: that is the edge. You stay."
        self.position = (r, c)
        cell = self.grid[r][c]
        if cell == "H":
            self.outcome = "hole"
            return f"You moved {direction} and fell into a hole. Game over."
        if cell == "G":
            self.outcome = "goal"
            return f"You moved {direction} and reached the goal!"
        return f"You moved {direction}."

    def _final_reward(self) -> float:
        if self.outcome == "goal":
            return self.reward_goal
        if self.reward_progress <= 0 or self.outcome == "hole" or self.initial_distance == 0:
            return 0.0
        remaining = len(shortest_path(self.grid, self.position) or [None] * self.initial_distance)
        return self.reward_progress * max(0.0, 1 - remaining / self.initial_distance)

    def step(self, assistant_text: str) -> StepResult:
        if self.task is None or self.outcome is not None:
            raise RuntimeError("The episode is over (or never started): call reset() first.")
        self.turn += 1
        info: dict[str, Any] = {}
        if self.interface == "tool":
            parsed = self.tool_format.parse(assistant_text, self.tools)
            if isinstance(parsed, ParseError):
                observation = parsed.observation
                info = {"tool_error": True, "tool_name": parsed.tool_name}
            elif parsed:
                call = parsed[0]
                info = {
                    "tool_name": call.name,
                    "tool_args": call.arguments,
                    "tool_error": False,
                    "tool_call_id": call.id or self.tool_format.call_id(self.turn),
                }
                message = self._move(call.arguments["direction"])
                observation = self.tool_format.format_result(f"{message}\n{render(self.grid, self.position)}")
                if len(parsed) > 1:
                    observation += (
                        f"\n(Only the first tool call in a message runs; {len(parsed) - 1} more ignored.)"
                    )
            else:
                self.outcome = "stopped"  # a message without a move ends the walk where it stands
                return StepResult(None, self._final_reward(), True, self._info())
        else:
            source = extract_answer(assistant_text)
            words = _MOVE_WORDS.findall(source if source is not None else assistant_text)
            if not words:
                observation = (
                    f"{TOOL_ERROR_PREFIX} No moves found. Write moves like <answer>right down</answer>."
                )
                info = {"no_moves": True}
            else:
                messages = []
                for word in words[: self.max_moves_per_turn]:
                    messages.append(self._move(word.lower()))
                    if self.outcome:
                        break
                ignored = len(words) - self.max_moves_per_turn
                if ignored > 0 and not self.outcome:
                    messages.append(f"({ignored} moves beyond {self.max_moves_per_turn} ignored.)")
                observation = "\n".join(messages) + f"\n{render(self.grid, self.position)}"
        if self.outcome in ("goal", "hole"):
            return StepResult(observation, self._final_reward(), True, {**info, **self._info()})
        if self.turn >= self.max_turns:
            self.outcome = "truncated"
            return StepResult(
                observation, self._final_reward(), True, {**info, **self._info(), "truncated": True}
            )
        return StepResult(observation, 0.0, False, info)

    def _info(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "correct": self.outcome == "goal", "moves": len(self.moves)}

    def state(self) -> dict[str, Any]:
        return {
            "task_id": self.task.id if self.task else None,
            "grid": render(self.grid, self.position).splitlines() if self.grid else [],
            "position": list(self.position),
            "turn": self.turn,
            "moves": list(self.moves),
            "outcome": self.outcome,
        }
