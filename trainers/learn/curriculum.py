"""A curriculum from failures (WebRL, THUDM): a task source any run can use (`curriculum: from_failures`).

Each step draws its tasks from three places: the frontier (tasks generated from earlier failures, and
generated ones the policy solves sometimes), the replay buffer of past successes, and the run's own task
stream for the rest. After the step, each group's success rate — the environment's own grade, or the
reward against a threshold, so a learned reward model or an LLM judge in the rubric is the outcome reward
model (ORM) — decides what happens to its task:

- a task no sample solved seeds `curriculum_variants` new ones (while the frontier holds under four steps'
  worth) from the environment's own generator: fresh
  tasks drawn from it, the nearest in difficulty to the failed one (the numbers in its `meta`: arithmetic's
  difficulty, reasoning-gym's num_terms / num_digits, countdown's numbers) — each keeps its lineage (the
  failed task, the generator, the step it was born);
- a generated task is kept on the frontier only while its success rate falls in the band
  [`curriculum_band_low`, `curriculum_band_high`] (WebRL keeps neither the never- nor the always-solved);
  outside it, it is retired;
- every task solved at least once enters the replay buffer, weighted by how unsure the policy still is
  (1 − its success rate, WebRL's actor-confidence filter): mastered tasks are replayed least and evicted
  first when the buffer is full.

`TaskPool.report()` is the pool as the dashboard shows it (a `task_pool` event per step). Plain Python.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_REPORTED = 300  # pool entries per event: the newest ones


def _knob(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "x-group": "curriculum"}


CURRICULUM_KNOBS: dict[str, Any] = {
    "curriculum": _knob(
        {
            "type": "string",
            "title": "Task source",
            "description": "tasks: the environment's task stream in order; from_failures: WebRL's curriculum — "
            "failed tasks seed new ones from the environment's generator, kept while the policy's success "
            "rate on them is in the band, with a replay buffer of past successes mixed in.",
            "default": "tasks",
            "minLength": 1,
            "x-part": "task_source",
        }
    ),
    "curriculum_variants": _knob(
        {
            "type": "integer",
            "title": "Variants per failure",
            "description": "New tasks a task no sample solved seeds.",
            "default": 2,
            "minimum": 1,
            "maximum": 32,
        }
    ),
    "curriculum_band_low": _knob(
        {
            "type": "number",
            "title": "Band low",
            "description": "A generated task stays on the frontier while its success rate is at least this…",
            "default": 0.1,
            "minimum": 0,
            "maximum": 1,
        }
    ),
    "curriculum_band_high": _knob(
        {
            "type": "number",
            "title": "Band high",
            "description": "…and at most this (above: mastered, it goes to the replay buffer only).",
            "default": 0.9,
            "minimum": 0,
            "maximum": 1,
        }
    ),
    "curriculum_replay_share": _knob(
        {
            "type": "number",
            "title": "Replay share",
            "description": "Share of each step's prompts drawn from the replay buffer of past successes.",
            "default": 0.25,
            "minimum": 0,
            "maximum": 1,
        }
    ),
    "curriculum_replay_size": _knob(
        {
            "type": "integer",
            "title": "Replay buffer size",
            "description": "Successful tasks the buffer keeps; the most confidently solved go first.",
            "default": 64,
            "minimum": 1,
            "maximum": 100_000,
        }
    ),
    "curriculum_success": _knob(
        {
            "type": "string",
            "title": "Success means",
            "description": "correct: the environment's grade; reward: the rubric's total reward at or above the "
            "threshold — a learned reward or LLM judge in the rubric is then the outcome reward model.",
            "enum": ["correct", "reward"],
            "default": "correct",
        }
    ),
    "curriculum_success_threshold": _knob(
        {
            "type": "number",
            "title": "Success threshold",
            "description": "With success = reward: the reward a sample needs to count as a success.",
            "default": 0.5,
            "minimum": -1000,
            "maximum": 1000,
        }
    ),
    "curriculum_generator": _knob(
        {
            "type": "string",
            "title": "Variant generator",
            "description": "What makes the new tasks of a failure. environment: the environment's own generator "
            "(fresh tasks nearest in difficulty); llm: the generator model below rewrites the failed task "
            "into easier or related ones, each with its answer, kept only if the environment's verifier "
            "grades that answer (for environments with no generator of their own: a JSONL file's tasks); "
            "auto: llm when a generator model is named, else environment.",
            "enum": ["auto", "environment", "llm"],
            "default": "auto",
        }
    ),
    "curriculum_generator_model": _knob(
        {
            "type": "string",
            "title": "Generator model",
            "description": 'With the llm generator: "policy" (a frozen copy of the run\'s starting weights), a '
            "model the workers serve (the bundled smollm2-135m…), or the model name at the endpoint below. "
            "Empty: none (auto then means environment).",
            "default": "",
            "maxLength": 200,
        }
    ),
    "curriculum_generator_base_url": _knob(
        {
            "type": "string",
            "title": "Generator endpoint",
            "description": "With the llm generator: an OpenAI-compatible endpoint (…/v1) serving the generator "
            "model; empty runs it on the worker.",
            "default": "",
            "maxLength": 500,
        }
    ),
    "curriculum_generator_api_key_secret": _knob(
        {
            "type": "string",
            "title": "Generator endpoint key",
            "description": "With the llm generator: the project secret holding the endpoint's API key (empty: none).",
            "default": "",
            "maxLength": 100,
        }
    ),
    "curriculum_generator_max_new_tokens": _knob(
        {
            "type": "integer",
            "title": "Generator answer tokens",
            "description": "With the llm generator: the longest answer it may write per failed task.",
            "default": 256,
            "minimum": 16,
            "maximum": 8192,
        }
    ),
}


def generator_of(config: Any) -> str:
    """Which generator makes a run's variants, "environment" or "llm" (`curriculum_generator`; auto is llm
    when a generator model is named). `config`: a RunConfig or a config mapping."""
    get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
    chosen = get("curriculum_generator", "auto") or "auto"
    if chosen == "auto":
        return "llm" if str(get("curriculum_generator_model", "") or "").strip() else "environment"
    return str(chosen)


def curriculum_errors(config: dict[str, Any]) -> list[tuple[str, str]]:
    """The rules across the curriculum's knobs, as (knob, message) (trainers.config.validate_run_config)."""
    errors = []
    low, high = config.get("curriculum_band_low"), config.get("curriculum_band_high")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
        errors.append(("curriculum_band_low", "The band's low end must not be above its high end."))
    if config.get("curriculum") != "from_failures":
        return errors
    if (config.get("num_rollout_workers") or 0) > 0:
        errors.append(("curriculum", "The curriculum draws tasks step by step: use 0 rollout workers."))
    model = str(config.get("curriculum_generator_model") or "").strip()
    if config.get("curriculum_generator") == "llm" and not model:
        errors.append(
            (
                "curriculum_generator_model",
                'The llm generator needs a model: "policy", one the workers serve, or one at an endpoint.',
            )
        )
    if config.get("curriculum_generator_base_url") and model in ("", "policy"):
        errors.append(("curriculum_generator_model", "Name the model the generator endpoint serves."))
    return errors


def difficulty_of(task: Any) -> tuple[float, ...]:
    """The numbers that say how hard a task is, as far as its `meta` tells: arithmetic's `difficulty`,
    reasoning-gym's per-entry levels (the keys its `difficulty` names: num_terms, num_digits…),
    countdown's count of numbers and target; () when it says nothing."""
    meta = getattr(task, "meta", None) or {}
    if isinstance(meta.get("difficulty"), (int, float)):
        return (float(meta["difficulty"]),)
    entry = (meta.get("entry") or {}).get("metadata") or {}
    levels = entry.get("difficulty")
    if isinstance(levels, dict):
        return tuple(float(entry[k]) for k in sorted(levels) if isinstance(entry.get(k), (int, float)))
    if "numbers" in meta and "target" in meta:
        return (float(len(meta["numbers"])), float(meta["target"]))
    return ()


def environment_variants(make_env: Callable[[], Any], draw: int = 64) -> Callable[..., list[Any]]:
    """The environment's own generator as a variant maker: (failed task, n, seed, exclude ids) → the n fresh
    training tasks nearest in difficulty to the failed one, from `draw` tasks the environment makes with a
    new seed."""

    def variants(task: Any, n: int, seed: int, exclude: set[str]) -> list[Any]:
        env = make_env()
        try:
            fresh = [t for t in env.tasks("train", draw, seed) if t.id not in exclude and t.id != task.id]
        finally:
            if hasattr(env, "close"):
                env.close()
        target = difficulty_of(task)

        def distance(candidate: Any) -> float:
            other = difficulty_of(candidate)
            if not target or len(other) != len(target):
                return 0.0
            return sum(abs(a - b) for a, b in zip(target, other, strict=True))

        rng = random.Random(seed)
        rng.shuffle(fresh)
        return sorted(fresh, key=distance)[:n]

    return variants


@dataclass
class PoolEntry:
    task: Any
    parent: str = ""  # the failed task it was generated from ("" for the run's own tasks)
    generator: str = ""  # what generated it: "environment", "llm:<model>" ("" for the run's own tasks)
    born: int = 0  # the step after which it was generated
    state: str = "new"  # new | frontier | retired | failed | mastered | seen
    attempts: int = 0
    rate: float | None = None  # the newest group's success rate

    def report(self) -> dict[str, Any]:
        prompt = (self.task.prompt or "").strip().splitlines()
        return {
            "id": self.task.id,
            "prompt": (prompt[0] if prompt else "")[:160],
            "parent": self.parent,
            "generator": self.generator,
            "born": self.born,
            "state": self.state,
            "attempts": self.attempts,
            "rate": self.rate,
            "difficulty": ", ".join(f"{x:g}" for x in difficulty_of(self.task)),
        }


@dataclass
class TaskPool:
    """The curriculum's state (see the module docstring). `base` gives the run's own next tasks."""

    # a trainers.run_config.RunConfig (not imported: trainers.config imports this module's knobs)
    config: Any
    base: Callable[[int], list[Any]]
    variants: Callable[..., list[Any]]
    entries: dict[str, PoolEntry] = field(default_factory=dict)
    frontier: list[str] = field(default_factory=list)  # task ids, oldest first
    replay: dict[str, float] = field(default_factory=dict)  # task id → its success rate
    drawn: dict[str, int] = field(default_factory=dict)  # the last step's tasks by origin
    generated: int = 0  # variants the last step's failures seeded
    refused: dict[str, int] = field(default_factory=dict)  # the last step's refused variants by reason
    replay_owed: float = 0.0

    def next_tasks(self, count: int) -> list[Any]:
        cfg = self.config
        rng = random.Random(cfg.seed * 1_000_003 + sum(e.attempts for e in self.entries.values()))
        # The share is kept over steps, not rounded away each one: a quarter of 2 prompts is one every other step.
        self.replay_owed = self.replay_owed + count * cfg.curriculum_replay_share if self.replay else 0.0
        replay_n = min(len(self.replay), int(self.replay_owed + 1e-9))
        self.replay_owed -= replay_n
        frontier = self.frontier[: count - replay_n]
        self.frontier = self.frontier[len(frontier) :]
        candidates = [k for k in self.replay if k not in frontier]
        weights = [1.0 - self.replay[k] + 0.05 for k in candidates]
        replayed: list[str] = []
        while candidates and len(replayed) < replay_n:
            pick = rng.choices(range(len(candidates)), weights)[0]
            replayed.append(candidates.pop(pick))
            weights.pop(pick)
        own = self.base(count - len(frontier) - len(replayed))
        for task in own:
            self.entries.setdefault(task.id, PoolEntry(task))
        self.drawn = {"tasks": len(own), "frontier": len(frontier), "replay": len(replayed)}
        return [self.entries[k].task for k in frontier] + [self.entries[k].task for k in replayed] + own

    def success_rate(self, group: Sequence[Any]) -> float:
        """The share of a group's samples that succeeded (`curriculum_success`)."""
        cfg = self.config
        if cfg.curriculum_success == "reward":
            wins = [r.reward >= cfg.curriculum_success_threshold for r in group]
        else:
            graded = [r.trajectory.info.get("correct") for r in group]
            wins = [
                bool(c) if c is not None else r.trajectory.env_reward > 0
                for c, r in zip(graded, group, strict=True)
            ]
        return sum(wins) / len(wins) if wins else 0.0

    def observe(self, step: int, groups: Sequence[Sequence[Any]]) -> None:
        """A step's scored groups: rates, the band, new variants of failures, the replay buffer."""
        cfg = self.config
        low, high = cfg.curriculum_band_low, cfg.curriculum_band_high
        self.generated = 0
        # A generator that answers many failures at once (an LLM: one batch) gets the step's failures together,
        # as many as the frontier's room takes at `curriculum_variants` each.
        many = getattr(self.variants, "many", None)
        pending: list[PoolEntry] = []
        promised = 0
        for group in groups:
            if not group:
                continue
            task = group[0].task
            entry = self.entries.setdefault(task.id, PoolEntry(task))
            rate = self.success_rate(group)
            entry.attempts += 1
            entry.rate = rate
            if rate > 0:
                self.replay[task.id] = rate
            if rate == 0:
                # Too hard: a generated task leaves the frontier; any failure seeds variants while the
                # frontier has room (four steps' worth), so the pool cannot grow without bound.
                entry.state = "retired" if entry.generator else "failed"
                if len(self.frontier) + promised < 4 * cfg.prompts_per_step:
                    if many is not None:
                        pending.append(entry)
                        promised += cfg.curriculum_variants
                    else:
                        self._spawn(entry, step)
            elif rate > high:
                entry.state = "mastered"
            elif rate >= low and entry.generator:
                entry.state = "frontier"
                self.frontier.append(task.id)
            else:
                entry.state = "retired" if entry.generator else "seen"
        if many is not None and pending:
            made = many([e.task for e in pending], cfg.curriculum_variants, set(self.entries))
            for entry, tasks in zip(pending, made, strict=True):
                self._add(entry, tasks, step)
        while len(self.replay) > cfg.curriculum_replay_size:
            del self.replay[max(self.replay, key=lambda k: self.replay[k])]
        # The LLM generator counts what it refused (trainers.learn.curriculum_llm); the environment's refuses nothing.
        take = getattr(self.variants, "take", None)
        self.refused = take() if take else {}

    @property
    def generator(self) -> str:
        """What makes the variants, as entries and events name it: "environment" or "llm:<model>"."""
        return str(getattr(self.variants, "name", "environment"))

    def _spawn(self, failed: PoolEntry, step: int) -> None:
        seed = self.config.seed * 7_919 + step * 1_009 + len(self.entries)
        self._add(
            failed, self.variants(failed.task, self.config.curriculum_variants, seed, set(self.entries)), step
        )

    def _add(self, failed: PoolEntry, tasks: Sequence[Any], step: int) -> None:
        for task in tasks:
            if task.id in self.entries:
                continue  # two failures of one batch got the same variant: it is born once
            self.entries[task.id] = PoolEntry(
                task, parent=failed.task.id, generator=self.generator, born=step
            )
            # On the frontier to be tried next; the band decides after that whether it stays.
            self.frontier.append(task.id)
            self.generated += 1

    def report(self, step: int) -> dict[str, Any]:
        """The `task_pool` event's fields: the newest entries, what the step drew, the replay buffer."""
        entries = list(self.entries.values())[-MAX_REPORTED:]
        return {
            "step": step,
            "size": len(self.entries),
            "frontier": len(self.frontier),
            "replay": len(self.replay),
            "drawn": dict(self.drawn),
            "generator": self.generator,
            "generated": self.generated,
            "refused": dict(self.refused),
            "entries": [e.report() for e in entries],
        }


def attach_curriculum(trainer: Any) -> None:
    """Make `trainer`'s sampler draw from a `TaskPool` and report it after each step (`task_pool` events)."""
    sampler = trainer.sampler
    if generator_of(trainer.config) == "llm":
        from trainers.learn.curriculum_llm import llm_variants

        variants: Callable[..., list[Any]] = llm_variants(trainer)
    else:
        variants = environment_variants(trainer.make_env)
    pool = TaskPool(trainer.config, base=sampler.next_tasks, variants=variants)
    sampler.next_tasks = pool.next_tasks
    sample = sampler.sample

    def sample_and_observe(step: int, policy_version: int, timings: dict[str, float]) -> Any:
        sampled = sample(step, policy_version, timings)
        pool.observe(step + 1, sampled.generated)
        trainer.emit("task_pool", **pool.report(step + 1))
        return sampled

    sampler.sample = sample_and_observe
    trainer.task_pool = pool


class EnvironmentTasks:
    """The built-in `tasks` task source (`trainers.parts`): the sampler's own stream, left as it is."""

    def __init__(self, config: Any, options: dict[str, Any]) -> None:
        pass

    def attach(self, trainer: Any) -> None:
        pass


class CurriculumFromFailures:
    """The built-in `from_failures` task source (`trainers.parts`): a `TaskPool` (`attach_curriculum`)."""

    def __init__(self, config: Any, options: dict[str, Any]) -> None:
        pass

    def attach(self, trainer: Any) -> None:
        attach_curriculum(trainer)
