"""The rollout source of a run that generates in the learner's own process (`num_rollout_workers` 0; the
Ray one is `trainers.learn.distributed.RayRollouts`, with the same methods)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from trainers.rollout.chat import ChatFormat
from trainers.rollout.episodes import GenerationProgress, IndependentRollouts, Rollout


class SamplingKnobs(Protocol):
    """What the rollouts read of the run's config (`trainers.run_config.RunConfig` has these, and more)."""

    @property
    def max_new_tokens(self) -> int: ...
    @property
    def max_context_tokens(self) -> int: ...
    @property
    def temperature(self) -> float: ...
    @property
    def top_p(self) -> float: ...


class LocalRollouts:
    """Rollouts generated in the learner's process (the transformers backend shares the model).

    `progress`, when set, hears after every generation turn how many groups are done (the run page's
    "generating" progress)."""

    progress: GenerationProgress | None = None

    def __init__(
        self,
        backend: Any,
        chat: ChatFormat,
        make_env: Callable[[], Any],
        config: SamplingKnobs,
        stop: tuple[str, ...],
        push_weights: bool,
        strategy: Any = None,
    ) -> None:
        self.backend = backend
        self.chat = chat
        self.make_env = make_env
        self.config = config
        self.stop = stop
        self.push_weights = push_weights
        # How a group's samples are generated: the run's `rollout_strategy` (built by trainers.parts;
        # None: independent episodes, `IndependentRollouts`).
        self.strategy = strategy if strategy is not None else IndependentRollouts(config, {})

    def generate(
        self,
        tasks: list[Any],
        seeds: list[list[int]],
        *,
        max_turns: int,
        generation_seed: int,
        policy_version: int,
        temperature: float | None = None,
        split: str = "train",
        first_group: int = 0,
    ) -> list[list[Rollout]]:
        cfg = self.config
        return self.strategy.generate(
            self.backend,
            self.chat,
            self.make_env,
            tasks,
            seeds,
            max_turns=max_turns,
            max_new_tokens=cfg.max_new_tokens,
            max_context_tokens=cfg.max_context_tokens,
            temperature=cfg.temperature if temperature is None else temperature,
            top_p=cfg.top_p,
            generation_seed=generation_seed,
            stop=self.stop,
            policy_version=policy_version,
            split=split,
            first_group=first_group,
            progress=self.progress,
        )

    def submit(self, tasks: list[Any], seeds: list[list[int]], **kwargs: Any) -> list[list[Rollout]]:
        """In process there is nothing to overlap with: generate now, `collect` hands it back."""
        return self.generate(tasks, seeds, **kwargs)

    def collect(self, pending: list[list[Rollout]]) -> list[list[Rollout]]:
        return pending

    def update_weights(self, state_dict_fn: Callable[[], dict[str, Any]], version: int) -> None:
        if self.push_weights:
            self.backend.update_weights(state_dict_fn())

    def release_weights(self) -> bool:
        """Give back a sampling copy's weights until the next `update_weights` (the trainer's, after each
        update); True if any memory went. Never the policy itself (`push_weights` False)."""
        return self.push_weights and self.backend.release_weights()

    def close(self) -> None:
        self.backend.close()
