"""The GRPO-family training loop.

One step: sample `prompts_per_step` tasks, roll out `group_size` episodes of each (multi-turn, tools),
score every trajectory with the rubric, compute group advantages, optionally drop zero-variance
groups and sample more (dynamic sampling), then update the policy (full fine-tuning or LoRA) with
the clipped loss. Everything the dashboard shows goes out through an `EventSink`.

Where the CPU time goes and what we do about it:
- log-probabilities are computed only where the loss needs them: the decoder runs over each group's
  shared prompt once (its KV cache, with gradient, is shared by the group's members), then over the
  completions; the LM head and log-softmax run only at model-sampled positions, never over the
  prompt or tool output;
- completions whose advantage is exactly 0 (and no KL term) contribute exactly zero gradient and are
  skipped by the learner, while still counting in the loss normaliser;
- with one update per batch, the "old" log-probs are the current ones detached (no extra pass).

Reproducible on CPU: task order, environment seeds and sampling seeds derive from `seed` and the
step, so a resumed run draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import copy
import logging
import math
import random
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainers import algorithms, checkpoint, turn_credit, wire
from trainers.config import effective_rubric, max_turns_at, resolve_run_config, validate_run_config
from trainers.events import REPORTED, EventSink, LogForwarder, NullSink, PhaseClock, make_event
from trainers.losses import completion_logprobs, policy_loss, truncated_importance_weights
from trainers.rollout import ChatFormat, LocalRollouts, Rollout
from trainers.toolformats import resolve_tool_format

log = logging.getLogger(__name__)

EVAL_SEED_OFFSET = 1_000_003


class Cancelled(Exception):
    pass


@dataclass
class RunResult:
    status: str
    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    checkpoint: str | None = None


# ----------------------------------------------------------------------------- the trainer


class Trainer:
    """Runs one training run from a resolved config.

    `env_factory` / `rubric` override the config's environment and rubric (custom code); `model` /
    `tokenizer` reuse an already loaded model (tests, notebooks). `cancel` is polled between steps,
    as is the sink's `control()`.
    """

    def __init__(
        self,
        config: dict[str, Any],
        *,
        sink: EventSink | None = None,
        out_dir: str | Path | None = None,
        resume_from: str | Path | None = None,
        cancel: Callable[[], bool] | None = None,
        env_factory: Callable[[], Any] | None = None,
        rubric: Any = None,
        model: Any = None,
        tokenizer: Any = None,
    ) -> None:
        full = resolve_run_config(config.get("preset"), config)
        errors = validate_run_config(full)
        if env_factory is not None:
            errors = {k: v for k, v in errors.items() if not k.startswith("environment")}
        if errors:
            raise ValueError(
                "invalid run config: "
                + "; ".join(f"{k or 'config'}: {', '.join(v)}" for k, v in errors.items())
            )
        self.config = full
        self.sink: EventSink = sink or NullSink()
        self.out_dir = Path(out_dir) if out_dir else None
        self.resume_from = Path(resume_from) if resume_from else None
        self.cancel = cancel
        self._env_factory = env_factory
        self._rubric_override = rubric
        self._model_override = (model, tokenizer)
        self.step = 0
        self.data_position = 0
        self.policy_version = 0
        self.last_metrics: dict[str, float] = {}
        self.rollouts: Any = None
        self.learner: Any = None  # trainers.sharded.ShardedLearner when num_learner_workers > 1
        # Batches generating ahead of the learner (bounded async), oldest first: (data position, futures).
        self._pending: list[tuple[int, Any]] = []
        self._setup_done = False
        self._phases = PhaseClock()

    # -- events --------------------------------------------------------------------------------

    def emit(self, type_: str, **fields: Any) -> None:
        self.sink.emit(make_event(type_, **fields))

    def log(self, message: str, level: str = "info") -> None:
        levels = {
            "debug": logging.DEBUG,
            "info": logging.INFO,
            "warning": logging.WARNING,
            "error": logging.ERROR,
        }
        log.log(
            levels.get(level, logging.INFO), message, extra={REPORTED: True}
        )  # not forwarded a second time
        self.emit("log", level=level, message=message)

    def phase(self, name: str, step: int | None, *, done: int = 0, total: int = 0, message: str = "") -> None:
        """Tell the run page what the trainer is doing now (`trainers.wire.PHASES`). A call with the phase
        and step already under way is a progress update: it keeps the phase's clock running."""
        self.sink.emit(self._phases.event(name, step, done=done, total=total, message=message))

    def _generation_progress(self, turn: int, done: int, total: int) -> None:
        if self._phases.current is not None:
            name, step, _ = self._phases.current
            self.phase(
                name, step, done=done, total=total, message=f"turn {turn}: {done} of {total} groups done"
            )

    def _report_step(self, metrics: dict[str, float]) -> None:
        """One log line per step: what a researcher scans the log for."""
        parts = [f"step {self.step}/{self.config['max_steps']}"]
        if "reward/mean" in metrics:
            parts.append(f"reward {metrics['reward/mean']:.3f} ± {metrics.get('reward/std', 0.0):.3f}")
        if "accuracy" in metrics:
            parts.append(f"accuracy {metrics['accuracy']:.3f}")
        timings = {
            name: sum(metrics.get(f"time/{key}", 0.0) for key in keys)
            for name, keys in wire.STEP_TIME_PARTS.items()
        }
        spent = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in timings.items() if seconds > 0)
        parts.append(f"{metrics.get('step_time', 0.0):.1f} s" + (f" ({spent})" if spent else ""))
        self.log(f"{parts[0]}: {', '.join(parts[1:])}")

    # -- setup ---------------------------------------------------------------------------------

    def setup(self) -> None:
        if self._setup_done:
            return
        cfg = self.config
        if cfg["torch_threads"]:
            torch.set_num_threads(cfg["torch_threads"])
        random.seed(cfg["seed"])
        torch.manual_seed(cfg["seed"])
        from trainers.models import apply_lora, load_model, load_tokenizer, policy_precision, resolve_device

        self.device = resolve_device(cfg["device"])
        self.precision = policy_precision(cfg["dtype"], self.device)
        self.phase("loading", self.step, message=f"loading {cfg['model']}")
        model, tokenizer = self._model_override
        started = time.perf_counter()
        self.model = (
            model if model is not None else load_model(cfg["model"], self.device, self.precision.weights)
        )
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(cfg["model"])
        if cfg["lora"]["enabled"] and not checkpoint.is_peft_model(self.model):
            self.model = apply_lora(self.model, cfg["lora"])
        weights = next(self.model.parameters()).dtype
        autocast = self.precision.autocast_dtype
        self.log(
            f"loaded {cfg['model']} on {self.device} in {time.perf_counter() - started:.1f}s ({weights} "
            f"weights{f', passes under {autocast} autocast' if autocast is not None else ''})"
        )
        self.lora = checkpoint.is_peft_model(self.model)
        self.reference = None
        if cfg["kl_coef"] > 0 and not self.lora:
            # The policy's own precision (and autocast): the KL term starts at exactly 0.
            self.reference = copy.deepcopy(self.model).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        fused = self.device == "cpu" or self.device.startswith("cuda")
        self.optimizer = torch.optim.AdamW(
            self.params,
            lr=cfg["learning_rate"],
            weight_decay=cfg["weight_decay"],
            betas=(cfg["adam_beta1"], cfg["adam_beta2"]),
            fused=fused,
        )
        warmup = cfg["warmup_steps"]
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
        )
        self.chat = ChatFormat(self.tokenizer, resolve_tool_format(cfg["tool_format"], self.tokenizer))
        self.log(f"tool-call format: {self.chat.tool_format.name} (tool_format={cfg['tool_format']})")
        self.make_env = self._env_factory or self._registry_env_factory()
        self.rubric = self._rubric_override
        if self.rubric is not None and cfg["overlong_buffer"]:
            self.log(
                "overlong_buffer is ignored: a rubric object was passed in; add an overlong_penalty criterion "
                "to it instead",
                "warning",
            )
        spec = effective_rubric(cfg)
        if self.rubric is None and spec:
            from trainers.rubrics import build_rubric

            self.rubric = build_rubric(spec)
        probe = self.make_env()
        rounds = 1 + (cfg["dynamic_sampling_max_rounds"] if cfg["dynamic_sampling"] else 0)
        self.train_tasks = list(
            probe.tasks("train", cfg["max_steps"] * cfg["prompts_per_step"] * rounds, cfg["seed"])
        )
        self.eval_tasks = (
            list(probe.tasks("eval", cfg["eval_tasks"], cfg["seed"])) if cfg["eval_tasks"] else []
        )
        if not self.train_tasks:
            raise ValueError("the environment returned no training tasks")
        stop = getattr(probe, "stop", None)  # an environment may set its own stop strings (or none: ())
        self.stop = tuple(stop) if stop is not None else self.chat.tool_format.stop
        if hasattr(probe, "close"):
            probe.close()  # it only listed tasks: release what it holds (MCP sessions)
        self.registry = None
        if self.out_dir is not None:
            self.registry = checkpoint.CheckpointRegistry(
                self.out_dir / "checkpoints", cfg["keep_best_n"], cfg["best_metric"], cfg["best_metric_mode"]
            )
        if self.resume_from is not None:
            self._resume(self.resume_from)
        if cfg["num_learner_workers"] > 1:
            self.learner = self._make_learner()
        self.rollouts = self._make_rollouts()
        if isinstance(self.rollouts, LocalRollouts):
            self.rollouts.progress = self._generation_progress
        self._setup_done = True

    def _registry_env_factory(self) -> Callable[[], Any]:
        from trainers.registry import environment_kind

        spec = environment_kind(self.config["environment"]["kind"])
        env_config = dict(self.config["environment"].get("config") or {})
        return lambda: spec.build(env_config)

    def _make_rollouts(self) -> Any:
        cfg = self.config
        if cfg["num_rollout_workers"] > 0:
            from trainers.distributed import RayRollouts

            return RayRollouts(cfg, self.policy_state_dict, self.policy_version)
        from trainers.backends import make_backend

        if cfg["backend"] == "vllm":
            backend = make_backend(
                "vllm", model_name=cfg["model"], tokenizer=self.tokenizer, seed=cfg["seed"]
            )
            rollouts = LocalRollouts(backend, self.chat, self.make_env, cfg, self.stop, push_weights=True)
            if self.policy_version > 0 or self.lora:
                rollouts.update_weights(self.policy_state_dict, self.policy_version)
            return rollouts
        if cfg["generation_dtype"] == "auto":
            # Generation runs on the policy itself: nothing to copy, ever; under the learner's autocast, so
            # sampler and learner score tokens alike.
            backend = make_backend(
                "transformers", model=self.model, tokenizer=self.tokenizer, precision=self.precision
            )
            return LocalRollouts(backend, self.chat, self.make_env, cfg, self.stop, push_weights=False)
        from trainers.models import load_model

        sampler = load_model(cfg["model"], self.device, cfg["generation_dtype"]).eval()
        for p in sampler.parameters():
            p.requires_grad_(False)
        backend = make_backend("transformers", model=sampler, tokenizer=self.tokenizer)
        rollouts = LocalRollouts(backend, self.chat, self.make_env, cfg, self.stop, push_weights=True)
        rollouts.update_weights(self.policy_state_dict, self.policy_version)
        return rollouts

    def _make_learner(self) -> Any:
        from trainers.sharded import SHARDED_DIR, ShardedLearner

        cfg = self.config
        started = time.perf_counter()
        learner = ShardedLearner(cfg, self.model, self.device)
        self.log(
            f"sharded the policy over {cfg['num_learner_workers']} learner processes (FSDP2) "
            f"in {time.perf_counter() - started:.1f}s"
        )
        if self.resume_from is not None:
            if (self.resume_from / SHARDED_DIR).is_dir():
                learner.load(self.resume_from)
            else:
                self.log(
                    f"{self.resume_from} has no sharded optimizer state: the learner shards start "
                    "from its weights with fresh AdamW moments",
                    "warning",
                )
        return learner

    def _resume(self, path: Path) -> None:
        checkpoint.load_weights(path, self.model)
        checkpoint.load_optimizer(path, self.optimizer, self.scheduler)
        checkpoint.load_rng(path)
        state = checkpoint.load_trainer_state(path)
        self.step = int(state["step"])
        self.data_position = int(state["data_position"])
        self.policy_version = int(state["policy_version"])
        self.last_metrics = dict(state.get("metrics", {}))
        if self.reference is not None and state.get("reference") == "initial":
            log.info(
                "KL reference is the resumed weights' run's initial model only if resumed from the base model"
            )
        self.log(f"resumed from {path} at step {self.step}")

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """Weights generation needs: LoRA adapters merged into the base weights, or all weights."""
        if self.lora:
            from trainers.models import merged_state_dict

            return merged_state_dict(self.model)
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Train to `max_steps` (or until cancelled). Emits status events; re-raises failures."""
        self.emit("status", status="RUNNING", message="starting", traceback=None, step=self.step)
        checkpoint_path: str | None = None
        forwarder = LogForwarder(self.sink.emit)  # the worker's warnings reach the run's log
        logging.getLogger().addHandler(forwarder)
        try:
            self.setup()
            cfg = self.config
            if cfg["eval_tasks"] and self.step == 0:
                self.evaluate()
            while self.step < cfg["max_steps"]:
                if self._cancel_requested():
                    raise Cancelled()
                self._report_step(self.train_step())
                every = cfg["checkpoint_every"]
                if (
                    self.out_dir is not None
                    and every
                    and self.step % every == 0
                    and self.step < cfg["max_steps"]
                ):
                    checkpoint_path = self.save_checkpoint()
                if (
                    cfg["eval_tasks"]
                    and cfg["eval_every"]
                    and self.step % cfg["eval_every"] == 0
                    and self.step < cfg["max_steps"]
                ):
                    self.evaluate()
            if cfg["eval_tasks"]:
                self.evaluate()
            if self.out_dir is not None:
                checkpoint_path = self.save_checkpoint()
            self.emit(
                "status",
                status="SUCCEEDED",
                message=f"finished {self.step} steps",
                traceback=None,
                step=self.step,
            )
            return RunResult("SUCCEEDED", self.step, dict(self.last_metrics), checkpoint_path)
        except Cancelled:
            if self.out_dir is not None and self._setup_done and self.step > 0:
                checkpoint_path = self.save_checkpoint()
            self.emit(
                "status",
                status="CANCELLED",
                message=f"cancelled after step {self.step}",
                traceback=None,
                step=self.step,
            )
            return RunResult("CANCELLED", self.step, dict(self.last_metrics), checkpoint_path)
        except BaseException as exc:
            self.emit(
                "status",
                status="FAILED",
                message=f"{type(exc).__name__}: {exc}",
                traceback=traceback.format_exc(),
                step=self.step,
            )
            raise
        finally:
            logging.getLogger().removeHandler(forwarder)
            if self.rollouts is not None:
                self.rollouts.close()
            if self.learner is not None:
                self.learner.close()
            self.sink.flush()

    def _cancel_requested(self) -> bool:
        if self.cancel is not None and self.cancel():
            return True
        try:
            return bool(self.sink.control().get("cancel"))
        except Exception as exc:  # noqa: BLE001 — a broken control channel must not stop training
            log.warning("sink control failed: %r", exc)
            return False

    def _next_tasks(self, count: int) -> list[Any]:
        tasks = [self.train_tasks[(self.data_position + i) % len(self.train_tasks)] for i in range(count)]
        self.data_position += count
        return tasks

    def _seeds(self, count: int, group_size: int) -> list[list[int]]:
        base = self.config["seed"] * 7_777_777 + self.data_position * 1000
        return [[base + g * 100 + s for s in range(group_size)] for g in range(count)]

    def train_step(self) -> dict[str, float]:
        cfg = self.config
        started = time.perf_counter()
        timings: dict[str, float] = {"generate": 0.0, "score": 0.0}
        max_turns = max_turns_at(cfg, self.step)
        kept: list[list[Rollout]] = []
        generated: list[list[Rollout]] = []
        zero_variance = 0
        rounds = 0
        ahead = cfg["max_staleness"] if cfg["num_rollout_workers"] > 0 else 0
        while True:
            need = cfg["prompts_per_step"] - len(kept)
            self.phase(
                "generating",
                self.step + 1,
                total=need,
                message=f"{need} groups of {cfg['group_size']}" + (f", round {rounds + 1}" if rounds else ""),
            )
            t0 = time.perf_counter()
            if self._pending and rounds == 0:
                # Generated while earlier steps updated: at most `max_staleness` versions behind.
                groups = self.rollouts.collect(self._pending.pop(0)[1])
            else:
                seeds = self._seeds(need, cfg["group_size"])
                tasks = self._next_tasks(need)
                groups = self.rollouts.generate(
                    tasks,
                    seeds,
                    max_turns=max_turns,
                    generation_seed=seeds[0][0],
                    policy_version=self.policy_version,
                    first_group=len(generated),
                )
            if rounds == 0:
                # Keep `max_staleness` batches in flight: Ray runs an actor's calls in order, so a batch
                # submitted now is sampled by the current weights and trained on at most that many
                # updates later.
                upcoming = self.step + 1 + len(self._pending)
                while len(self._pending) < ahead and upcoming < cfg["max_steps"]:
                    position = self.data_position
                    seeds = self._seeds(cfg["prompts_per_step"], cfg["group_size"])
                    tasks = self._next_tasks(cfg["prompts_per_step"])
                    futures = self.rollouts.submit(
                        tasks,
                        seeds,
                        max_turns=max_turns_at(cfg, upcoming),
                        generation_seed=seeds[0][0],
                        policy_version=self.policy_version,
                    )
                    self._pending.append((position, futures))
                    upcoming += 1
            for group in groups:
                for r in group:
                    r.staleness = self.policy_version - r.policy_version
            timings["generate"] += time.perf_counter() - t0
            self.phase("scoring", self.step + 1, total=len(groups))
            t0 = time.perf_counter()
            for group in groups:
                self._score(group)
            timings["score"] += time.perf_counter() - t0
            generated += groups
            for group in groups:
                if algorithms.is_zero_variance([r.reward for r in group]):
                    zero_variance += 1
                    if cfg["dynamic_sampling"]:
                        continue
                kept.append(group)
            rounds += 1
            if (
                not cfg["dynamic_sampling"]
                or len(kept) >= cfg["prompts_per_step"]
                or rounds > cfg["dynamic_sampling_max_rounds"]
            ):
                break
        if cfg["dynamic_sampling"] and len(kept) < cfg["prompts_per_step"]:
            self.log(
                f"step {self.step + 1}: dynamic sampling found {len(kept)} of {cfg['prompts_per_step']} groups "
                f"with reward variance after {rounds} rounds",
                "warning",
            )

        advantages = algorithms.advantages(
            [[r.reward for r in g] for g in kept],
            cfg["algorithm"],
            cfg["scale_rewards"],
            cfg["advantage_epsilon"],
        )
        for group, group_adv in zip(kept, advantages, strict=True):
            steps = turn_credit.step_advantages([r.turn_rewards for r in group], cfg["advantage_epsilon"])
            for rollout, adv, turn_steps in zip(group, group_adv, steps, strict=True):
                rollout.advantage = float(adv)
                rollout.token_advantages = turn_credit.rollout_token_advantages(
                    rollout, turn_steps, cfg["turn_advantage_weight"]
                )
        if kept:
            self.phase("updating", self.step + 1, message=f"{sum(len(g) for g in kept)} samples")
        update = self.update([r for g in kept for r in g], timings) if kept else {}
        self.step += 1
        step_time = time.perf_counter() - started
        flat = [r for g in generated for r in g]
        model_tokens = sum(r.model_tokens for r in flat)
        metrics = {
            **self._reward_metrics(flat, ""),
            "zero_variance_fraction": zero_variance / max(len(generated), 1),
            "groups_kept": float(len(kept)),
            "sampling_rounds": float(rounds),
            "max_turns": float(max_turns),
            "policy_version": float(self.policy_version),
            "learning_rate": float(self.scheduler.get_last_lr()[0]),
            "step_time": step_time,
            "tokens_per_s": model_tokens / max(timings["generate"], 1e-9),
            **{f"time/{k}": v for k, v in timings.items()},
            **update,
        }
        dropped = {id(r) for g in generated for r in g} - {id(r) for g in kept for r in g}
        items = []
        for r in flat:
            item = r.to_item()
            if id(r) in dropped:
                item["dropped"] = True  # a zero-variance group removed by dynamic sampling
            items.append(item)
        self.emit("trajectories", step=self.step, items=items)
        self.emit("metrics", step=self.step, split="train", values=metrics)
        self.last_metrics.update(metrics)
        return metrics

    def _score(self, group: list[Rollout]) -> None:
        if self.rubric is not None:
            scores = self.rubric.score_group([r.trajectory for r in group])
            for r, score in zip(group, scores, strict=True):
                r.reward = float(score.total)
                r.components = [c.to_dict() for c in score.components]
                r.turn_rewards = dict(score.turn_rewards)
        else:
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

    def _reward_metrics(self, rollouts: list[Rollout], prefix: str) -> dict[str, float]:
        if not rollouts:
            return {}
        rewards = [r.reward for r in rollouts]
        mean = sum(rewards) / len(rewards)
        metrics = {
            f"{prefix}reward/mean": mean,
            f"{prefix}reward/std": algorithms._std(rewards),
            f"{prefix}reward/max": max(rewards),
            f"{prefix}env_reward/mean": sum(r.trajectory.env_reward for r in rollouts) / len(rollouts),
            f"{prefix}response_length": sum(r.model_tokens for r in rollouts) / len(rollouts),
            f"{prefix}turns": sum(
                sum(1 for t in r.trajectory.turns if t.role == "assistant") for r in rollouts
            )
            / len(rollouts),
            f"{prefix}tool_calls": sum(r.trajectory.tool_calls for r in rollouts) / len(rollouts),
            f"{prefix}truncated_fraction": sum(r.trajectory.status == "truncated" for r in rollouts)
            / len(rollouts),
            f"{prefix}error_fraction": sum(r.trajectory.status == "error" for r in rollouts) / len(rollouts),
        }
        correct = [r.trajectory.info.get("correct") for r in rollouts]
        # Tasks with an answer are graded: one that never answered (truncated) counts as wrong, so the
        # accuracy curve has no gaps when a whole batch runs out of turns.
        if any(c is not None for c in correct) or any(r.task.answer is not None for r in rollouts):
            metrics[f"{prefix}accuracy"] = sum(bool(c) for c in correct) / len(rollouts)
        criteria: dict[str, list[tuple[float, float]]] = {}
        for r in rollouts:
            for c in r.components:
                criteria.setdefault(c["name"], []).append(
                    (float(c.get("raw", 0.0)), float(c.get("weighted", 0.0)))
                )
        for name, values in criteria.items():
            metrics[f"{prefix}criterion/{name}"] = sum(v[0] for v in values) / len(values)
            metrics[f"{prefix}criterion/{name}/weighted"] = sum(v[1] for v in values) / len(values)
        return metrics

    # -- the update ----------------------------------------------------------------------------

    def _loss_mask(self, r: Rollout) -> list[int]:
        cfg = self.config
        if cfg["mask_truncated"] and r.trajectory.status == "truncated":
            return [0] * len(r.completion_ids)
        return list(r.loss_mask) if cfg["mask_tool_tokens"] else [1] * len(r.completion_ids)

    def _update_plan(
        self, rollouts: list[Rollout]
    ) -> tuple[list[list[int]], float, float, float, list[int], list[list[int]]]:
        """What one update trains, the same for the single process and the learner shards (their sums must
        add up to one step): the loss masks, the loss normalisers (tokens, sequences, the constant), the
        rows with a gradient and their micro-batches."""
        cfg = self.config
        masks = [self._loss_mask(r) for r in rollouts]
        num_tokens = float(sum(sum(m) for m in masks))
        num_sequences = float(sum(1 for m in masks if any(m)))
        norm_constant = cfg["loss_norm_constant"] or cfg["max_new_tokens"] * max(
            max_turns_at(cfg, self.step), 1
        )
        # Exactly-zero advantages with no KL term: the loss and its gradient are exactly 0 there.
        active = [
            i for i, r in enumerate(rollouts) if any(masks[i]) and (r.has_signal() or cfg["kl_coef"] > 0)
        ]
        chunks = [c for c in _split(active, cfg["grad_accum_steps"]) if c]
        return masks, num_tokens, num_sequences, norm_constant, active, chunks

    def update(self, rollouts: list[Rollout], timings: dict[str, float]) -> dict[str, float]:
        if self.learner is not None:
            return self._sharded_update(rollouts, timings)
        cfg = self.config
        masks, num_tokens, num_sequences, norm_constant, active, chunks = self._update_plan(rollouts)
        # Bounded async: the batch may come from an older policy; weight each token by the truncated
        # importance ratio π_learner / π_behaviour (TIS). The clip stays around the learner's own
        # log-probs at the start of the update (the proximal policy), as in decoupled PPO.
        correct = cfg["max_staleness"] > 0 and cfg["num_rollout_workers"] > 0 and cfg["tis_cap"] > 0
        mismatch = {"sum": 0.0, "tokens": 0.0, "weight": 0.0}
        old_logps: dict[int, torch.Tensor] = {}
        timings.setdefault("forward", 0.0)
        timings.setdefault("backward", 0.0)
        timings.setdefault("optimizer", 0.0)
        totals = {
            "loss": 0.0,
            "clipped": 0.0,
            "tokens": 0.0,
            "kl": 0.0,
            "entropy": 0.0,
            "ratio": 0.0,
            "grad_norm": 0.0,
        }
        self.model.train()
        for epoch in range(cfg["updates_per_batch"]):
            self.optimizer.zero_grad(set_to_none=False)
            # Zero tensors, not None: a step without signal still steps AdamW (moments, weight decay)
            # exactly as other trainers do, so step counts and bias corrections stay aligned.
            for p in self.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            for c, chunk in enumerate(chunks):
                batch = [rollouts[i] for i in chunk]
                batch_masks = [masks[i] for i in chunk]
                t0 = time.perf_counter()
                # Autocast around the forward only: the backward pass reruns each op in the dtype its
                # forward chose, and the loss arithmetic stays in fp32.
                with self.precision.autocast():
                    logp, mask, entropy = completion_logprobs(
                        self.model, batch, batch_masks, cfg["temperature"], with_entropy=epoch == 0
                    )
                if cfg["updates_per_batch"] == 1:
                    old = logp.detach()
                else:
                    if c not in old_logps:
                        old_logps[c] = logp.detach()
                    old = old_logps[c]
                is_weights = None
                if epoch == 0 or correct:
                    behaviour = _pad([r.behaviour_logprobs for r in batch], logp.shape[1], logp.device)
                    if epoch == 0:
                        mismatch["sum"] += float(((old - behaviour).abs() * mask).sum())
                        mismatch["tokens"] += float(mask.sum())
                    if correct:
                        is_weights = truncated_importance_weights(old, behaviour, mask, cfg["tis_cap"])
                        if epoch == 0:
                            mismatch["weight"] += float((is_weights * mask).sum())
                ref = None
                if cfg["kl_coef"] > 0:
                    ref = self._reference_logprobs(batch, batch_masks)
                adv = turn_credit.advantage_tensor(
                    [r.advantage for r in batch],
                    [r.token_advantages for r in batch],
                    logp.shape[1],
                    logp.device,
                )
                loss, stats = policy_loss(
                    logp,
                    old,
                    adv,
                    mask,
                    cfg["clip_low"],
                    cfg["clip_high"],
                    cfg["loss_agg"],
                    ref_logp=ref,
                    kl_coef=cfg["kl_coef"],
                    is_weights=is_weights,
                    num_sequences=num_sequences,
                    num_tokens=num_tokens,
                    norm_constant=norm_constant,
                )
                t1 = time.perf_counter()
                loss.backward()
                t2 = time.perf_counter()
                timings["forward"] += t1 - t0
                timings["backward"] += t2 - t1
                if epoch == 0:
                    totals["entropy"] += entropy
                totals["loss"] += float(loss.detach())
                totals["clipped"] += stats.clipped_tokens
                totals["tokens"] += stats.tokens
                totals["kl"] += stats.kl_sum
                totals["ratio"] += stats.ratio_sum
            t0 = time.perf_counter()
            if cfg["max_grad_norm"] > 0:
                totals["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.params, cfg["max_grad_norm"]))
            self.optimizer.step()
            self.scheduler.step()
            timings["optimizer"] += time.perf_counter() - t0
        self.model.eval()
        self.policy_version += 1
        self.phase("syncing", self.step + 1)
        t0 = time.perf_counter()
        self.rollouts.update_weights(self.policy_state_dict, self.policy_version)
        timings["weight_sync"] = time.perf_counter() - t0
        active_tokens = max(totals["tokens"], 1.0)
        epochs = cfg["updates_per_batch"]
        advs = [r.advantage for r in rollouts]
        return {
            "loss": totals["loss"] / epochs,
            "clip_fraction": totals["clipped"] / active_tokens,
            "kl": totals["kl"] / active_tokens,
            "ratio_mean": totals["ratio"] / active_tokens,
            "entropy": totals["entropy"] / max(sum(sum(masks[i]) for i in active), 1),
            "grad_norm": totals["grad_norm"],
            "advantage/mean": sum(advs) / len(advs),
            "advantage/abs_mean": sum(abs(a) for a in advs) / len(advs),
            "loss_tokens": num_tokens,
            "trained_sequences": float(len(active)),
            **self._async_metrics(rollouts, mismatch, correct),
        }

    def _async_metrics(self, rollouts: list[Rollout], mismatch: dict[str, float], corrected: bool) -> dict:
        """How far behind the learner the batch was sampled, and how much the sampler's log-probs differ
        from the learner's on the trained tokens (mean |log π_learner − log π_behaviour|, the gap AReaL
        and NeMo-RL report; non-zero even when synchronous, from numerics and a different backend)."""
        staleness = [r.staleness for r in rollouts]
        metrics = {
            "staleness/mean": sum(staleness) / max(len(staleness), 1),
            "staleness/max": float(max(staleness, default=0)),
        }
        if mismatch["tokens"]:
            metrics["logprob_mismatch/mean"] = mismatch["sum"] / mismatch["tokens"]
            if corrected:
                metrics["is_weight/mean"] = mismatch["weight"] / mismatch["tokens"]
        return metrics

    def _sharded_update(self, rollouts: list[Rollout], timings: dict[str, float]) -> dict[str, float]:
        """`update` on the learner shards (trainers/sharded.py): the same rows, normalisers and learning
        rate; the shards' sums add up to the single-process step's. Their wall time is reported as
        `time/forward` (forward, backward and optimizer run remotely, together)."""
        from trainers.sharded import sample_payload, split_rows

        cfg = self.config
        masks, num_tokens, num_sequences, norm_constant, active, chunks = self._update_plan(rollouts)
        refs: dict[int, list[float]] = {}
        if cfg["kl_coef"] > 0:
            for chunk in chunks:
                ref = self._reference_logprobs([rollouts[i] for i in chunk], [masks[i] for i in chunk])
                refs.update({i: ref[j].tolist() for j, i in enumerate(chunk)})
        correct = cfg["max_staleness"] > 0 and cfg["num_rollout_workers"] > 0 and cfg["tis_cap"] > 0
        lr = self.scheduler.get_last_lr()[0]
        payloads = [
            {
                "chunks": [
                    [sample_payload(rollouts[i], masks[i], refs.get(i)) for i in rows] for rows in mine
                ],
                "num_tokens": num_tokens,
                "num_sequences": num_sequences,
                "norm_constant": norm_constant,
                "correct": correct,
                "lr": lr,
            }
            for mine in split_rows(chunks, cfg["num_learner_workers"])
        ]
        t0 = time.perf_counter()
        parts = self.learner.learn(payloads)
        with warnings.catch_warnings():  # the driver's optimizer only carries the schedule: it never steps
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)`")
            for _ in range(cfg["updates_per_batch"]):
                self.scheduler.step()
        timings["forward"] = timings.get("forward", 0.0) + time.perf_counter() - t0
        totals = {key: sum(p[key] for p in parts) for key in parts[0]}
        self.policy_version += 1
        self.phase("syncing", self.step + 1)
        t0 = time.perf_counter()
        state = self.learner.full_state_dict()
        with torch.no_grad():
            for name, tensor in self.model.state_dict().items():
                if name in state:
                    tensor.copy_(state[name])
        self.rollouts.update_weights(self.policy_state_dict, self.policy_version)
        timings["weight_sync"] = time.perf_counter() - t0
        active_tokens = max(totals["tokens"], 1.0)
        advs = [r.advantage for r in rollouts]
        return {
            "loss": totals["loss"] / cfg["updates_per_batch"],
            "clip_fraction": totals["clipped"] / active_tokens,
            "kl": totals["kl"] / active_tokens,
            "ratio_mean": totals["ratio"] / active_tokens,
            "entropy": totals["entropy"] / max(sum(sum(masks[i]) for i in active), 1),
            "grad_norm": parts[0]["grad_norm"],
            "advantage/mean": sum(advs) / len(advs),
            "advantage/abs_mean": sum(abs(a) for a in advs) / len(advs),
            "loss_tokens": num_tokens,
            "trained_sequences": float(len(active)),
            **self._async_metrics(
                rollouts,
                {"sum": totals["mm_sum"], "tokens": totals["mm_tokens"], "weight": totals["mm_w"]},
                correct,
            ),
        }

    @torch.no_grad()
    def _reference_logprobs(self, batch: list[Rollout], masks: list[list[int]]) -> torch.Tensor:
        with self.precision.autocast():
            if self.lora:
                with self.model.disable_adapter():
                    return completion_logprobs(self.model, batch, masks, self.config["temperature"])[0]
            return completion_logprobs(self.reference, batch, masks, self.config["temperature"])[0]

    # -- evaluation and checkpoints ------------------------------------------------------------

    def evaluate(self) -> dict[str, float]:
        """Score the fixed held-out tasks (fixed seeds, eval temperature) with the current policy."""
        cfg = self.config
        self.setup()
        started = time.perf_counter()
        self.phase(
            "evaluating",
            self.step,
            total=len(self.eval_tasks),
            message=f"{len(self.eval_tasks)} held-out tasks",
        )
        seeds = [[cfg["seed"] * 7_777_777 + EVAL_SEED_OFFSET + i] for i in range(len(self.eval_tasks))]
        groups = self.rollouts.generate(
            self.eval_tasks,
            seeds,
            max_turns=max_turns_at(cfg, self.step),
            generation_seed=cfg["seed"] + EVAL_SEED_OFFSET,
            policy_version=self.policy_version,
            temperature=cfg["eval_temperature"],
            split="eval",
        )
        for group in groups:
            self._score(group)
        flat = [r for g in groups for r in g]
        metrics = self._reward_metrics(flat, "eval/")
        metrics["eval/time"] = time.perf_counter() - started
        self.emit("trajectories", step=self.step, items=[r.to_item() for r in flat])
        self.emit("metrics", step=self.step, split="eval", values=metrics)
        self.last_metrics.update(metrics)
        return metrics

    def _save_shards(self, directory: Path) -> None:
        self.learner.save(directory)

    def save_checkpoint(self) -> str:
        assert self.out_dir is not None and self.registry is not None
        self.phase("checkpointing", self.step)
        path = self.registry.path_for(self.step)
        metrics = {
            k: v for k, v in self.last_metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)
        }
        # A batch already generating for the next step is not trained on yet: resume regenerates it.
        position = self._pending[0][0] if self._pending else self.data_position
        state = {
            "step": self.step,
            "data_position": position,
            "policy_version": self.policy_version,
            "metrics": metrics,
        }
        checkpoint.save_checkpoint(
            path,
            model=self.model,
            tokenizer=self.tokenizer,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            trainer_state=state,
            run_config=self.config,
            extra=self._save_shards if self.learner is not None else None,
        )
        removed = self.registry.add(self.step, path, metrics)
        kind = "adapter" if self.lora else "full"
        self.emit("checkpoint", step=self.step, path=str(path), metrics=metrics, kind=kind)
        for old in removed:
            self.log(
                f"removed checkpoint {old} (keep_best_n={self.config['keep_best_n']} by {self.config['best_metric']})",
                "debug",
            )
        return str(path)


def _split(items: list[int], parts: int) -> list[list[int]]:
    size = math.ceil(len(items) / max(parts, 1)) if items else 0
    return [items[i : i + size] for i in range(0, len(items), size)] if size else []


def _pad(rows: list[list[float]], width: int, device: Any) -> torch.Tensor:
    out = torch.zeros((len(rows), width), device=device)
    for i, row in enumerate(rows):
        if row:
            out[i, : len(row)] = torch.tensor(row[:width], device=device)
    return out


def train(config: dict[str, Any], **kwargs: Any) -> RunResult:
    """Build a Trainer and run it (see Trainer for the keyword arguments)."""
    return Trainer(config, **kwargs).run()
