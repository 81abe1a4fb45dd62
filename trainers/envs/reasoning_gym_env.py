"""reasoning_gym: reasoning-gym's procedural task generators (PyPI `reasoning-gym`) as an environment.

A generator (`dataset`, e.g. `basic_arithmetic`) with its own options (`dataset_config`) makes a pool
of `pool_size` tasks from a seed fixed by the config; each task goes to train or eval by a hash of its
question (so the two never share a task and the eval set does not depend on the run's seed), and a
run's seed only shuffles the order. The model answers in `<answer>…</answer>`; the generator's own
`score_answer(answer, entry)` grades it (partial credit where the generator gives it), times
`reward_correct`. With `few_shot`, one solved train task is shown first as chat turns (question,
`<answer>…</answer>`): small models copy a format from real turns, not from a description. The whole entry (question, answer, metadata) travels in `task.meta["entry"]`, so a
recorded task can be graded again. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from trainers.envs.base import (
    Split,
    ToolEnvironment,
    ToolError,
    answer_text,
    check_split,
    pool_tasks,
    split_of,
    task_id,
)
from trainers.rollout.toolcalls import extract_answer
from trainers.types import Task, ToolCall


class ReasoningGymEnvironment(ToolEnvironment):
    kind = "reasoning_gym"

    def __init__(
        self,
        dataset: str = "basic_arithmetic",
        dataset_config: dict[str, Any] | None = None,
        system_prompt: str = "",
        require_answer_tag: bool = False,
        few_shot: bool = True,
        max_turns: int = 1,
        reward_correct: float = 1.0,
        pool_size: int = 2000,
        eval_fraction: float = 0.1,
    ) -> None:
        super().__init__(max_turns=max_turns, max_tool_calls=0, few_shot=few_shot)
        import reasoning_gym
        from reasoning_gym.utils import SYSTEM_PROMPTS

        self.dataset_name, self.dataset_config = dataset, dict(dataset_config or {})
        self.require_answer_tag, self.reward_correct = require_answer_tag, reward_correct
        self.pool_size, self.eval_fraction = pool_size, eval_fraction
        self.prompt = system_prompt.strip() or SYSTEM_PROMPTS["default"]
        # The pool's seed comes from the config, not the run: every run of this config sees the same tasks.
        config_key = json.dumps([dataset, self.dataset_config], sort_keys=True)
        self.pool_seed = int.from_bytes(hashlib.sha256(config_key.encode()).digest()[:4], "big")
        try:
            # size 1 first: a bad name or option fails here, at build time, with the package's message
            self.generator = reasoning_gym.create_dataset(
                dataset, seed=self.pool_seed, size=1, **self.dataset_config
            )
        except (KeyError, ValueError, TypeError, AssertionError) as exc:
            raise ValueError(
                f"reasoning-gym cannot make {dataset!r} with {self.dataset_config}: {exc}"
            ) from exc
        self._pool: list[Task] | None = None

    def _all_tasks(self) -> list[Task]:
        if self._pool is None:
            import reasoning_gym

            generated = reasoning_gym.create_dataset(
                self.dataset_name, seed=self.pool_seed, size=self.pool_size, **self.dataset_config
            )
            pool, seen = [], set()
            for entry in generated:
                question = entry["question"]
                if question in seen:
                    continue
                seen.add(question)
                key = f"{self.dataset_name}:{question}"
                pool.append(
                    Task(
                        id=task_id(self.kind, key),
                        prompt=question,
                        answer=entry["answer"],
                        meta={"dataset": self.dataset_name, "entry": _plain(entry)},
                    )
                )
            self._pool = pool
        return self._pool

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        check_split(split)
        pool = [
            t
            for t in self._all_tasks()
            if split_of(f"{self.dataset_name}:{t.prompt}", self.eval_fraction) == split
        ]
        if not pool:
            raise ValueError(
                f"reasoning-gym {self.dataset_name}: the {split} split is empty; raise pool_size."
            )
        return pool_tasks(pool, kind=self.kind, split=split, n=n, seed=seed)

    def system_prompt(self) -> str:
        return self.prompt

    def example_messages(self) -> list[dict[str, str]]:
        """One solved train task as chat turns (the same for every episode of this config)."""
        if not self.few_shot:
            return []
        train = [
            t
            for t in self._all_tasks()
            if split_of(f"{self.dataset_name}:{t.prompt}", self.eval_fraction) == "train"
        ]
        if not train:
            return []
        example = min(train, key=lambda t: t.id)
        return [
            {"role": "user", "content": example.prompt},
            {"role": "assistant", "content": f"<answer>{example.answer}</answer>"},
        ]

    def run_tool(self, call: ToolCall) -> str:
        raise ToolError("This environment has no tools.")

    def grade(self, text: str) -> tuple[float, dict[str, Any]]:
        assert self.task is not None
        entry = self.task.meta.get("entry") or {
            "question": self.task.prompt,
            "answer": self.task.answer,
            "metadata": {},
        }
        candidate = answer_text(text, self.require_answer_tag)
        self.last_answer = candidate
        score = float(self.generator.score_answer(candidate, entry)) if candidate is not None else 0.0
        return self.reward_correct * score, {
            "correct": score >= 1.0,
            "score": score,
            "answer": candidate,
            "answer_tag": extract_answer(text) is not None,
        }

    def state(self) -> dict[str, Any]:
        return {**super().state(), "dataset": self.dataset_name}


def _plain(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry as JSON values (tuples become lists), as it will look after a round trip."""
    return json.loads(json.dumps(entry, default=str))
