"""verl → Rollout Studio: the rollout dumps of `trainer.rollout_data_dir` (and `validation_data_dir`).

What verl writes (`RayPPOTrainer._dump_generations`): one file per training step, `<step>.jsonl`, one
JSON object per rollout with
- `input`: the prompt as the model saw it (chat template rendered, special tokens stripped),
- `output`: the response text,
- `score`: the sequence's total reward (its token-level scores summed),
- `step`: the global step,
- `gts`: the ground truth (newer versions), and every entry of the reward function's `reward_extra_info`
  with one value per rollout (e.g. `acc`, `pred`).
verl repeats each prompt `rollout.n` times, so rollouts with the same `input` in a step are one group.
The extra entries are kept on the trajectory (`env_state`); numeric ones also become step metrics
(`verl/<name>`).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from trainers.importers import ImportSummary, group_by_prompt, step_metrics_of
from trainers.sdk.client import Run, jsonable, trajectory_item

STEP_FILE = re.compile(r"^(\d+)\.jsonl$")
BASE_KEYS = ("input", "output", "score", "step", "gts")


def rollout_files(path: str | Path) -> list[tuple[int, Path]]:
    """(step, file) for `<step>.jsonl` files in a dump folder (or the one file given), in step order."""
    path = Path(path)
    files = [path] if path.is_file() else list(path.glob("*.jsonl"))
    found = []
    for file in files:
        match = STEP_FILE.match(file.name)
        found.append((int(match.group(1)) if match else -1, file))
    return sorted(found)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def read_rollout_file(
    file: Path, *, step: int, split: str = "train"
) -> tuple[dict[int, list[dict]], dict[int, dict], int]:
    """→ ({step: items grouped by input}, {step: {"verl/<extra>": mean}}, lines that could not be read)."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    extras: dict[int, dict[str, list[float]]] = {}
    bad = 0
    with file.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                bad += 1  # a torn last line of a dump in progress
                continue
            if not isinstance(row, dict):
                bad += 1
                continue
            row_step = row.get("step")
            row_step = row_step if isinstance(row_step, int) and row_step >= 0 else step
            score = _finite(row.get("score"))
            extra = {k: v for k, v in row.items() if k not in BASE_KEYS}
            state: dict[str, Any] = {}
            if row.get("gts") is not None:
                state["ground_truth"] = jsonable(row["gts"])
            if extra:
                state["reward_extra_info"] = jsonable(extra)
            prompt = (
                row.get("input")
                if isinstance(row.get("input"), str)
                else json.dumps(jsonable(row.get("input")))
            )
            item = trajectory_item(
                {
                    "prompt": prompt,
                    "completion": row.get("output")
                    if isinstance(row.get("output"), str)
                    else json.dumps(jsonable(row.get("output"))),
                    "reward": score if score is not None else 0.0,
                    "components": [
                        {
                            "name": "score",
                            "kind": "verl_reward",
                            "raw": score,
                            "weight": 1.0,
                            "weighted": score,
                        }
                    ]
                    if score is not None
                    else [],
                    "status": "ok" if score is not None else "error",
                    "split": split,
                    **({"env_state": state} if state else {}),
                }
            )
            item["_group_key"] = prompt
            by_step.setdefault(row_step, []).append(item)
            for key, value in extra.items():
                number = _finite(value)
                if number is not None:
                    extras.setdefault(row_step, {}).setdefault(key, []).append(number)
    grouped = {s: group_by_prompt(items) for s, items in by_step.items()}
    means = {s: {f"verl/{k}"[:100]: sum(v) / len(v) for k, v in per.items()} for s, per in extras.items()}
    return grouped, means, bad


def import_verl(
    path: str | Path, run: Run, *, split: str = "train", finish: bool = True, timeout_s: float = 300.0
) -> ImportSummary:
    """Post a verl rollout dump folder (or one `<step>.jsonl`) into `run`, then (if `finish`) finish it
    SUCCEEDED — pass finish=False to import the validation dump into the same run next."""
    summary = ImportSummary(run_id=run.id, page_url=run.page_url)
    prefix = "eval/" if split == "eval" else ""
    steps = set()
    for step, file in rollout_files(path):
        try:
            by_step, extra_means, bad = read_rollout_file(file, step=max(step, 0), split=split)
        except (OSError, UnicodeDecodeError) as exc:
            summary.skipped_files.append(f"{file.name} ({exc})")
            continue
        if bad:
            run.log(f"{file.name}: skipped {bad} unreadable line(s)", "warning")
        for row_step, items in sorted(by_step.items()):
            metrics = {
                **step_metrics_of(items, split),
                **{(prefix + k)[:100]: v for k, v in extra_means.get(row_step, {}).items()},
            }
            run.log_metrics(row_step, metrics)
            summary.metric_points += len(metrics)
            summary.trajectories += run.log_trajectories(row_step, items)
            steps.add(row_step)
    summary.steps = sorted(steps)
    if finish:
        summary.delivered = run.finish(
            "SUCCEEDED", f"imported from verl rollout dump {path}", timeout_s=timeout_s
        )
    else:
        summary.delivered = run.flush(timeout_s)
    return summary


__all__ = ["import_verl", "read_rollout_file", "rollout_files"]
