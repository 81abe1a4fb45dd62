"""A `transformers.TrainerCallback` that reports a TRL (or any 🤗 Trainer) run to Rollout Studio.

    from trainers.integrations.trl import RolloutStudioCallback

    trainer = GRPOTrainer(..., args=GRPOConfig(..., log_completions=True),
                          callbacks=[RolloutStudioCallback(project="agents")])   # $ROLLOUT_STUDIO_URL, $ROLLOUT_STUDIO_API_TOKEN
    trainer.train()

- every `on_log` dict becomes a metrics event at `state.global_step`, TRL's names mapped to ours
  (`reward` → `reward/mean`, `rewards/<func>/mean` → `criterion/<func>`, `clip_ratio/region_mean` →
  `clip_fraction`, `completions/mean_length` → `response_length`, `eval_*` → `eval/*`; see
  `trainers.importers.trl.map_trl_metric_name`), with TRL's `num_tokens` as the tokens axis;
- with `log_completions=True`, the completions TRL writes to `<output_dir>/completions/` after each
  logging step become trajectories (grouped by prompt), picked up at the next step and at the end;
- every checkpoint TRL saves is registered (`checkpoint-<step>`, "adapter" for PEFT models);
- when someone presses Cancel in the dashboard, training stops at the end of the current step
  (`control.should_training_stop`), and the run ends CANCELLED.

The callback creates an external run at `on_train_begin` (from `studio` or the environment) and finishes
it at `on_train_end`. A crash skips `on_train_end`; to have it reported as FAILED with its traceback,
create the run yourself and pass it in:

    with Studio().start_run(project="agents", name="grpo") as run:
        GRPOTrainer(..., callbacks=[RolloutStudioCallback(run)]).train()

Only the main process (`state.is_world_process_zero`) reports; in multi-process training the cancel
flag is shared with every rank (one tiny all-reduce per step), so all ranks stop at the same step.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from trainers.importers.trl import CompletionLog, completion_files, map_trl_metrics
from trainers.sdk.cancel import stop_requested
from trainers.sdk.client import Run, Studio, jsonable

log = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR


def _algorithm(args: TrainingArguments) -> str:
    name = type(args).__name__
    return f"trl-{name.removesuffix('Config').lower()}" if name.endswith("Config") else "transformers"


class RolloutStudioCallback(TrainerCallback):
    def __init__(
        self,
        run: Run | None = None,
        *,
        studio: Studio | None = None,
        project: str | None = None,
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
        algorithm: str | None = None,
        report_completions: bool = True,
        stop_on_cancel: bool = True,
        finish_on_end: bool | None = None,
        **sink_options: Any,
    ) -> None:
        if run is None and not project:
            raise ValueError("pass a Run, or the project to create one in")
        self.run = run
        self._studio = studio
        self._project = project
        self._name = name
        self._config = dict(config or {})
        self._algorithm = algorithm
        self._sink_options = sink_options
        self.report_completions = report_completions
        self.stop_on_cancel = stop_on_cancel
        self.finish_on_end = run is None if finish_on_end is None else finish_on_end
        self.cancelled = False
        self._completions: CompletionLog | None = None
        self._latest_metrics: dict[str, Any] = {}

    # --- lifecycle ---------------------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ):
        if not state.is_world_process_zero:
            return
        if self.run is None:
            studio = self._studio or Studio()
            name = self._name or args.run_name or Path(args.output_dir or "trainer").name
            config = {**jsonable(args.to_dict()), **jsonable(self._config)}
            self.run = studio.start_run(
                project=self._project or "",
                name=name,
                config=config,
                algorithm=self._algorithm or _algorithm(args),
                max_steps=max(state.max_steps, 0),
                **self._sink_options,
            )
            log.info("reporting to Rollout Studio: %s", self.run.page_url or self.run.id)
        if self.report_completions and getattr(args, "log_completions", False) and args.output_dir:
            directory = Path(args.output_dir) / "completions"
            self._completions = CompletionLog(directory, reward_weights=getattr(args, "reward_weights", None))
            # Files of an earlier run in the same output_dir are not this run's.
            self._completions.seen.update(file for _, file in completion_files(directory))

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        if self.run is None or not logs:
            return
        values, tokens = map_trl_metrics(logs)
        if values:
            self.run.log_metrics(state.global_step, values, tokens=tokens)
            self._latest_metrics.update({k: v for k, v in values.items() if isinstance(v, (int, float))})

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ):
        # TRL writes a logging step's completions right after on_log: they are on disk now.
        self._report_completions(final=False)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ):
        if not self.stop_on_cancel:
            return
        # The worker's watcher (trainers.sdk.cancel) answers at once; the dashboard's reply at the next report.
        cancel = stop_requested() or (self.run is not None and self.run.should_cancel())
        cancel = _any_rank(cancel, args)
        if cancel and not control.should_training_stop:
            self.cancelled = True
            control.should_training_stop = True
            if self.run is not None:
                self.run.log(
                    f"cancel requested in the dashboard: stopping after step {state.global_step}", "warning"
                )

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        if self.run is None:
            return
        path = os.path.abspath(
            os.path.join(args.output_dir or "", f"{CHECKPOINT_PREFIX}-{state.global_step}")
        )
        model = kwargs.get("model")
        kind = "adapter" if model is not None and getattr(model, "peft_config", None) else "full"
        self.run.log_checkpoint(state.global_step, path, dict(self._latest_metrics), kind=kind)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ):
        if self.run is None:
            return
        self._report_completions(final=True)
        if self.finish_on_end:
            status = "CANCELLED" if self.cancelled else "SUCCEEDED"
            message = "stopped on the dashboard's request" if self.cancelled else ""
            if not self.run.finish(status, message):
                log.warning("Rollout Studio: not every event reached the dashboard (run %s)", self.run.id)
        else:
            self.run.flush()

    # --- internals -----------------------------------------------------------------------------------

    def _report_completions(self, *, final: bool) -> None:
        if self.run is None or self._completions is None:
            return
        for step, items in self._completions.read_new(final=final):
            self.run.log_trajectories(step, items)


def _any_rank(flag: bool, args: TrainingArguments) -> bool:
    """The flag OR-ed over all ranks, so every process stops at the same step (only rank 0 knows)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return flag
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return flag
    import torch

    tensor = torch.tensor([1.0 if flag else 0.0], device=args.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


__all__ = ["RolloutStudioCallback"]
