"""DPO on a preference dataset, on our learner's parts (no TRL at run time).

A DPO run trains the policy directly on preference pairs — no reward model in between. The pairs are
rows in TRL's preference format, conversational (`prompt` as chat messages, `chosen` / `rejected` as
the assistant's messages, tool calls and results included) or plain text; the dashboard hands the rows
of a preference snapshot (`webapp.review.exports.dpo_records`), a script may hand any JSONL it has.

    from trainers.recipes.dpo import train_dpo
    result = train_dpo(rows, {"max_steps": 20, "beta": 0.1}, out_dir="runs/dpo", sink=sink)

Why it is lean (docs/trainers.md has the figures against TRL's DPOTrainer, bench/dpo_vs_trl.py):
- LoRA by default, as the demo's GRPO; the reference policy is the same weights with the adapter
  disabled, and its log-probs are computed once per pair before the first step (with full fine-tuning
  too, from the starting weights): no second copy of the model, ever;
- the start all of a batch's prompts share (a snapshot's system prompt) runs through the decoder once
  per batch, each pair's rest of its prompt once per response, and the LM head with its log-softmax
  only at the responses' tokens (`trainers.learn.losses.completion_logprob_parts`, the GRPO learner's
  part); whole pairs share a pass of at most `micro_batch_tokens` tokens, whose loss is taken backward
  before the next pass, so the activations held at once are one pass's, whatever the batch.
The loss is TRL's (`dpo_losses`, tested against TRL's DPOTrainer on the same batch: loss and gradients).

Everything the run page shows goes out through the run's `EventSink` as a GRPO run's does
(`trainers.learn.run_events.RunEvents`): the phase line with its progress (tokenizing n of m pairs, the
reference log-probs, step i with its pairs done, evaluation, checkpoint), one log line and one metrics
event per step (loss, reward margin, preference accuracy), the held-out pairs' evaluation, checkpoints
(`trainers.learn.checkpoint`: a model directory another run can start from, and exact resume).

Its parts: the knobs, the rows and their split in `trainers.learn.dpo` (`DPO_SCHEMA`, no torch, is what
the dashboard's form and API validate), a pair's arithmetic in `trainers.learn.pairs`; `train_dpo`
imports torch only when called.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.learn.dpo import (
    dpo_config,
    held_out_split,
    preference_rows,
)
from trainers.learn.pairs import (
    PairTokens,
    batch_at,
    dpo_losses,
    pair_logprobs,
    pair_metrics,
    tokenize_pair,
)

log = logging.getLogger(__name__)


@dataclass
class DPOResult:
    out_dir: Path
    steps: int
    cancelled: bool
    metrics: dict[str, float] = field(default_factory=dict)  # the last values, the run page's names
    checkpoints: list[str] = field(default_factory=list)
    status: str = "SUCCEEDED"


class _Progress:
    """The phase line's progress within one phase: at its start, then at most about once a second (and at
    its end), so the page moves while a phase computes."""

    def __init__(self, events: Any, phase: str, step: int, total: int, words: Callable[[int], str]) -> None:
        self.events, self.phase, self.step, self.total, self.words = events, phase, step, total, words
        self.last = time.perf_counter()
        events.phase(phase, step, done=0, total=total, message=words(0))

    def __call__(self, done: int) -> None:
        now = time.perf_counter()
        if now - self.last >= 1.0 or done >= self.total:
            self.last = now
            self.events.phase(self.phase, self.step, done=done, total=self.total, message=self.words(done))


def train_dpo(
    records: Sequence[Mapping[str, Any]],
    config: Mapping[str, Any] | None = None,
    *,
    out_dir: str | Path,
    sink: Any = None,
    resume_from: str | Path | None = None,
    cancel: Callable[[], bool] | None = None,
    model: Any = None,
    tokenizer: Any = None,
) -> DPOResult:
    """Train the policy on `records`; checkpoints under `out_dir/checkpoints`; everything the run page shows
    through `sink`, status events included (RUNNING, then SUCCEEDED, CANCELLED or FAILED, as a GRPO run).

    `resume_from`: a checkpoint of an earlier run on the same data and config (weights, optimizer,
    schedule, RNG and data position are restored, and training continues at its step). `cancel` (and the
    sink's control channel) stop the run at the next pair, with a checkpoint of what it trained.
    `model` / `tokenizer`: an already loaded policy (tests, notebooks) instead of the config's `model`."""
    from trainers.learn.run_events import RunEvents
    from trainers.sdk.cancel import Cancelled, cancellable
    from trainers.sdk.events import LogForwarder, NullSink

    knobs = dpo_config(config)
    rows, held_rows = held_out_split(preference_rows(records), knobs["eval_fraction"])
    events = RunEvents(sink or NullSink())

    def cancel_requested() -> bool:
        if cancel is not None and cancel():
            return True
        try:
            return bool(events.sink.control().get("cancel"))
        except Exception as exc:  # noqa: BLE001 — a broken control channel must not stop training
            log.warning("sink control failed: %r", exc)
            return False

    events.emit("status", status="RUNNING", message="starting", traceback=None, step=0)
    forwarder = LogForwarder(events.sink.emit, progress=events.library_progress)
    logging.getLogger().addHandler(forwarder)
    run: DPORun | None = None
    try:
        with cancellable(cancel_requested):
            run = DPORun(knobs, rows, held_rows, Path(out_dir), events, model=model, tokenizer=tokenizer)
            run.train(resume_from)
        status, message = "SUCCEEDED", f"finished {run.step} steps"
    except Cancelled:
        if run is not None and run.step > 0:
            run.save()
        status, message = "CANCELLED", f"cancelled after step {run.step if run else 0}"
        events.log(f"{message}: the run stopped on the dashboard's request", "warning")
    except BaseException as exc:
        import traceback

        message, trace = f"{type(exc).__name__}: {exc}", traceback.format_exc()
        events.emit("status", status="FAILED", message=message, traceback=trace, step=run.step if run else 0)
        raise
    finally:
        logging.getLogger().removeHandler(forwarder)
        forwarder.close()
    assert run is not None
    events.emit("status", status=status, message=message, traceback=None, step=run.step)
    events.sink.flush()
    return DPOResult(Path(out_dir), run.step, status == "CANCELLED", run.metrics, run.saved, status)


class DPORun:
    """One DPO run: the policy and its optimizer, the tokenized pairs with the reference's log-probs, and
    the run's position. `train` is the run top to bottom."""

    def __init__(
        self,
        knobs: dict[str, Any],
        rows: list[dict[str, Any]],
        held_rows: list[dict[str, Any]],
        out: Path,
        events: Any,
        *,
        model: Any = None,
        tokenizer: Any = None,
    ) -> None:
        import torch

        from trainers.learn import checkpoint
        from trainers.models import apply_lora, load_model, load_tokenizer, policy_precision, resolve_device

        self.knobs, self.events = knobs, events
        self.step, self.position = 0, 0
        self.metrics: dict[str, float] = {}
        self.saved: list[str] = []
        torch.manual_seed(knobs["seed"])
        # The policy: its full weights, then fresh adapters (LoRA); the reference is them with adapters off.
        events.phase("loading", 0, message=f"loading {knobs['model']}")
        started = time.perf_counter()
        device = resolve_device(knobs["device"])
        self.precision = policy_precision("auto", device)
        model = model if model is not None else load_model(knobs["model"], device, self.precision.weights)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(knobs["model"])
        if knobs["lora_r"] > 0 and not checkpoint.is_peft_model(model):
            model = apply_lora(model, {"r": knobs["lora_r"], "alpha": knobs["lora_alpha"], "dropout": 0.0})
        self.model, self.lora = model, checkpoint.is_peft_model(model)
        self.params = [p for p in model.parameters() if p.requires_grad]
        events.log(
            f"loaded {knobs['model']} on {device} in {time.perf_counter() - started:.1f}s "
            f"({'LoRA rank ' + str(knobs['lora_r']) if self.lora else 'full fine-tuning'}, "
            f"{sum(p.numel() for p in self.params) / 1e6:.2f}M trained parameters)"
        )
        everything = rows + held_rows
        tokenizing = _Progress(
            events, "loading", 0, len(everything), lambda n: f"tokenizing {n} of {len(everything)} pairs"
        )
        pairs: list[PairTokens] = []
        for n, row in enumerate(everything, 1):
            pairs.append(tokenize_pair(row, self.tokenizer, knobs["max_length"]))
            tokenizing(n)
        self.pairs, self.train_count = pairs, len(rows)
        self.lengths = torch.tensor(
            [[len(p.chosen_ids), len(p.rejected_ids)] for p in pairs], dtype=torch.float32
        )
        self.optimizer = torch.optim.AdamW(
            self.params, lr=knobs["learning_rate"], weight_decay=0.0, fused=device == "cpu"
        )
        steps = knobs["max_steps"]
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: max(0.0, 1 - s / steps))
        self.checkpoints = checkpoint.RunCheckpoints(
            out, {**knobs, "keep_best_n": 0, "best_metric": "eval/dpo/accuracy", "best_metric_mode": "max"}
        )
        self.shards = None  # what RunCheckpoints asks of a learner

    def train(self, resume_from: str | Path | None) -> None:
        """The reference's log-probs, the starting policy's evaluation, the steps with their evaluations
        and checkpoints, the last ones."""
        from trainers.learn import checkpoint
        from trainers.sdk.cancel import check_cancel

        knobs, held = self.knobs, len(self.pairs) - self.train_count
        self.events.log(
            f"DPO on {self.train_count} pairs ({held} held out), {knobs['max_steps']} steps of "
            f"{self.pairs_per_step} pairs, {knobs['loss_type']} loss, beta {knobs['beta']}"
        )
        self.reference_logprobs()  # of the starting policy: before a resume loads the trained weights
        if resume_from is not None:
            resumed = checkpoint.resume(Path(resume_from), self)
            self.step, self.position = int(resumed["step"]), int(resumed["data_position"])
            self.metrics.update(resumed.get("metrics") or {})
            self.events.log(f"resumed from {resume_from} at step {self.step}")
        if self.step == 0:
            self.evaluate()  # before the first step: the starting policy's held-out accuracy and margin
        every = knobs["save_every"]
        while self.step < knobs["max_steps"]:
            check_cancel()
            self.train_step()
            if every and self.step % every == 0 and self.step < knobs["max_steps"]:
                self.evaluate()
                self.save()
        self.evaluate()
        self.save()

    @property
    def pairs_per_step(self) -> int:
        return int(self.knobs["batch_size"] * self.knobs["gradient_accumulation_steps"])

    def reference_logprobs(self) -> None:
        """Each pair's log-probs under the reference, once: the starting policy (with LoRA, its adapters off)."""
        import torch

        total = len(self.pairs)
        scoring = _Progress(
            self.events, "scoring", 0, total, lambda n: f"reference log-probs: {n} of {total} pairs"
        )
        self.model.eval()
        with torch.no_grad(), self.model.disable_adapter() if self.lora else nullcontext():
            self.ref_chosen, self.ref_rejected = self.logprobs(self.pairs, progress=scoring)

    def logprobs(self, pairs: list[PairTokens], **options: Any) -> tuple[Any, Any]:
        """`pair_logprobs` of some pairs under the policy as it is now, in the run's precision and passes."""
        return pair_logprobs(
            self.model,
            pairs,
            autocast=self.precision.autocast,
            max_tokens=self.knobs["micro_batch_tokens"],
            **options,
        )

    def losses(self, index: Any, chosen: Any, rejected: Any) -> Any:
        """The loss of each of the pairs at `index` given the policy's summed log-probs of their responses."""
        knobs = self.knobs
        return dpo_losses(
            chosen,
            rejected,
            self.ref_chosen[index].to(chosen),
            self.ref_rejected[index].to(chosen),
            beta=knobs["beta"],
            loss_type=knobs["loss_type"],
            chosen_tokens=self.lengths[index, 0].to(chosen),
            rejected_tokens=self.lengths[index, 1].to(chosen),
        )

    def train_step(self) -> None:
        """One optimizer step on the next `pairs_per_step` training pairs, each pair's loss backward as soon
        as its pass is done; its metrics and log line."""
        import torch

        from trainers.learn.memory import trim_heap
        from trainers.sdk.cancel import check_cancel

        knobs, began = self.knobs, time.perf_counter()
        step, max_steps = self.step + 1, knobs["max_steps"]
        batch = batch_at(self.position, self.pairs_per_step, self.train_count, knobs["seed"])
        index = torch.tensor(batch)
        progress = _Progress(
            self.events,
            "updating",
            step,
            len(batch),
            lambda n: f"step {step} of {max_steps}: {n} of {len(batch)} pairs",
        )

        def loss_of(indices: list[int], chosen: Any, rejected: Any) -> Any:
            check_cancel()  # a cancel lands within one pair
            return self.losses(index[indices], chosen, rejected).sum() / len(batch)

        self.model.train()
        chosen, rejected = self.logprobs(
            [self.pairs[i] for i in batch],
            recompute=knobs["activation_checkpointing"],
            loss_of=loss_of,
            progress=progress,
        )
        learned = time.perf_counter()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, 1.0)  # TRL's (transformers') default
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        trim_heap()
        self.position += len(batch)
        self.step = step
        refs = self.ref_chosen[index], self.ref_rejected[index]
        metrics = {
            **pair_metrics(chosen, rejected, *refs, self.losses(index, chosen, rejected), knobs["beta"], ""),
            "grad_norm": float(grad_norm),
            "learning_rate": float(self.scheduler.get_last_lr()[0]),
            "step_time": time.perf_counter() - began,
            "time/forward": learned - began,
            "time/optimizer": time.perf_counter() - learned,
        }
        self.events.emit("metrics", step=step, split="train", values=metrics)
        self.metrics.update(metrics)
        self.events.log(
            f"step {step}/{max_steps}: loss {metrics['loss']:.4f}, margin {metrics['dpo/margin']:.3f}, "
            f"preference accuracy {metrics['dpo/accuracy']:.3f}, {metrics['step_time']:.1f} s"
        )

    def evaluate(self) -> None:
        """The held-out pairs' loss, margin and preference accuracy under the current policy (none held out:
        nothing)."""
        import torch

        held = self.pairs[self.train_count :]
        if not held:
            return
        began = time.perf_counter()
        progress = _Progress(
            self.events, "evaluating", self.step, len(held), lambda n: f"{n} of {len(held)} held-out pairs"
        )
        with torch.no_grad():
            chosen, rejected = self.logprobs(held, progress=progress)
        index = torch.arange(self.train_count, len(self.pairs))
        refs = self.ref_chosen[index], self.ref_rejected[index]
        losses = self.losses(index, chosen, rejected)
        metrics = pair_metrics(chosen, rejected, *refs, losses, self.knobs["beta"], "eval/")
        metrics["eval/time"] = time.perf_counter() - began
        self.events.emit("metrics", step=self.step, split="eval", values=metrics)
        self.metrics.update(metrics)
        self.events.log(
            f"evaluation at step {self.step}: preference accuracy {metrics['eval/dpo/accuracy']:.3f}, "
            f"margin {metrics['eval/dpo/margin']:.3f}, loss {metrics['eval/loss']:.3f} "
            f"({len(held)} held-out pairs, {metrics['eval/time']:.1f} s)"
        )

    def save(self) -> None:
        """A checkpoint of the policy now (a model directory another run can start from) and the run's place."""
        self.events.phase("checkpointing", self.step)
        path = self.checkpoints.save(
            self,
            step=self.step,
            data_position=self.position,
            policy_version=self.step,
            metrics=self.metrics,
            emit=self.events.emit,
            log=self.events.log,
        )
        self.saved.append(path)
        self.events.log(f"checkpoint saved at step {self.step}: {path}")


__all__ = ["DPOResult", "DPORun", "train_dpo"]
