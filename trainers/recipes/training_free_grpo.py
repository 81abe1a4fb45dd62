"""Training-Free GRPO (Tencent youtu-agent, `utu/practice/`): GRPO's groups without its optimizer.

Each step samples `group_size` rollouts of `prompts_per_step` tasks and scores them as a GRPO step does.
Then, instead of an update, every group whose rewards differ goes to an LLM — the policy itself, a model
the workers serve, or an endpoint (`experience_model`, `experience_base_url`) — with its best and worst
samples and the experience library as it stands; the LLM states what the better sample did, as add /
modify / delete edits to the library (`trainers.learn.experience`). The library goes under the system
prompt of every later rollout, training and held-out alike; the policy's weights never change, so any
model behind an endpoint can be "trained". Epochs: `experience_task_set` keeps the first N training tasks
and the task stream cycles over them.

The run reports what a GRPO step does (groups as they are scored, their advantages, the step's metrics)
plus one `experience` event per step: the library after the step, its edits (applied or refused, with the
text a modify or delete replaced) and what the experience model cost in tokens. The trajectories of step
s had the library of step s − 1 in their prompt; an evaluation at step s had step s's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainers.learn.experience import ExperienceLibrary, contrast_prompt, has_contrast, parse_edits, step_diff
from trainers.learn.metrics import StepSample, step_metrics
from trainers.recipes.grpo import RunResult, Trainer
from trainers.rollout.episodes import Rollout
from trainers.run_config import RunConfig, knob


class WithExperiences:
    """An environment whose system prompt carries the library as it is when the episode starts."""

    def __init__(self, env: Any, library: ExperienceLibrary) -> None:
        self._env, self._library = env, library

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def system_prompt(self) -> str:
        base, block = self._env.system_prompt(), self._library.prompt_block()
        return f"{base}\n\n{block}" if base and block else base or block


def attempt_text(rollout: Rollout) -> str:
    """What a sample did after its prompt, as the experience model reads it: its turns in order."""
    turns = rollout.trajectory.turns[2:]
    if len(turns) == 1:
        return turns[0].text
    return "\n".join(f"[{t.role}] {t.text}" for t in turns)


@dataclass(frozen=True)
class TrainingFreeConfig(RunConfig):
    """The run config with Training-Free GRPO's own knobs (declared in `trainers.learn.experience`)."""

    experience_model: str = knob("experience_model")
    experience_base_url: str = knob("experience_base_url")
    experience_api_key_secret: str = knob("experience_api_key_secret")
    experience_max_items: int = knob("experience_max_items")
    experience_max_edits: int = knob("experience_max_edits")
    experience_max_new_tokens: int = knob("experience_max_new_tokens")
    experience_task_set: int = knob("experience_task_set")


class TrainingFreeGRPO(Trainer):
    """`Trainer` with the update replaced by library edits (see the module docstring)."""

    config_class = TrainingFreeConfig
    config: TrainingFreeConfig
    library: ExperienceLibrary
    tokens_used: dict[str, int]

    def setup(self) -> None:
        if self._setup_done:
            return
        super().setup()
        cfg = self.config
        self.library = ExperienceLibrary(max_items=cfg.experience_max_items)
        self.tokens_used = {"prompt_tokens": 0, "completion_tokens": 0}
        if cfg.experience_task_set:
            self.sampler.train_tasks = self.sampler.train_tasks[: cfg.experience_task_set]
        rollouts = self.sampler.rollouts
        make_env = rollouts.make_env
        rollouts.make_env = lambda: WithExperiences(make_env(), self.library)
        self.ask = self._experience_model()
        epochs = cfg.max_steps * cfg.prompts_per_step / len(self.sampler.train_tasks)
        self.log(
            f"Training-Free GRPO: no weight updates; {len(self.sampler.train_tasks)} training tasks, "
            f"{epochs:.1f} epochs; experiences from {self._model_words()}"
        )
        self._report_library(step=self.step, records=[], asked=0, usage={})

    def _model_words(self) -> str:
        from trainers.rubrics.judge_models import describe_model

        return describe_model(self.config.experience_model, self.config.experience_base_url)

    def _experience_model(self) -> Any:
        """prompts → answers, with `last_usage` (tokens of the last call): LocalJudge or EndpointJudge."""
        from trainers.rubrics.judge_models import JudgePool, generation_model

        cfg = self.config
        if self.judges is None:
            # The run closes its judge pool at the end; a model loaded for the experiences goes with it.
            self.judges = JudgePool(policy_model=cfg.model, device=self.learner.device, secrets=self._secrets)
        # "policy": the weights never change, so the policy's own sampling backend answers, at temperature 0.
        return generation_model(
            self.judges,
            model=cfg.experience_model,
            base_url=cfg.experience_base_url,
            api_key_secret=cfg.experience_api_key_secret,
            max_tokens=cfg.experience_max_new_tokens,
            policy_backend=self.sampler.rollouts.backend,
        )

    def train_step(self) -> dict[str, float]:
        cfg = self.config
        started = time.perf_counter()
        timings: dict[str, float] = {"generate": 0.0, "score": 0.0}
        assert self.reporter is not None
        self.reporter.start(self.step + 1)
        sampled = self.sampler.sample(self.step, self.policy_version, timings)
        self.reporter.finish(sampled.kept)
        t0 = time.perf_counter()
        records, asked, usage = self.update_library(sampled.generated)
        timings["experience"] = time.perf_counter() - t0
        self.step += 1
        self._report_library(step=self.step, records=records, asked=asked, usage=usage)
        flat = [r for g in sampled.generated for r in g]
        metrics = {
            **step_metrics([[StepSample.of_rollout(r) for r in g] for g in sampled.generated]),
            **{f"experience/{k}": float(v) for k, v in step_diff(records).items()},
            "experience/items": float(len(self.library.items)),
            "experience/groups_asked": float(asked),
            "experience/prompt_tokens": float(usage.get("prompt_tokens", 0)),
            "experience/completion_tokens": float(usage.get("completion_tokens", 0)),
            "experience/tokens_total": float(sum(self.tokens_used.values())),
            "epoch": self.step * cfg.prompts_per_step / len(self.sampler.train_tasks),
            "step_time": time.perf_counter() - started,
            "tokens_per_s": sum(r.model_tokens for r in flat) / max(timings["generate"], 1e-9),
            **{f"time/{k}": v for k, v in timings.items()},
        }
        self.emit("metrics", step=self.step, split="train", values=metrics)
        self.last_metrics.update(metrics)
        return metrics

    def update_library(self, groups: list[list[Rollout]]) -> tuple[list[dict[str, Any]], int, dict[str, int]]:
        """Ask about every group with a contrast, apply the answers' edits in group order; (edit records
        with their group, groups asked, tokens spent)."""
        cfg = self.config
        contrasted = [g for g in groups if g and has_contrast([r.reward for r in g])]
        if not contrasted:
            return [], 0, {}
        self.phase(
            "updating", self.step + 1, total=len(contrasted), message="asking what the better samples did"
        )
        prompts = [
            contrast_prompt(
                g[0].task.prompt,
                [(r.reward, attempt_text(r)) for r in g],
                self.library,
                max_edits=cfg.experience_max_edits,
            )
            for g in contrasted
        ]
        answers = self.ask(prompts)
        usage = dict(getattr(self.ask, "last_usage", {}) or {})
        for key in self.tokens_used:
            self.tokens_used[key] += int(usage.get(key, 0))
        records = []
        for group, answer in zip(contrasted, answers, strict=True):
            for record in self.library.apply(parse_edits(answer, cfg.experience_max_edits)):
                records.append({**record, "group": group[0].group})
        return records, len(contrasted), usage

    def _report_library(
        self, *, step: int, records: list[dict[str, Any]], asked: int, usage: dict[str, int]
    ) -> None:
        self.emit(
            "experience",
            step=step,
            items=self.library.to_dict()["items"],
            edits=records,
            groups_asked=asked,
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
        )

    def update(self, rollouts: list[Rollout], timings: dict[str, float]) -> dict[str, float]:
        raise RuntimeError("Training-Free GRPO never updates the weights")

    def save_checkpoint(self) -> str:
        """The library as JSON (the weights are the starting model's: nothing else to save)."""
        assert self.out_dir is not None
        path = self.out_dir / "experience" / f"step-{self.step}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"step": self.step, **self.library.to_dict()}, indent=1))
        return str(path)


def train(config: Mapping[str, Any] | RunConfig, **kwargs: Any) -> RunResult:
    """Run Training-Free GRPO (the Trainer's keyword arguments)."""
    return TrainingFreeGRPO(config, **kwargs).run()
