"""tinker-cookbook → Rollout Studio: a recipe's `log_path`, for runs made against the hosted Tinker service.

What a cookbook recipe writes there (`tinker_cookbook.utils.ml_log`, `checkpoint_utils`):
- `metrics.jsonl`: one JSON object per logged step, `{"step": n, "<name>": value, …}` — the recipe's own
  metrics (`train_mean_nll`, `reward/total`, `optim/lr`, `time/total`, …): every finite number becomes a
  curve point of that step, under the recipe's own name;
- `config.json`: the recipe's chz config (kept as the run's config when the run is created here);
- `checkpoints.jsonl`: one line per saved checkpoint, `{"name", "batch", "state_path", "sampler_path"}`
  with `tinker://` paths of the hosted service: listed as checkpoints of the batch they were saved at.
A run made against this deployment's own service is on the dashboard already (kind `tinker`); this is for
the others.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from trainers.importers import ImportSummary
from trainers.sdk.client import Run

MAX_KEY = 100


def _rows(file: Path) -> tuple[list[dict[str, Any]], int]:
    """The file's JSON objects and how many lines could not be read (a torn last line of a live run)."""
    rows: list[dict[str, Any]] = []
    bad = 0
    if not file.is_file():
        return rows, bad
    for line in file.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad += 1
    return rows, bad


def metrics_by_step(rows: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """{step: {name: value}} of the finite numbers of each row; a row without a step takes its line
    number, as ml_log numbers steps it was not given."""
    by_step: dict[int, dict[str, float]] = {}
    for index, row in enumerate(rows):
        step = row.get("step")
        step = step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else index
        values = {
            str(name)[:MAX_KEY]: float(value)
            for name, value in row.items()
            if name != "step"
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
        }
        by_step.setdefault(step, {}).update(values)
    return by_step


def recipe_config(log_path: str | Path) -> dict[str, Any]:
    """The recipe's config.json (empty when there is none or it is unreadable)."""
    file = Path(log_path) / "config.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def import_cookbook(
    log_path: str | Path, run: Run, *, finish: bool = True, timeout_s: float = 300.0
) -> ImportSummary:
    """Post a recipe's metrics and checkpoints into `run`, then (if `finish`) finish it SUCCEEDED."""
    folder = Path(log_path)
    summary = ImportSummary(run_id=run.id, page_url=run.page_url)
    rows, bad = _rows(folder / "metrics.jsonl")
    if not rows and not (folder / "metrics.jsonl").is_file():
        summary.skipped_files.append(f"{folder / 'metrics.jsonl'} (missing)")
    if bad:
        run.log(f"metrics.jsonl: skipped {bad} unreadable line(s)", "warning")
    for step, values in sorted(metrics_by_step(rows).items()):
        if values:
            run.log_metrics(step, values)
            summary.metric_points += len(values)
            summary.steps.append(step)
    checkpoints, _ = _rows(folder / "checkpoints.jsonl")
    for record in checkpoints:
        batch = record.get("batch")
        step = batch if isinstance(batch, int) and batch >= 0 else (summary.steps[-1] if summary.steps else 0)
        paths = [
            record[k] for k in ("state_path", "sampler_path") if isinstance(record.get(k), str) and record[k]
        ]
        if paths:  # one checkpoint per step on the dashboard: the resumable state first
            run.log_checkpoint(step, paths[0], kind="adapter")
            run.log(f"checkpoint {record.get('name', '')!s} at batch {step}: {', '.join(paths)}")
            summary.checkpoints += 1
    if finish:
        summary.delivered = run.finish(
            "SUCCEEDED", f"imported from tinker-cookbook log_path {folder}", timeout_s=timeout_s
        )
    else:
        summary.delivered = run.flush(timeout_s)
    return summary


__all__ = ["import_cookbook", "metrics_by_step", "recipe_config"]
