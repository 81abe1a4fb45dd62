"""The GRPO-family recipe (GRPO, Dr. GRPO, DAPO, RLOO, REINFORCE++: the `preset` picks the estimator and the
loss), read top to bottom: build the run, then per step sample, score, update, sync; evaluate and checkpoint.

The run is built by `trainers.learn.setup.build_run` from the typed config (`trainers.run_config.RunConfig`,
built once here). One step: the sampler (`trainers.learn.sampler`) draws
`prompts_per_step` tasks, rolls out `group_size` episodes of each (multi-turn, tools) and scores them with
the rubric, sampling again for groups without signal under dynamic sampling; each group goes to the
dashboard with its advantages as soon as it is scored (`trainers.learn.run_events.GroupReporter`); the
learner (`trainers.learn.learner`: one `learner_step`, in this process or on the learner shards) updates
the policy (full fine-tuning or LoRA) with the clipped loss; the new weights go to the generation backend.
Metrics come from one function each (`trainers.learn.metrics`), checkpoints from
`trainers.learn.checkpoint.RunCheckpoints`. Everything the dashboard shows goes out through an `EventSink`
(`trainers.learn.run_events.RunEvents`).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainers.config import resolve_run_config, validate_run_config
from trainers.learn import checkpoint, token_stats
from trainers.learn.memory import trim_heap
from trainers.learn.metrics import StepSample, step_metrics
from trainers.learn.run_events import GroupReporter, RunEvents, judge_metrics, trajectory_item
from trainers.learn.sampler import Sampler
from trainers.learn.setup import build_run
from trainers.parts import build_part
from trainers.rollout.episodes import Rollout
from trainers.rubrics.alarms import AlarmWatch
from trainers.run_config import RunConfig
from trainers.sdk.cancel import Cancelled, cancellable, check_cancel
from trainers.sdk.events import EventSink, LogForwarder, NullSink

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    status: str
    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    checkpoint: str | None = None


class Trainer:
    """Runs one training run from a resolved config.

    `env_factory` / `rubric` override the config's environment and rubric (custom code); `model` /
    `tokenizer` reuse an already loaded model (tests, notebooks). `cancel` (cheap: the worker's watcher
    answers from memory) and the sink's `control()` are the run's one cancellation check
    (`trainers.sdk.cancel`): polled between steps, and inside them wherever the library calls
    `check_cancel()` — every decode step, between turns and generation batches, scoring, the learner's
    micro-batches — so a cancel lands within seconds wherever the run is.
    """

    # The typed config this recipe reads: a recipe with knobs of its own names a subclass with them.
    config_class: type[RunConfig] = RunConfig

    def __init__(
        self,
        config: Mapping[str, Any] | RunConfig,
        *,
        sink: EventSink | None = None,
        out_dir: str | Path | None = None,
        resume_from: str | Path | None = None,
        cancel: Callable[[], bool] | None = None,
        env_factory: Callable[[], Any] | None = None,
        rubric: Any = None,
        model: Any = None,
        tokenizer: Any = None,
        secrets: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(config, RunConfig):
            config = config.as_dict()
        full = resolve_run_config(config.get("preset"), dict(config))
        errors = validate_run_config(full)
        if env_factory is not None:
            errors = {k: v for k, v in errors.items() if not k.startswith("environment")}
        if errors:
            raise ValueError(
                "invalid run config: "
                + "; ".join(f"{k or 'config'}: {', '.join(v)}" for k, v in errors.items())
            )
        # Built once: every part of the run (sampler, learner, its shards, the Ray workers) reads this.
        self.config = self.config_class.build(full)
        self.sink: EventSink = sink or NullSink()
        self.out_dir = Path(out_dir) if out_dir else None
        self.resume_from = Path(resume_from) if resume_from else None
        self.cancel = cancel
        self._env_factory = env_factory
        self._rubric_override = rubric
        self._model_override = (model, tokenizer)
        self._secrets = secrets  # project secret values the rubric's judges name (None: the environment's)
        self.events = RunEvents(self.sink)
        self.judges: Any = None  # trainers.rubrics.judge_models.JudgePool
        self.rubric: Any = None
        self.reporter: GroupReporter | None = None  # sends each group as it is scored, once set up
        self.step = 0
        self.policy_version = 0
        self.last_metrics: dict[str, float] = {}
        self.learner: Any = None  # Learner, once set up
        self.sampler: Any = None  # Sampler, once set up
        self.checkpoints: checkpoint.RunCheckpoints | None = None
        self._last_checkpoint: str | None = None
        self._setup_done = False
        self._alarm_watch: AlarmWatch | None = None  # with stop_on_hacking_alarm, once the loop starts

    @property
    def model(self) -> Any:
        return self.learner.model

    @property
    def rollouts(self) -> Any:
        return self.sampler.rollouts if self.sampler is not None else None

    # -- events (trainers.learn.run_events) ---------------------------------------------------

    def emit(self, type_: str, **fields: Any) -> None:
        self.events.emit(type_, **fields)

    def log(self, message: str, level: str = "info") -> None:
        self.events.log(message, level)

    def phase(self, name: str, step: int | None, *, done: int = 0, total: int = 0, message: str = "") -> None:
        self.events.phase(name, step, done=done, total=total, message=message)

    # -- setup ---------------------------------------------------------------------------------

    def setup(self) -> None:
        """Build what the run needs (`trainers.learn.setup.build_run`) and the sampler that feeds it."""
        if self._setup_done:
            return
        cfg = self.config
        model, tokenizer = self._model_override
        parts = build_run(
            cfg,
            self.events,
            out_dir=self.out_dir,
            resume_from=self.resume_from,
            env_factory=self._env_factory,
            rubric=self._rubric_override,
            model=model,
            tokenizer=tokenizer,
            secrets=self._secrets,
        )
        self.learner, self.chat, self.make_env, self.stop = (
            parts.learner,
            parts.chat,
            parts.make_env,
            parts.stop,
        )
        self.rubric, self.judges, self.checkpoints = parts.rubric, parts.judges, parts.checkpoints
        self.step, self.policy_version = parts.step, parts.policy_version
        self.last_metrics.update(parts.metrics)
        self.reporter = GroupReporter(cfg, self.events, self.learner)
        self.sampler = Sampler(
            cfg,
            parts.rollouts,
            train_tasks=parts.train_tasks,
            eval_tasks=parts.eval_tasks,
            data_position=parts.data_position,
            rubric=self.rubric,
            phase=self.phase,
            log=self.log,
            on_scored=self.reporter.scored,
        )
        # The run's task source (`curriculum`, trainers.parts): WebRL's curriculum from failures, say.
        build_part("task_source", cfg).attach(self)
        self._setup_done = True

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        return self.learner.policy_state_dict()

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Train to `max_steps` (or until cancelled). Emits status events; re-raises failures."""
        self.emit("status", status="RUNNING", message="starting", traceback=None, step=self.step)
        # The worker's warnings reach the run's log; progress bars a library prints fold into the phase line.
        forwarder = LogForwarder(self.sink.emit, progress=self.events.library_progress)
        logging.getLogger().addHandler(forwarder)
        try:
            with cancellable(self._cancel_requested):
                self._train()
            message = f"finished {self.step} steps"
            self.emit("status", status="SUCCEEDED", message=message, traceback=None, step=self.step)
            return RunResult("SUCCEEDED", self.step, dict(self.last_metrics), self._last_checkpoint)
        except Cancelled:
            checkpoint_path = self._last_checkpoint
            if self.out_dir is not None and self._setup_done and self.step > 0:
                checkpoint_path = self.save_checkpoint()
            self.log(cancel_outcome(self.step, saved=checkpoint_path is not None))
            message = f"cancelled after step {self.step}"
            self.emit("status", status="CANCELLED", message=message, traceback=None, step=self.step)
            return RunResult("CANCELLED", self.step, dict(self.last_metrics), checkpoint_path)
        except BaseException as exc:
            message, trace = f"{type(exc).__name__}: {exc}", traceback.format_exc()
            self.emit("status", status="FAILED", message=message, traceback=trace, step=self.step)
            raise
        finally:
            logging.getLogger().removeHandler(forwarder)
            forwarder.close()
            if self.rollouts is not None:
                self.rollouts.close()
            if self.learner is not None:
                self.learner.close()
            if self.judges is not None:
                self.judges.close()
            self.sink.flush()

    def _train(self) -> None:
        """Setup, the first evaluation, the steps with their checkpoints and evaluations, the last ones."""
        self.setup()
        cfg = self.config
        if cfg.eval_tasks and self.step == 0:
            self._stop_on_hacking_alarm(self.evaluate())
        if cfg.max_steps == 0:  # an evaluation of the starting policy: its figures above are the run's
            return
        while self.step < cfg.max_steps:
            check_cancel()
            metrics = self.train_step()
            self.events.step_summary(self.step, cfg.max_steps, metrics)
            self._stop_on_hacking_alarm(metrics)
            every, last = cfg.checkpoint_every, self.step >= cfg.max_steps
            if self.out_dir is not None and every and self.step % every == 0 and not last:
                self._last_checkpoint = self.save_checkpoint()
            if cfg.eval_tasks and cfg.eval_every and self.step % cfg.eval_every == 0 and not last:
                self._stop_on_hacking_alarm(self.evaluate())
        if cfg.eval_tasks:
            self.evaluate()
        if self.out_dir is not None:
            self._last_checkpoint = self.save_checkpoint()

    def _stop_on_hacking_alarm(self, metrics: dict[str, float]) -> None:
        """With `stop_on_hacking_alarm`: stop as a cancel does (a checkpoint is kept) when the run's alarm
        (trainers.rubrics.alarms, the rule the run page shows) comes on, saying why in the log."""
        if not self.config.stop_on_hacking_alarm:
            return
        if self._alarm_watch is None:
            self._alarm_watch = AlarmWatch((self.config.rubric or {}).get("criteria") or [])
        alarm = self._alarm_watch.observe(self.step, metrics)
        if alarm is not None:
            self.log(f"stopping after step {self.step}: {alarm.message} (stop_on_hacking_alarm)", "warning")
            raise Cancelled(alarm.message)

    def _cancel_requested(self) -> bool:
        if self.cancel is not None and self.cancel():
            return True
        try:
            return bool(self.sink.control().get("cancel"))
        except Exception as exc:  # noqa: BLE001 — a broken control channel must not stop training
            log.warning("sink control failed: %r", exc)
            return False

    def train_step(self) -> dict[str, float]:
        cfg = self.config
        started = time.perf_counter()
        timings: dict[str, float] = {"generate": 0.0, "score": 0.0}
        max_turns = cfg.max_turns_at(self.step)
        assert self.reporter is not None
        # Each group reaches the feed and the explorer as soon as it is scored, before the update (minutes
        # on a CPU), with its advantages (trainers.learn.run_events.GroupReporter). The learner's token
        # statistics follow the update in a `token_stats` event.
        self.reporter.start(self.step + 1)
        sampled = self.sampler.sample(self.step, self.policy_version, timings)
        self.reporter.finish(sampled.kept)
        batch = [r for g in sampled.kept for r in g]
        flat = [r for g in sampled.generated for r in g]
        if batch:
            self.phase("updating", self.step + 1, message=f"{len(batch)} samples")
        update = self.update(batch, timings) if batch else {}
        self.step += 1
        metrics = {
            **step_metrics([[StepSample.of_rollout(r) for r in g] for g in sampled.generated]),
            "groups_kept": float(len(sampled.kept)),
            "sampling_rounds": float(sampled.rounds),
            "max_turns": float(max_turns),
            "policy_version": float(self.policy_version),
            "learning_rate": self.learner.learning_rate,
            "step_time": time.perf_counter() - started,
            "tokens_per_s": sum(r.model_tokens for r in flat) / max(timings["generate"], 1e-9),
            **{f"time/{k}": v for k, v in timings.items()},
            **update,
            **judge_metrics(self.rubric, self.judges, ""),
        }
        recorder = self.learner.recorder
        if recorder is not None:
            learned = token_stats.learner_items(batch, recorder)
            if learned:
                self.emit("token_stats", step=self.step, items=learned)
            recorder.clear()
        self.emit("metrics", step=self.step, split="train", values=metrics)
        self.last_metrics.update(metrics)
        return metrics

    def update(self, rollouts: list[Rollout], timings: dict[str, float]) -> dict[str, float]:
        """Update the policy on `rollouts` (advantages assigned), then send the new weights to generation.
        A sampling copy's weights are given back during the update (they are all pushed again after it)."""
        released = self.rollouts.release_weights()
        try:
            metrics = self.learner.update(rollouts, timings, step=self.step)
        except BaseException:
            if released:  # the policy is as it was before the update: the copy gets its weights back
                self.rollouts.update_weights(self.learner.policy_state_dict, self.policy_version)
            raise
        self.policy_version += 1
        self.phase("syncing", self.step + 1)
        t0 = time.perf_counter()
        self.learner.gather_weights()
        self.rollouts.update_weights(self.learner.policy_state_dict, self.policy_version)
        timings["weight_sync"] = time.perf_counter() - t0
        # What the update freed in small pieces (autograd's graph, the parts' bookkeeping) stays in glibc's
        # heap otherwise, under the next generation's KV cache: ~0.1 GiB of the demo's peak.
        trim_heap()
        return metrics

    # -- evaluation and checkpoints ------------------------------------------------------------

    def evaluate(self) -> dict[str, float]:
        """Score the fixed held-out tasks (fixed seeds, eval temperature) with the current policy."""
        self.setup()
        started = time.perf_counter()
        count = len(self.sampler.eval_tasks)
        self.phase("evaluating", self.step, total=count, message=f"{count} held-out tasks")
        groups = self.sampler.evaluate(self.step, self.policy_version)
        metrics = step_metrics(
            [[StepSample.of_rollout(r) for r in g] for g in groups], split="eval", prefix="eval/"
        )
        metrics.update(judge_metrics(self.rubric, self.judges, "eval/"))
        metrics["eval/time"] = time.perf_counter() - started
        self.emit(
            "trajectories",
            step=self.step,
            items=[trajectory_item(r, r.loss_mask, self.learner) for g in groups for r in g],
        )
        self.emit("metrics", step=self.step, split="eval", values=metrics)
        self.last_metrics.update(metrics)
        self.events.evaluation_summary(self.step, metrics, count)
        return metrics

    def save_checkpoint(self) -> str:
        assert self.checkpoints is not None
        self.phase("checkpointing", self.step)
        return self.checkpoints.save(
            self.learner,
            step=self.step,
            data_position=self.sampler.resume_position,
            policy_version=self.policy_version,
            metrics=self.last_metrics,
            emit=self.emit,
            log=self.log,
        )


def cancel_outcome(step: int, *, saved: bool) -> str:
    """The run log's line on a cancel: where it stopped and where a resume starts (the run page's cancel
    dialog promises the same: a checkpoint of the last finished step, none before the first)."""
    if saved:
        return f"cancelled: stopped after step {step}; a resume starts from the checkpoint of step {step}"
    where = f"after step {step}" if step else "before its first step finished"
    return f"cancelled: stopped {where}, with no checkpoint saved; there is nothing to resume from"


def train(config: Mapping[str, Any] | RunConfig, **kwargs: Any) -> RunResult:
    """Build a Trainer and run it (see Trainer for the keyword arguments); a preset with a recipe of its
    own (`trainers.kinds.RECIPE_PRESETS`: Training-Free GRPO) runs that recipe with the same arguments."""
    from trainers.kinds import recipe_train

    recipe = recipe_train(config.preset if isinstance(config, RunConfig) else config.get("preset"))
    if recipe is not None:
        return recipe(config, **kwargs)
    return Trainer(config, **kwargs).run()
