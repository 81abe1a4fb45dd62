"""TRL (GRPOTrainer) → Rollout Studio: completion logs, metric history, checkpoints.

What TRL writes (read from trl 1.x `GRPOTrainer.log`; older and newer versions are read tolerantly):

- with `log_completions=True`, at every logging step `<output_dir>/completions/completions_<step:05d>.parquet`
  with columns `step`, `prompt`, `completion` (strings, or chat message lists for conversational data),
  one float column per reward function named after it (NaN where a function did not apply), any extra
  logged columns, and `advantage`;
- `trainer_state.json` (in each `checkpoint-<step>` folder, and in `output_dir` after `save_state()`),
  whose `log_history` holds every `on_log` dict: `reward`, `reward_std`, `rewards/<func>/mean`, `kl`, …

TRL's metric names are mapped to ours (`map_trl_metrics`); names we do not know pass through unchanged.
TRL does not store reward weights in the completion log: the total reward of a row is the sum of its
reward columns times `reward_weights` (default 1.0 each, as in TRL), NaN columns skipped.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trainers.importers import ImportSummary, group_by_prompt, step_metrics_of
from trainers.sdk.client import Run, jsonable, trajectory_item

COMPLETIONS_FILE = re.compile(r"completions_(\d+)\.parquet$")
CHECKPOINT_DIR = re.compile(r"checkpoint-(\d+)$")
KNOWN_COLUMNS = {"step", "prompt", "completion", "advantage", "image", "images", "__index_level_0__"}

# TRL's on_log names → ours (trainers/recipes/grpo.py emits the right-hand names).
_EXACT = {
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "kl": "kl",
    "entropy": "entropy",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
    "clip_ratio": "clip_fraction",
    "clip_ratio/region_mean": "clip_fraction",
    "clip_ratio/low_mean": "clip_fraction/low",
    "clip_ratio/high_mean": "clip_fraction/high",
    "clip_ratio/low_min": "clip_fraction/low_min",
    "clip_ratio/high_max": "clip_fraction/high_max",
    "completion_length": "response_length",
    "completions/mean_length": "response_length",
    "completions/max_length": "response_length/max",
    "completions/min_length": "response_length/min",
    "completions/mean_terminated_length": "response_length/terminated_mean",
    "completions/clipped_ratio": "truncated_fraction",
    "frac_reward_zero_std": "zero_variance_fraction",
    # DPOTrainer's own metrics (checked before the reward-function pattern below, which they would match).
    "rewards/chosen": "dpo/reward_chosen",
    "rewards/rejected": "dpo/reward_rejected",
    "rewards/margins": "dpo/margin",
    "rewards/accuracies": "dpo/accuracy",
    "logps/chosen": "dpo/logp_chosen",
    "logps/rejected": "dpo/logp_rejected",
    "logits/chosen": "dpo/logits_chosen",
    "logits/rejected": "dpo/logits_rejected",
}
_REWARD_FUNC = re.compile(r"^rewards/(?P<name>.+?)(?:/(?P<stat>mean|std))?$")


def map_trl_metric_name(name: str) -> str:
    """`reward` → `reward/mean`, `rewards/<f>/mean` → `criterion/<f>`, `eval_kl` → `eval/kl`, …"""
    prefix = ""
    if name.startswith("eval_"):
        prefix, name = "eval/", name[len("eval_") :]
    if name in _EXACT:
        return prefix + _EXACT[name]
    match = _REWARD_FUNC.match(name)
    if match:
        suffix = "/std" if match["stat"] == "std" else ""
        return f"{prefix}criterion/{match['name']}{suffix}"
    return prefix + name


def map_trl_metrics(logs: Mapping[str, Any]) -> tuple[dict[str, Any], int | None]:
    """An `on_log` dict → (our metric values, tokens seen). Non-numeric entries are left out; `step`
    and `num_tokens` are not metrics (the step is the event's, tokens its x-axis)."""
    values: dict[str, Any] = {}
    tokens = None
    for key, value in logs.items():
        if key in ("step", "total_flos"):
            continue
        if key == "num_tokens":
            tokens = int(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
            continue
        if (
            value is None
            or (isinstance(value, (int, float)) and not isinstance(value, bool))
            or hasattr(value, "item")
        ):
            values[map_trl_metric_name(str(key))[:100]] = value
    return values, tokens


# --- completion logs ----------------------------------------------------------------------------------


def _messages(value: Any) -> Any:
    """A prompt/completion cell: a string, or chat messages (also when stored as a JSON string)."""
    if isinstance(value, str) and value[:2] in ("[{", '{"'):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        if isinstance(parsed, list) and all(isinstance(m, dict) and "role" in m for m in parsed):
            return parsed
    if hasattr(value, "tolist"):  # numpy arrays from pandas-written nested columns
        value = value.tolist()
    return value


def _numeric(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    return None


def reward_columns_of(schema: Any) -> list[str]:
    """Float/int columns that are not TRL's own: the reward functions (TRL names them after the function)."""
    import pyarrow as pa

    names = []
    for column in schema:
        if column.name in KNOWN_COLUMNS:
            continue
        if (
            pa.types.is_floating(column.type)
            or pa.types.is_integer(column.type)
            or pa.types.is_decimal(column.type)
        ):
            names.append(column.name)
    return names


def rows_to_items(
    rows: Iterable[Mapping[str, Any]],
    reward_columns: list[str],
    *,
    step: int,
    reward_weights: Mapping[str, float] | None = None,
    split: str = "train",
) -> dict[int, list[dict]]:
    """Completion-log rows → {step: [wire-format trajectory items]}, grouped by prompt within a step."""
    weights = dict(reward_weights or {})
    by_step: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        row_step = row.get("step")
        try:
            row_step = int(row_step) if row_step is not None else step
        except (TypeError, ValueError):
            row_step = step
        prompt, completion = _messages(row.get("prompt")), _messages(row.get("completion"))
        components = []
        for name in reward_columns:
            raw = _numeric(row.get(name))
            if raw is None:
                continue  # this reward function did not apply to this row (TRL logs NaN)
            weight = float(weights.get(name, 1.0))
            components.append(
                {
                    "name": name,
                    "kind": "trl_reward_func",
                    "raw": raw,
                    "weight": weight,
                    "weighted": raw * weight,
                }
            )
        extra = {k: v for k, v in row.items() if k not in KNOWN_COLUMNS and k not in reward_columns}
        item = trajectory_item(
            {
                "prompt": prompt,
                "completion": completion,
                "reward": sum(c["weighted"] for c in components) if components else 0.0,
                "components": components,
                "advantage": _numeric(row.get("advantage")),
                # Every reward function returned None: TRL could not score it.
                "status": "ok" if components or not reward_columns else "error",
                "split": split,
                **({"env_state": {"trl_extra": jsonable(extra)}} if extra else {}),
            }
        )
        key = prompt if isinstance(prompt, str) else json.dumps(jsonable(prompt), sort_keys=True)
        item["_group_key"] = key
        by_step.setdefault(row_step, []).append(item)
    return {s: group_by_prompt(items) for s, items in by_step.items()}


def completion_files(path: str | Path) -> list[tuple[int, Path]]:
    """(step, file) of every `completions_<step>.parquet` under `path` (a file, the completions folder,
    or the output_dir), in step order."""
    path = Path(path)
    if path.is_file():
        candidates = [path]
    elif (path / "completions").is_dir():
        candidates = list((path / "completions").glob("completions_*.parquet"))
    else:
        candidates = list(path.glob("completions_*.parquet"))
    found = []
    for file in candidates:
        match = COMPLETIONS_FILE.search(file.name)
        found.append((int(match.group(1)) if match else 0, file))
    return sorted(found)


def read_completion_file(
    file: Path,
    *,
    step: int,
    reward_columns: list[str] | None = None,
    reward_weights: Mapping[str, float] | list[float] | None = None,
    split: str = "train",
) -> dict[int, list[dict]]:
    """One completions parquet file → {step: items}. `reward_weights` is {column: weight}, or TRL's own
    `reward_weights` list: TRL writes the reward columns first, in reward-function order, so the first
    len(list) numeric columns are the reward functions and any later ones are extra logged values."""
    import pyarrow.parquet as pq

    table = pq.read_table(file)
    columns = reward_columns if reward_columns is not None else reward_columns_of(table.schema)
    if isinstance(reward_weights, (list, tuple)):
        columns = columns[: len(reward_weights)]
        reward_weights = dict(zip(columns, reward_weights, strict=False))
    return rows_to_items(table.to_pylist(), columns, step=step, reward_weights=reward_weights, split=split)


def _fingerprint(items: list[dict[str, Any]]) -> str:
    digest = hashlib.sha1()
    for item in items:
        digest.update(json.dumps([item["prompt"], [t["text"] for t in item["turns"]]]).encode())
    return digest.hexdigest()


class CompletionLog:
    """Reads TRL's completion files as they appear, once each.

    TRL keeps the latest generation batch and writes it at every logging step, so with
    `num_iterations > 1` (or logging more often than generating) consecutive files repeat the same
    rollouts under a new step number: a file identical to the previous one is skipped.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        reward_columns: list[str] | None = None,
        reward_weights: Mapping[str, float] | list[float] | None = None,
        split: str = "train",
    ) -> None:
        self.path = Path(path)
        self.reward_columns = reward_columns
        self.reward_weights = reward_weights
        self.split = split
        self.seen: set[Path] = set()
        self.skipped: list[str] = []
        self._last_fingerprint = ""

    def read_new(self, *, final: bool = False) -> list[tuple[int, list[dict[str, Any]]]]:
        """Rollouts of files not read yet, as (step, items) in step order. An unreadable file (one TRL
        is still writing) is tried again next time, unless `final`: then it is skipped and listed."""
        batches = []
        for step, file in completion_files(self.path):
            if file in self.seen:
                continue
            try:
                by_step = read_completion_file(
                    file,
                    step=step,
                    reward_columns=self.reward_columns,
                    reward_weights=self.reward_weights,
                    split=self.split,
                )
            except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
                if final:
                    self.seen.add(file)
                    self.skipped.append(f"{file.name} ({exc})")
                continue
            self.seen.add(file)
            for row_step, items in sorted(by_step.items()):
                fingerprint = _fingerprint(items)
                if fingerprint == self._last_fingerprint:
                    continue
                self._last_fingerprint = fingerprint
                batches.append((row_step, items))
        return batches


# --- metric history and checkpoints --------------------------------------------------------------------


def output_dir_of(path: str | Path) -> Path:
    path = Path(path)
    if path.is_file():
        path = path.parent
    return path.parent if path.name == "completions" else path


def checkpoint_dirs(output_dir: Path) -> list[tuple[int, Path]]:
    found = []
    for child in output_dir.glob("checkpoint-*"):
        match = CHECKPOINT_DIR.search(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def log_history(output_dir: Path) -> list[dict[str, Any]]:
    """The longest `log_history` among trainer_state.json files (output_dir's own, then checkpoints')."""
    candidates = [output_dir / "trainer_state.json"] + [
        d / "trainer_state.json" for _, d in checkpoint_dirs(output_dir)
    ]
    best: list[dict[str, Any]] = []
    for file in candidates:
        if not file.is_file():
            continue
        try:
            history = json.loads(file.read_text(encoding="utf-8")).get("log_history", [])
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(history, list) and len(history) > len(best):
            best = [entry for entry in history if isinstance(entry, dict)]
    return best


def import_trl(
    path: str | Path,
    run: Run,
    *,
    reward_columns: list[str] | None = None,
    reward_weights: Mapping[str, float] | None = None,
    split: str = "train",
    timeout_s: float = 300.0,
) -> ImportSummary:
    """Post a TRL output folder (or one completions parquet file) into `run`, then finish it SUCCEEDED."""
    summary = ImportSummary(run_id=run.id, page_url=run.page_url)
    output_dir = output_dir_of(path)
    history = log_history(output_dir)
    log = CompletionLog(path, reward_columns=reward_columns, reward_weights=reward_weights, split=split)
    batches = log.read_new(final=True)
    summary.skipped_files = log.skipped
    steps = set()
    for entry in history:
        if not isinstance(entry.get("step"), int):
            continue
        values, tokens = map_trl_metrics(entry)
        if values:
            run.log_metrics(entry["step"], values, tokens=tokens)
            summary.metric_points += len(values)
            steps.add(entry["step"])
    for step, items in batches:
        if not history:  # no metric history: derive the step's curves from its rollouts
            metrics = step_metrics_of(items, split)
            run.log_metrics(step, metrics)
            summary.metric_points += len(metrics)
        summary.trajectories += run.log_trajectories(step, items)
        steps.add(step)
    by_step: dict[int, dict[str, Any]] = {}
    for entry in history:  # several log entries can share a step (the final summary does)
        if isinstance(entry.get("step"), int):
            by_step.setdefault(entry["step"], {}).update(entry)
    for step, directory in checkpoint_dirs(output_dir):
        metrics, _ = map_trl_metrics(by_step.get(step, {}))
        kind = "adapter" if (directory / "adapter_config.json").exists() else "full"
        run.log_checkpoint(
            step, str(directory.resolve()), {k: v for k, v in metrics.items() if v is not None}, kind=kind
        )
        summary.checkpoints += 1
        steps.add(step)
    summary.steps = sorted(steps)
    summary.delivered = run.finish("SUCCEEDED", f"imported from TRL output {output_dir}", timeout_s=timeout_s)
    return summary


__all__ = [
    "CompletionLog",
    "completion_files",
    "import_trl",
    "log_history",
    "map_trl_metric_name",
    "map_trl_metrics",
    "rows_to_items",
]
