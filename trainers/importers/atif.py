"""ATIF → Rollout Studio: agent trajectories in Harbor's Agent Trajectory Interchange Format.

What is read: `.json` files holding one ATIF trajectory (or a list of them) and `.jsonl` files with one
per line, given directly or found under a folder (recursively; JSON files that are not ATIF, such as a
Harbor job's `config.json`, are passed over). `trainers.sdk.atif.atif_to_wire` converts each one.

The reward: our own exports carry it (`extra.rollout_studio`); a Harbor trial does not — Harbor writes
`<trial>/agent/trajectory.json` and the verifier's rewards in `<trial>/result.json`
(`verifier_result.rewards`, e.g. `{"reward": 1.0}`), which is read when present: `reward` is the total
(else the sum of the rewards), every entry a component; `task_name` names the task. A trajectory
with no reward anywhere is imported with reward 0 and status `error`, and counted in the summary.
Trajectories are placed at their recorded step (ours) or step 0; within a step, trajectories of one
task form a group.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainers.importers import ImportSummary, group_by_prompt, step_metrics_of
from trainers.sdk.atif import AtifError, atif_to_wire
from trainers.sdk.client import Run, prompt_task_id, trajectory_item


def _looks_like_atif(value: Any) -> bool:
    return isinstance(value, dict) and str(value.get("schema_version", "")).startswith("ATIF-")


def atif_documents(paths: list[str | Path], skipped: list[str]) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(file, ATIF document) for every trajectory in `paths`; unreadable files are added to `skipped`."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl") and p.is_file())
        else:
            files.append(path)
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            skipped.append(f"{file} ({exc})")
            continue
        if file.suffix == ".jsonl":
            for number, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except ValueError as exc:
                    skipped.append(f"{file}:{number} ({exc})")
                    continue
                if _looks_like_atif(value):
                    yield file, value
            continue
        try:
            value = json.loads(text)
        except ValueError as exc:
            skipped.append(f"{file} ({exc})")
            continue
        for doc in value if isinstance(value, list) else [value]:
            if _looks_like_atif(doc):
                yield file, doc


def harbor_result(file: Path) -> dict[str, Any] | None:
    """The Harbor trial result beside a trajectory (`<trial>/agent/trajectory.json` → `<trial>/result.json`)."""
    for folder in (file.parent, file.parent.parent):
        candidate = folder / "result.json"
        if candidate.is_file():
            try:
                data = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            return data if isinstance(data, dict) else None
    return None


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def read_atif(
    paths: list[str | Path], *, split: str = "train"
) -> tuple[dict[int, list[dict[str, Any]]], ImportSummary]:
    """→ ({step: wire items, grouped by task}, a summary with skipped files and counts)."""
    summary = ImportSummary(run_id=0)
    by_step: dict[int, list[dict[str, Any]]] = {}
    for file, doc in atif_documents(paths, summary.skipped_files):
        try:
            raw = atif_to_wire(doc)
        except AtifError as exc:
            summary.skipped_files.append(f"{file} ({exc})")
            continue
        result = harbor_result(file) if raw.get("reward") is None else None
        rewards = ((result or {}).get("verifier_result") or {}).get("rewards") or {}
        rewards = (
            {str(k): v for k, v in rewards.items() if _finite(v) is not None}
            if isinstance(rewards, dict)
            else {}
        )
        if raw.get("reward") is None and rewards:
            raw["reward"] = float(rewards["reward"]) if "reward" in rewards else sum(rewards.values())
            raw.setdefault(
                "components",
                [
                    {"name": k, "kind": "harbor_verifier", "raw": v, "weight": 1.0, "weighted": v}
                    for k, v in rewards.items()
                ],
            )
        if raw.get("reward") is None:
            raw["reward"], raw["status"] = 0.0, "error"
            summary.without_reward += 1
        if not raw.get("task_id"):
            name = (result or {}).get("task_name")
            raw["task_id"] = str(name) if name else prompt_task_id(raw.get("prompt") or "")
        raw.setdefault("split", split)
        step = raw["step"] if isinstance(raw.get("step"), int) and raw["step"] >= 0 else 0
        try:
            item = trajectory_item(raw)
        except ValueError as exc:
            summary.skipped_files.append(f"{file} ({exc})")
            continue
        # Keep the file's own grouping when it has one (our exports), else group by task.
        item["_group_key"] = (
            (raw.get("group"), raw["task_id"]) if raw.get("group") is not None else raw["task_id"]
        )
        by_step.setdefault(step, []).append(item)
    return {s: group_by_prompt(items) for s, items in sorted(by_step.items())}, summary


def import_atif(
    paths: list[str | Path], run: Run, *, split: str = "train", timeout_s: float = 300.0
) -> ImportSummary:
    """Post ATIF files (or folders of them) into `run`, then finish it SUCCEEDED."""
    by_step, summary = read_atif(paths, split=split)
    summary.run_id, summary.page_url = run.id, run.page_url
    for step, items in by_step.items():
        metrics = step_metrics_of(items, split)
        run.log_metrics(step, metrics)
        summary.metric_points += len(metrics)
        summary.trajectories += run.log_trajectories(step, items)
    summary.steps = sorted(by_step)
    if summary.without_reward:
        run.log(
            f"{summary.without_reward} trajectories carried no reward (no extra.rollout_studio, no Harbor "
            "result.json): imported with reward 0 and status error",
            "warning",
        )
    summary.delivered = run.finish(
        "SUCCEEDED", f"imported {summary.trajectories} ATIF trajectories", timeout_s=timeout_s
    )
    return summary


__all__ = ["atif_documents", "harbor_result", "import_atif", "read_atif"]
