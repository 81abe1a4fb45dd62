"""textarena: TextArena's single-player text games (PyPI `textarena`) as multi-turn environments.

A task is a game and a seed: `reset` starts the game with that seed and the game's opening messages
(its rules and board) are the first user message. Each assistant message is sent to the game as the
player's move, whole (TextArena games read the move out of the text, e.g. `[5]` or `[A1 B2]`); the
game's answer (new board, hint, "invalid move" …) is the next user message. When the game ends, its
own reward for the player is the step's reward (1 for a win in most games; partial credit or −1
for an invalid move in some — see each game), and `state()` returns the board as text for the diff
view. TextArena seeds Python's global `random`; each episode keeps its own random state and the
caller's is restored around every call, so a game never disturbs the trainer's randomness.

Only games that need neither network nor downloaded corpora are offered (Wordle, Hangman and the
other word games need NLTK's word lists; TwentyQuestions and GuessWho call an LLM API).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

from trainers.envs.base import Environment, Split, StepResult, seed_tasks, task_id
from trainers.types import Task

_PLAYER_ACTION = "PLAYER_ACTION"


def _render(messages: list[Any]) -> str:
    """The game's messages since the player's last move, as one text (the player's own echo left out)."""
    parts = []
    for item in messages:
        _, text, kind = item if len(item) == 3 else (None, item[-1], None)
        if getattr(kind, "name", kind) == _PLAYER_ACTION:
            continue
        parts.append(str(text).strip())
    return "\n\n".join(p for p in parts if p)


class TextArenaEnvironment(Environment):
    kind = "textarena"

    def __init__(
        self,
        game: str = "GuessTheNumber-v0",
        game_args: dict[str, Any] | None = None,
        system_prompt: str = "",
        max_turns: int = 12,
        eval_fraction: float = 0.1,
    ) -> None:
        import textarena  # noqa: F401 — fail at build time when the package is missing

        self.game, self.game_args = game, dict(game_args or {})
        self.extra_prompt, self.max_turns, self.eval_fraction = system_prompt, max_turns, eval_fraction
        self.tools = []
        self.stop = ()  # moves are free text: no stop strings (the default ones end at </answer>)
        self.task: Task | None = None
        self.game_env: Any = None
        self.turn = 0
        self.done = False
        self.rewards: dict[int, float] | None = None
        self.game_info: dict[str, Any] = {}
        self._random_state: Any = None
        self._make()  # a bad game id or option fails at build time

    def _make(self) -> Any:
        import textarena

        try:  # "-raw": without the default wrappers, whose observation is the whole history as one string
            return textarena.make(f"{self.game}-raw", **self.game_args)
        except Exception as exc:  # noqa: BLE001 — textarena raises anything for a bad id or option
            raise ValueError(f"TextArena cannot make {self.game!r} with {self.game_args}: {exc}") from exc

    @contextlib.contextmanager
    def _own_random(self) -> Iterator[None]:
        """Run game code on this episode's random state, leaving the caller's untouched."""
        outer = random.getstate()
        if self._random_state is not None:
            random.setstate(self._random_state)
        try:
            yield
        finally:
            self._random_state = random.getstate()
            random.setstate(outer)

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        def make(candidate: int) -> tuple[str, Task]:
            key = f"{self.game}:{candidate}"
            prompt = f"{self.game} (seed {candidate})"
            return key, Task(
                id=task_id(self.kind, key), prompt=prompt, meta={"game": self.game, "seed": candidate}
            )

        return seed_tasks(make, split=split, n=n, seed=seed, eval_fraction=self.eval_fraction)

    def system_prompt(self) -> str:
        rules = "You are playing a text game. Each of your messages is your next move; follow the game's move format."
        return f"{self.extra_prompt.strip()}\n\n{rules}".strip() if self.extra_prompt.strip() else rules

    def reset(self, task: Task, seed: int) -> str:
        self.task, self.turn, self.done, self.rewards, self.game_info = task, 0, False, None, {}
        self._random_state = None
        self.game_env = self._make()
        with self._own_random():
            self.game_env.reset(num_players=1, seed=int(task.meta.get("seed", seed)))
            _, observation = self.game_env.get_observation()
        return _render(observation)

    def step(self, assistant_text: str) -> StepResult:
        if self.task is None or self.done:
            raise RuntimeError("The episode is over (or never started): call reset() first.")
        self.turn += 1
        with self._own_random():
            done, step_info = self.game_env.step(assistant_text)
            observation = None if done else _render(self.game_env.get_observation()[1])
        info: dict[str, Any] = {
            k: v for k, v in (step_info or {}).items() if isinstance(v, (str, int, float, bool))
        }
        if done:
            return self._finish(info)
        if self.turn >= self.max_turns:
            result = self._finish({**info, "truncated": True})
            result.observation = observation
            return result
        return StepResult(observation, 0.0, False, info)

    def _finish(self, info: dict[str, Any]) -> StepResult:
        self.done = True
        with self._own_random():
            rewards, game_info = self.game_env.close()
        self.rewards = dict(rewards or {})
        self.game_info = {
            k: v for k, v in (game_info or {}).get(0, {}).items() if isinstance(v, (str, int, float, bool))
        }
        reward = float(self.rewards.get(0, 0.0))  # an unfinished (truncated) game has no rewards: 0
        outcome = {
            "reward": reward,
            "correct": reward >= 1.0,
            "reason": self.game_info.get("reason"),
            "invalid_move": bool(self.game_info.get("invalid_move")),
        }
        return StepResult(None, reward, True, {**info, **outcome})

    def state(self) -> dict[str, Any]:
        board = None
        if self.game_env is not None and hasattr(self.game_env, "get_board_str"):
            try:
                with self._own_random():
                    board = self.game_env.get_board_str()
            except Exception:  # noqa: BLE001 — a game without a board yet (or a broken renderer) still has a state
                board = None
        return {
            "task_id": self.task.id if self.task else None,
            "game": self.game,
            "turn": self.turn,
            "done": self.done,
            "board": board.splitlines() if isinstance(board, str) else board,
            "rewards": self.rewards,
            "outcome": self.game_info.get("reason"),
        }
