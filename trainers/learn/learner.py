"""The policy being trained and its update: the model (full fine-tuning or LoRA), the KL reference, AdamW
and its schedule, and one update per step — in this process (`learner_step` over micro-batches whose
log-probs share each group's prompt pass) or on the learner shards (`num_learner_workers` > 1: the same
step on each shard's rows, `trainers.learn.sharded`).

Where the CPU time goes: log-probabilities are computed only where the loss needs them (the decoder runs
over each group's shared prompt once, then over the completions; the LM head and log-softmax only at
model-sampled positions); completions whose advantage is exactly 0 (and no KL term) contribute exactly
zero gradient and are skipped, while still counting in the loss normaliser; with one update per batch,
the "old" log-probs are the current ones detached (no extra pass).
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from trainers.learn import branch_credit, checkpoint, turn_credit
from trainers.learn.losses import completion_logprob_parts, completion_logprobs
from trainers.learn.metrics import UpdateTotals, update_metrics
from trainers.learn.step import MicroBatch, UpdatePlan, corrects_staleness, learner_step, plan_update
from trainers.parts import build_part
from trainers.run_config import RunConfig


def assign_advantages(groups: Sequence[Sequence[Any]], config: RunConfig, estimator: Any = None) -> None:
    """Each trained rollout's advantage (the run's estimator over its group: `estimator`, or the one the
    config's `algorithm` names, `trainers.parts`) and, with per-turn rewards, its per-token advantages
    (`trainers.learn.turn_credit`); with branching rollouts' hard attribution, a shared prefix's tokens get
    the mean advantage of the rollouts that share it."""
    estimator = estimator if estimator is not None else build_part("advantage_estimator", config)
    advantages = estimator.advantages([[r.reward for r in g] for g in groups])
    for group, group_adv in zip(groups, advantages, strict=True):
        steps = turn_credit.step_advantages([r.turn_rewards for r in group], config.advantage_epsilon)
        for rollout, adv, turn_steps in zip(group, group_adv, steps, strict=True):
            rollout.advantage = float(adv)
            rollout.token_advantages = turn_credit.rollout_token_advantages(
                rollout, turn_steps, config.turn_advantage_weight
            )
        if config.branch_attribution == "hard":  # a branched group's shared prefix
            branch_credit.hard_token_advantages(group)


class Learner:
    """Loads the policy (`model`, or the one given) and builds what trains it."""

    def __init__(
        self, config: RunConfig, *, model: Any = None, tokenizer: Any = None, log: Callable[[str], None]
    ) -> None:
        from trainers.models import apply_lora, load_model, load_tokenizer, policy_precision, resolve_device

        cfg = self.config = RunConfig.build(config)  # (a test's plain dict too)
        self.device = resolve_device(cfg.device)
        self.precision = policy_precision(cfg.dtype, self.device)
        started = time.perf_counter()
        self.model = (
            model if model is not None else load_model(cfg.model, self.device, self.precision.weights)
        )
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(cfg.model)
        if cfg.lora.enabled and not checkpoint.is_peft_model(self.model):
            self.model = apply_lora(self.model, cfg.lora.as_dict())
        weights = next(self.model.parameters()).dtype
        autocast = self.precision.autocast_dtype
        log(
            f"loaded {cfg.model} on {self.device} in {time.perf_counter() - started:.1f}s ({weights} "
            f"weights{f', passes under {autocast} autocast' if autocast is not None else ''})"
        )
        self.lora = checkpoint.is_peft_model(self.model)
        self.reference = None
        if cfg.kl_coef > 0 and not self.lora:
            # The policy's own precision (and autocast): the KL term starts at exactly 0.
            self.reference = copy.deepcopy(self.model).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        fused = self.device == "cpu" or self.device.startswith("cuda")
        self.optimizer = torch.optim.AdamW(
            self.params,
            lr=cfg.learning_rate,
            weight_decay=cfg.weight_decay,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            fused=fused,
        )
        warmup = cfg.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
        )
        self.shards: Any = None  # trainers.learn.sharded.ShardedLearner when num_learner_workers > 1
        # trainers.learn.token_stats.Recorder when the run reports token statistics
        self.recorder: Any = None

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def shard(self, resume_from: Path | None, log: Callable[..., None]) -> None:
        """Hand the training to `num_learner_workers` shards (FSDP2); this process keeps a full copy."""
        from trainers.learn.sharded import SHARDED_DIR, ShardedLearner

        cfg = self.config
        started = time.perf_counter()
        self.shards = ShardedLearner(cfg, self.model, self.device)
        log(
            f"sharded the policy over {cfg.num_learner_workers} learner processes (FSDP2) "
            f"in {time.perf_counter() - started:.1f}s"
        )
        if resume_from is not None:
            if (resume_from / SHARDED_DIR).is_dir():
                self.shards.load(resume_from)
            else:
                log(
                    f"{resume_from} has no sharded optimizer state: the learner shards start "
                    "from its weights with fresh AdamW moments",
                    "warning",
                )

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """Weights generation needs: LoRA adapters merged into the base weights, or all weights."""
        if self.lora:
            from trainers.models import merged_state_dict

            return merged_state_dict(self.model)
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    @property
    def learning_rate(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def update(self, rollouts: list[Any], timings: dict[str, float], *, step: int) -> dict[str, float]:
        """One update on `rollouts` (advantages assigned); its metrics. The sharded update's wall time is
        reported as `time/forward` (forward, backward and optimizer run remotely, together)."""
        cfg = self.config
        plan = plan_update(cfg, rollouts, step)
        corrected = corrects_staleness(cfg)
        if self.shards is not None:
            totals = self._sharded_update(rollouts, plan, corrected, timings)
        else:
            self.model.train()
            micro_batches = [
                self._micro_batch([rollouts[i] for i in c], [plan.masks[i] for i in c]) for c in plan.chunks
            ]
            totals = learner_step(
                micro_batches,
                config=cfg,
                params=self.params,
                optimizer=self.optimizer,
                precision=self.precision,
                plan=plan,
                corrected=corrected,
                after_optimizer_step=self.scheduler.step,
                timings=timings,
            )
            # The gradients' memory (as much as the fp32 weights) goes back until the next update, which
            # zeroes them again before its first pass: generation and evaluation run without it.
            self.optimizer.zero_grad(set_to_none=True)
            self.model.eval()
        return update_metrics(
            totals,
            epochs=cfg.updates_per_batch,
            trained_tokens=plan.trained_tokens,
            loss_tokens=plan.num_tokens,
            trained_sequences=len(plan.active),
            advantages=[r.advantage for r in rollouts],
            staleness=[r.staleness for r in rollouts],
            corrected=corrected,
        )

    def _micro_batch(self, batch: list[Any], masks: list[list[int]]) -> MicroBatch:
        """A micro-batch in parts of at most `micro_batch_tokens` completion tokens of one prompt's samples,
        the prompt encoded once for all of them (`completion_logprob_parts`)."""
        temperature, max_tokens = self.config.temperature, self.config.micro_batch_tokens
        return MicroBatch(
            parts=lambda with_entropy, autocast, backward_seconds: completion_logprob_parts(
                self.model,
                batch,
                masks,
                temperature,
                with_entropy=with_entropy,
                max_tokens=max_tokens,
                backward_seconds=backward_seconds,
                autocast=autocast,
                recompute=self.config.activation_checkpointing,
            ),
            behaviour=[r.behaviour_logprobs for r in batch],
            advantages=[r.advantage for r in batch],
            token_advantages=[r.token_advantages for r in batch],
            reference=lambda rows, width, device: self.reference_logprobs(
                [batch[j] for j in rows], [masks[j] for j in rows]
            ),
            record=self.recorder.hook(batch) if self.recorder is not None else None,
        )

    def _sharded_update(
        self, rollouts: list[Any], plan: UpdatePlan, corrected: bool, timings: dict[str, float]
    ) -> UpdateTotals:
        from trainers.learn.sharded import sample_payload, split_rows

        cfg = self.config
        refs: dict[int, list[float]] = {}
        if cfg.kl_coef > 0:
            for chunk in plan.chunks:
                ref = self.reference_logprobs([rollouts[i] for i in chunk], [plan.masks[i] for i in chunk])
                refs.update({i: ref[j].tolist() for j, i in enumerate(chunk)})
        payloads = [
            {
                "chunks": [
                    [sample_payload(rollouts[i], plan.masks[i], refs.get(i)) for i in rows] for rows in mine
                ],
                "num_tokens": plan.num_tokens,
                "num_sequences": plan.num_sequences,
                "norm_constant": plan.norm_constant,
                "correct": corrected,
                "lr": self.learning_rate,
            }
            for mine in split_rows(plan.chunks, cfg.num_learner_workers)
        ]
        t0 = time.perf_counter()
        parts = self.shards.learn(payloads)
        with warnings.catch_warnings():  # this process's optimizer only carries the schedule: it never steps
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)`")
            for _ in range(cfg.updates_per_batch):
                self.scheduler.step()
        timings["forward"] = timings.get("forward", 0.0) + time.perf_counter() - t0
        return UpdateTotals.combined(parts)

    def gather_weights(self) -> None:
        """After a sharded update: the shards' full weights into this process's copy (generation reads it)."""
        if self.shards is None:
            return
        state = self.shards.full_state_dict()
        with torch.no_grad():
            for name, tensor in self.model.state_dict().items():
                if name in state:
                    tensor.copy_(state[name])

    @torch.no_grad()
    def reference_logprobs(self, batch: list[Any], masks: list[list[int]]) -> torch.Tensor:
        with self.precision.autocast():
            if self.lora:
                with self.model.disable_adapter():
                    return completion_logprobs(self.model, batch, masks, self.config.temperature)[0]
            return completion_logprobs(self.reference, batch, masks, self.config.temperature)[0]

    def close(self) -> None:
        if self.shards is not None:
            self.shards.close()
