"""Bring finished (or running) runs of other trainers into Rollout Studio.

- `trainers.importers.trl`: TRL's GRPO completion logs (`<output_dir>/completions/completions_<step>.parquet`,
  written when `log_completions=True`), its metric history (`trainer_state.json`'s `log_history`) and
  its `checkpoint-<step>` folders.
- `trainers.importers.verl`: verl's `trainer.rollout_data_dir` / `validation_data_dir` dumps (`<step>.jsonl`,
  one JSON object per rollout with `input`, `output`, `score`, `step`, optionally `gts` and extra reward info).
- `trainers.importers.atif`: ATIF trajectories (Harbor's Agent Trajectory Interchange Format: `.json` /
  `.jsonl` files or folders of them, e.g. a Harbor job; the reward from our own export or Harbor's `result.json`).

- `trainers.importers.cookbook`: a tinker-cookbook recipe's `log_path` (`metrics.jsonl`, `config.json`,
  `checkpoints.jsonl`), for recipes run against the hosted Tinker service.

Each importer turns files into our events and posts them through `trainers.sdk` (so the same batching,
retries and limits apply). Rollouts of the same prompt within a step form a group, numbered in file
order. Command line: `python -m trainers.importers {trl,verl,cookbook} PATH …` or `python -m trainers.importers atif FILE…
--url … --token … --project …`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainers.learn.metrics import groups_of_items, step_metrics


@dataclass
class ImportSummary:
    run_id: int
    page_url: str = ""
    steps: list[int] = field(default_factory=list)
    trajectories: int = 0
    metric_points: int = 0
    checkpoints: int = 0
    skipped_files: list[str] = field(default_factory=list)
    delivered: bool = True
    without_reward: int = 0  # trajectories that carried no reward (imported with 0 and status error)

    def describe(self) -> str:
        span = f"steps {min(self.steps)}–{max(self.steps)}" if self.steps else "no steps"
        text = (
            f"run {self.run_id}: {self.trajectories} trajectories, {self.metric_points} metric points, "
            f"{self.checkpoints} checkpoints ({span})"
        )
        if self.page_url:
            text += f" → {self.page_url}"
        if self.without_reward:
            text += f"; {self.without_reward} without a reward (status error)"
        if self.skipped_files:
            text += (
                f"; skipped {len(self.skipped_files)} unreadable file(s): {', '.join(self.skipped_files[:5])}"
            )
        if not self.delivered:
            text += "; WARNING: not everything reached the dashboard before the timeout"
        return text


def group_by_prompt(items: list[dict[str, Any]], key: str = "_group_key") -> list[dict[str, Any]]:
    """Number groups (same prompt) and samples within them, in order of appearance; drops `key`."""
    groups: dict[Any, list[int]] = {}
    for item in items:
        slot = groups.setdefault(item.pop(key), [len(groups), 0])
        item["group"], item["sample"] = slot[0], slot[1]
        slot[1] += 1
    return items


def step_metrics_of(items: list[dict[str, Any]], split: str = "train") -> dict[str, float]:
    """A step's metrics from its imported trajectories, computed as our trainer computes its own
    (`trainers.learn.metrics.step_metrics`: `reward/std` the sample std, groups by their `group` number)."""
    return step_metrics(groups_of_items(items), split=split, prefix="eval/" if split == "eval" else "")


__all__ = ["ImportSummary", "group_by_prompt", "step_metrics_of"]
