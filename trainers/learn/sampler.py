"""What each step trains on: tasks in order, episode seeds, and the groups generated for them —
synchronously, ahead of the learner (bounded async: at most `max_staleness` batches in flight on Ray
rollout workers), and again for groups without signal (dynamic sampling). Scoring with the rubric (or
the environment's own reward) happens here too, so a kept group is a scored one.

Reproducible: task order, environment seeds and sampling seeds derive from `seed` and the data position,
so a resumed run draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from trainers.learn import algorithms
from trainers.parts import build_part
from trainers.rollout.episodes import Rollout
from trainers.rollout.local import LocalRollouts
from trainers.rubrics.judge_models import prefetch_judges
from trainers.run_config import RunConfig
from trainers.sdk.cancel import Cancelled, check_cancel

EVAL_SEED_OFFSET = 1_000_003


def make_rollouts(
    config: RunConfig,
    learner: Any,
    *,
    chat: Any,
    make_env: Callable[[], Any],
    stop: tuple[str, ...],
    policy_version: int,
    log: Callable[[str], None] = print,
) -> Any:
    """Where episodes are generated: Ray rollout workers, a vLLM engine, the policy itself, or a sampling
    copy of it in `generation_dtype`. `log` tells the run's log what was chosen when it is not what was
    asked for."""
    cfg = config
    if cfg.num_rollout_workers > 0:
        from trainers.learn.distributed import RayRollouts

        return RayRollouts(cfg, learner.policy_state_dict, policy_version, learner_device=learner.device)
    from trainers.rollout.backends import make_backend

    strategy = build_part("rollout_strategy", cfg)  # the run's (trainers.parts)
    if cfg.backend == "vllm":
        backend = make_backend("vllm", model_name=cfg.model, tokenizer=learner.tokenizer, seed=cfg.seed)
        rollouts = LocalRollouts(backend, chat, make_env, cfg, stop, push_weights=True, strategy=strategy)
        if policy_version > 0 or learner.lora:
            rollouts.update_weights(learner.policy_state_dict, policy_version)
        return rollouts
    from trainers.models import inference_dtype, load_model

    sampling = inference_dtype(cfg.generation_dtype, learner.device)
    precision = learner.precision
    asked = cfg.generation_dtype
    if asked == "auto" and not precision.samples_under_autocast:
        # The learner's compute dtype, as "auto" promises, in a copy (`dtype: mixed` on a CPU).
        asked = str(precision.autocast_dtype).removeprefix("torch.")
    elif asked == "auto" or (sampling == precision.weights and precision.autocast_dtype is None):
        # Generation runs on the policy itself: nothing to copy, ever; under the learner's autocast, so
        # sampler and learner score tokens alike. (A copy in the policy's own dtype would only cost memory
        # and a weight push per step: e.g. bfloat16 asked for on a CPU that samples it in fp32.)
        if asked != "auto":
            why = (
                ""
                if str(sampling) == f"torch.{asked}"
                else f" ({asked} is slow on this CPU: no AVX512-BF16/AMX)"
            )
            log(f"sampling with the policy itself in {str(sampling).removeprefix('torch.')}{why}")
        backend = make_backend(
            "transformers", model=learner.model, tokenizer=learner.tokenizer, precision=learner.precision
        )
        return LocalRollouts(backend, chat, make_env, cfg, stop, push_weights=False, strategy=strategy)

    sampler = load_model(cfg.model, learner.device, asked).eval()
    for p in sampler.parameters():
        p.requires_grad_(False)
    backend = make_backend("transformers", model=sampler, tokenizer=learner.tokenizer)
    rollouts = LocalRollouts(backend, chat, make_env, cfg, stop, push_weights=True, strategy=strategy)
    rollouts.update_weights(learner.policy_state_dict, policy_version)
    return rollouts


def score_group(rubric: Any, group: list[Rollout]) -> None:
    """Each rollout's reward and its components: the rubric's, or the environment's own reward."""
    if rubric is not None:
        scores = rubric.score_group([r.trajectory for r in group])
        for r, score in zip(group, scores, strict=True):
            r.reward = float(score.total)
            r.components = [c.to_dict() for c in score.components]
            r.turn_rewards = dict(score.turn_rewards)
        return
    for r in group:
        r.reward = float(r.trajectory.env_reward)
        r.components = [
            {
                "name": "env_reward",
                "kind": "environment",
                "raw": r.reward,
                "weight": 1.0,
                "weighted": r.reward,
                "explanation": "the environment's own reward",
            }
        ]


@dataclass
class SampledStep:
    generated: list[list[Rollout]]  # every group generated this step, scored, in order
    kept: list[
        list[Rollout]
    ]  # the groups it trains on (without the zero-variance ones under dynamic sampling)
    rounds: int


class Sampler:
    """The run's task stream and its generation (see the module docstring)."""

    def __init__(
        self,
        config: RunConfig,
        rollouts: Any,
        *,
        train_tasks: list[Any],
        eval_tasks: list[Any],
        data_position: int,
        rubric: Any,
        phase: Callable[..., None],
        log: Callable[..., None],
        on_scored: Callable[[list[Rollout], bool], None] | None = None,
    ) -> None:
        self.config = config
        self.rollouts = rollouts
        self.train_tasks, self.eval_tasks = train_tasks, eval_tasks
        self.data_position = data_position
        self.rubric = rubric
        self._phase, self._log = phase, log
        # Told of each training group as soon as it is scored, and whether the step trains on it.
        self._on_scored = on_scored or (lambda group, kept: None)
        # Batches generating ahead of the learner (bounded async), oldest first: (data position, futures).
        self.pending: list[tuple[int, Any]] = []

    def score(self, group: list[Rollout]) -> None:
        score_group(self.rubric, group)

    @property
    def resume_position(self) -> int:
        """Where a resumed run continues: a batch already generating for the next step is not trained on
        yet, so resume regenerates it."""
        return self.pending[0][0] if self.pending else self.data_position

    def next_tasks(self, count: int) -> list[Any]:
        tasks = [self.train_tasks[(self.data_position + i) % len(self.train_tasks)] for i in range(count)]
        self.data_position += count
        return tasks

    def seeds(self, count: int, group_size: int) -> list[list[int]]:
        base = self.config.seed * 7_777_777 + self.data_position * 1000
        return [[base + g * 100 + s for s in range(group_size)] for g in range(count)]

    def sample(self, step: int, policy_version: int, timings: dict[str, float]) -> SampledStep:
        """The scored groups step `step + 1` trains on (`timings` gets generate and score seconds). A cancel
        under way puts the data position back, so the run's last checkpoint resumes with these tasks."""
        position = self.resume_position
        try:
            return self._sample(step, policy_version, timings)
        except Cancelled:
            self.pending, self.data_position = [], position  # batches in flight are dropped with the workers
            raise

    def _sample(self, step: int, policy_version: int, timings: dict[str, float]) -> SampledStep:
        cfg = self.config
        max_turns = cfg.max_turns_at(step)
        kept: list[list[Rollout]] = []
        generated: list[list[Rollout]] = []
        rounds = 0
        while True:
            need = cfg.prompts_per_step - len(kept)
            self._phase(
                "generating",
                step + 1,
                total=need,
                message=f"{need} groups of {cfg.group_size}" + (f", round {rounds + 1}" if rounds else ""),
            )
            t0 = time.perf_counter()
            if self.pending and rounds == 0:
                # Generated while earlier steps updated: at most `max_staleness` versions behind.
                waves = self._collect(self.pending.pop(0)[1])
            else:
                seeds = self.seeds(need, cfg.group_size)
                tasks = self.next_tasks(need)
                waves = self._generate(
                    tasks,
                    seeds,
                    max_turns=max_turns,
                    generation_seed=seeds[0][0],
                    policy_version=policy_version,
                    first_group=len(generated),
                )
            if rounds == 0:
                self._submit_ahead(step, policy_version)
            scored = 0
            for groups in waves:  # each wave as soon as it is generated: scored and reported at once
                timings["generate"] += time.perf_counter() - t0
                self._phase("scoring", step + 1, done=scored, total=need)
                t0 = time.perf_counter()
                prefetch_judges(self.rubric, [[r.trajectory for r in g] for g in groups])
                for group in groups:
                    check_cancel()
                    for r in group:
                        r.staleness = policy_version - r.policy_version
                    self.score(group)
                    keep = not (
                        cfg.dynamic_sampling and algorithms.is_zero_variance([r.reward for r in group])
                    )
                    if keep:
                        kept.append(group)
                    generated.append(group)
                    scored += 1
                    self._on_scored(group, keep)
                timings["score"] += time.perf_counter() - t0
                t0 = time.perf_counter()
            rounds += 1
            if (
                not cfg.dynamic_sampling
                or len(kept) >= cfg.prompts_per_step
                or rounds > cfg.dynamic_sampling_max_rounds
            ):
                break
        if cfg.dynamic_sampling and len(kept) < cfg.prompts_per_step:
            self._log(
                f"step {step + 1}: dynamic sampling found {len(kept)} of {cfg.prompts_per_step} groups "
                f"with reward variance after {rounds} rounds",
                "warning",
            )
        # Workers finish in any order: the step trains on (and reports its metrics over) groups in task order.
        generated.sort(key=lambda g: g[0].group if g else 0)
        kept.sort(key=lambda g: g[0].group if g else 0)
        return SampledStep(generated, kept, rounds)

    def _generate(
        self, tasks: list[Any], seeds: list[list[int]], **options: Any
    ) -> Iterator[list[list[Rollout]]]:
        """The groups of `tasks` in waves, each as soon as it is generated: a Ray worker's chunk as that worker
        finishes; in process, all groups at once (they generate together, one batch per turn)."""
        if hasattr(self.rollouts, "collect_ready"):
            return self._collect(self.rollouts.submit(tasks, seeds, **options))
        return iter([self.rollouts.generate(tasks, seeds, **options)])

    def _collect(self, pending: Any) -> Iterator[list[list[Rollout]]]:
        if hasattr(self.rollouts, "collect_ready"):
            return iter(self.rollouts.collect_ready(pending))
        return iter([self.rollouts.collect(pending)])

    def _submit_ahead(self, step: int, policy_version: int) -> None:
        """Keep `max_staleness` batches in flight: Ray runs an actor's calls in order, so a batch submitted
        now is sampled by the current weights and trained on at most that many updates later."""
        cfg = self.config
        ahead = cfg.max_staleness if cfg.num_rollout_workers > 0 else 0
        upcoming = step + 1 + len(self.pending)
        while len(self.pending) < ahead and upcoming < cfg.max_steps:
            position = self.data_position
            seeds = self.seeds(cfg.prompts_per_step, cfg.group_size)
            tasks = self.next_tasks(cfg.prompts_per_step)
            futures = self.rollouts.submit(
                tasks,
                seeds,
                max_turns=cfg.max_turns_at(upcoming),
                generation_seed=seeds[0][0],
                policy_version=policy_version,
            )
            self.pending.append((position, futures))
            upcoming += 1

    def evaluate(self, step: int, policy_version: int) -> list[list[Rollout]]:
        """The fixed held-out tasks (fixed seeds, eval temperature) with the current policy, scored."""
        cfg = self.config
        seeds = [[cfg.seed * 7_777_777 + EVAL_SEED_OFFSET + i] for i in range(len(self.eval_tasks))]
        groups = self.rollouts.generate(
            self.eval_tasks,
            seeds,
            max_turns=cfg.max_turns_at(step),
            generation_seed=cfg.seed + EVAL_SEED_OFFSET,
            policy_version=policy_version,
            temperature=cfg.eval_temperature,
            split="eval",
        )
        prefetch_judges(self.rubric, [[r.trajectory for r in g] for g in groups])
        for group in groups:
            check_cancel()
            self.score(group)
        return groups
