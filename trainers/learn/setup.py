"""What a run needs before its first step, built from its resolved config: the learner (the policy, its
optimizer, its shards), the chat and tool-call format, the environment factory and its tasks, the rubric
with its LLM judges, where rollouts are generated, the checkpoint folder, and the state a resumed run
continues from. `trainers.recipes.grpo.Trainer.setup` calls `build_run` once.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainers.learn import checkpoint, token_stats
from trainers.learn.learner import Learner
from trainers.learn.memory import return_large_frees_to_the_os
from trainers.learn.run_events import RunEvents
from trainers.learn.sampler import make_rollouts
from trainers.rollout.chat import ChatFormat
from trainers.rollout.local import LocalRollouts
from trainers.rollout.toolformats import explain_tool_format
from trainers.run_config import RunConfig
from trainers.sdk.events import without_local_paths


@dataclass
class RunParts:
    learner: Learner
    chat: ChatFormat
    make_env: Callable[[], Any]
    rubric: Any
    judges: Any  # trainers.rubrics.judge_models.JudgePool, or None without LLM judges
    stop: tuple[str, ...]
    train_tasks: list[Any]
    eval_tasks: list[Any]
    rollouts: Any
    checkpoints: checkpoint.RunCheckpoints | None
    step: int = 0
    data_position: int = 0
    policy_version: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


def build_run(
    cfg: RunConfig,
    events: RunEvents,
    *,
    out_dir: Path | None,
    resume_from: Path | None,
    env_factory: Callable[[], Any] | None,
    rubric: Any,
    model: Any,
    tokenizer: Any,
    secrets: Mapping[str, str] | None,
) -> RunParts:
    return_large_frees_to_the_os()  # the learner's activations leave with each step (trainers.learn.memory)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    events.phase("loading", 0, message=f"loading {cfg.model}")
    learner = Learner(cfg, model=model, tokenizer=tokenizer, log=events.log)
    judges = None
    try:  # what a failed setup loaded goes (the run ends with it)
        if cfg.token_stats_enabled(learner.parameter_count):
            learner.recorder = token_stats.Recorder()
        tool_format, why = explain_tool_format(cfg.tool_format, learner.tokenizer)
        chat = ChatFormat(learner.tokenizer, tool_format)
        events.log(f"tool-call format: {tool_format.name} ({why})")
        if rubric is not None and cfg.overlong_buffer:
            events.log(
                "overlong_buffer is ignored: a rubric object was passed in; add an overlong_penalty criterion "
                "to it instead",
                "warning",
            )
        spec = cfg.effective_rubric()
        if rubric is None and spec:
            from trainers.rubrics import build_rubric

            rubric = build_rubric(spec)
        judges = attach_judges(cfg, rubric, learner, secrets, events)
        return _build_rest(cfg, events, learner, chat, rubric, judges, out_dir, resume_from, env_factory)
    except BaseException:
        if judges is not None:
            judges.close()
        learner.close()
        raise


def _build_rest(
    cfg: RunConfig,
    events: RunEvents,
    learner: Learner,
    chat: ChatFormat,
    rubric: Any,
    judges: Any,
    out_dir: Path | None,
    resume_from: Path | None,
    env_factory: Callable[[], Any] | None,
) -> RunParts:
    make_env = env_factory or registry_env_factory(cfg)
    probe = make_env()
    rounds = 1 + (cfg.dynamic_sampling_max_rounds if cfg.dynamic_sampling else 0)
    train_tasks = list(probe.tasks("train", cfg.max_steps * cfg.prompts_per_step * rounds, cfg.seed))
    eval_tasks = list(probe.tasks("eval", cfg.eval_tasks, cfg.seed)) if cfg.eval_tasks else []
    if not train_tasks and cfg.max_steps > 0:  # (0 steps: an evaluation of the starting policy)
        raise ValueError("the environment returned no training tasks")
    stop = getattr(probe, "stop", None)  # an environment may set its own stop strings (or none: ())
    stops = tuple(stop) if stop is not None else chat.tool_format.stop
    if hasattr(probe, "close"):
        probe.close()  # it only listed tasks: release what it holds (MCP sessions)
    parts = RunParts(
        learner=learner,
        chat=chat,
        make_env=make_env,
        rubric=rubric,
        judges=judges,
        stop=stops,
        train_tasks=train_tasks,
        eval_tasks=eval_tasks,
        rollouts=None,
        checkpoints=checkpoint.RunCheckpoints(out_dir, cfg.as_dict()) if out_dir is not None else None,
    )
    if resume_from is not None:
        state = checkpoint.resume(resume_from, learner)
        parts.step, parts.data_position = int(state["step"]), int(state["data_position"])
        parts.policy_version = int(state["policy_version"])
        parts.metrics = dict(state.get("metrics", {}))
        events.log(f"resumed at step {parts.step} from {without_local_paths(str(resume_from))}")
    if cfg.num_learner_workers > 1:
        learner.shard(resume_from, events.log)
    parts.rollouts = make_rollouts(
        cfg,
        learner,
        chat=chat,
        make_env=make_env,
        stop=stops,
        policy_version=parts.policy_version,
        log=events.log,
    )
    if isinstance(parts.rollouts, LocalRollouts):
        parts.rollouts.progress = events.generation_progress
    return parts


def attach_judges(
    cfg: RunConfig,
    rubric: Any,
    learner: Learner,
    secrets: Mapping[str, str] | None,
    events: RunEvents,
) -> Any:
    """Give the rubric's LLM judges their models (a frozen copy of the policy, a model on this worker, an
    endpoint with its key): a judge that cannot load fails the run here, at setup. None without judges."""
    from trainers.rubrics.judge_models import JudgePool, judge_criteria
    from trainers.rubrics.judge_models import attach_judges as attach

    if not judge_criteria(rubric):
        return None
    judges = JudgePool(
        policy_model=cfg.model,
        device=learner.device,
        secrets=secrets,  # project secret values the rubric's judges name (None: the environment's)
        reference=getattr(learner, "reference", None),
        tokenizer=learner.tokenizer,
    )
    events.phase("loading", 0, message="loading the LLM judges")
    for line in attach(rubric, judges):
        events.log(line)
    return judges


def registry_env_factory(cfg: RunConfig) -> Callable[[], Any]:
    from trainers.registry import environment_kind

    spec = environment_kind(cfg.environment.kind)
    env_config = dict(cfg.environment.config)
    return lambda: spec.build(env_config)
