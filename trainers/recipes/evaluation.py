"""The evaluation recipe: a policy (the config's model, or a checkpoint of it) on the run's fixed held-out
tasks, scored by the run's rubric; the metrics a training run reports as `eval/…`, no update.

It is the GRPO recipe's own evaluation (`trainers.recipes.grpo.Trainer.evaluate`: the same tasks, seeds,
eval temperature and scoring), run alone: `python -m trainers eval` calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.sdk.events import EventSink


def evaluate(
    config: Mapping[str, Any], *, sink: EventSink | None = None, checkpoint: str | Path | None = None
) -> dict[str, float]:
    """Evaluate the policy `config` names (resumed from `checkpoint` when given) on its held-out tasks."""
    from trainers.recipes.grpo import Trainer

    if not config.get("eval_tasks"):
        raise ValueError("eval_tasks is 0: nothing to evaluate")
    trainer = Trainer(config, sink=sink, resume_from=checkpoint)
    try:
        trainer.setup()
        return trainer.evaluate()
    finally:
        if trainer.rollouts is not None:
            trainer.rollouts.close()
