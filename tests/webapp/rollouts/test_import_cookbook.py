"""Importing a tinker-cookbook recipe's log_path (a run made against the hosted Tinker service) into the
real dashboard (live_server), through the CLI: its metrics.jsonl as curves, its config, its checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainers.importers.cli import main as import_main
from webapp.experiments.models import Checkpoint, Run, RunStatus
from webapp.rollouts.models import MetricPoint


@pytest.fixture
def token(live_server, transactional_db, project, users):
    from webapp.accounts.services import api_token_create

    return api_token_create(user=users["bob"], name="importer")[1]


def write_rl_loop_log(folder: Path) -> None:
    """What rl_loop 0.5.8 writes (ml_log's JsonLogger, checkpoint_utils), a torn last line included."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps(
            {"model_name": "Qwen/Qwen3-8B", "batch_size": 128, "group_size": 16, "learning_rate": 4e-5}
        )
    )
    rows = [
        {"step": 0, "progress/batch": 0, "optim/lr": 4e-5, "reward/total": 0.25, "time/total": 41.5},
        {"step": 1, "progress/batch": 1, "optim/lr": 4e-5, "reward/total": 0.5, "time/total": 39.0},
    ]
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + '\n{"step": 2, "rew')
    (folder / "checkpoints.jsonl").write_text(
        json.dumps(
            {
                "name": "final",
                "batch": 2,
                "state_path": "tinker://3f1c/weights/final",
                "sampler_path": "tinker://3f1c/sampler_weights/final",
            }
        )
        + "\n"
    )


def test_it_imports_a_cookbook_log_path(live_server, token, tmp_path, capsys):
    log_path = tmp_path / "rl-loop"
    write_rl_loop_log(log_path)
    code = import_main(
        ["cookbook", str(log_path), "--url", live_server.url, "--token", token, "--project", "agents"]
    )
    assert code == 0, capsys.readouterr()
    run = Run.objects.get(name="rl-loop")
    assert run.status == RunStatus.SUCCEEDED and run.preset == "tinker-cookbook"
    assert run.resolved_config["group_size"] == 16 and run.resolved_config["imported_from"] == str(log_path)
    curve = MetricPoint.objects.filter(run=run, key="reward/total").order_by("step")
    assert [(p.step, p.value) for p in curve] == [(0, 0.25), (1, 0.5)]
    assert MetricPoint.objects.get(run=run, key="optim/lr", step=1).value == pytest.approx(4e-5)
    saved = Checkpoint.objects.get(run=run)
    assert saved.step == 2 and saved.path == "tinker://3f1c/weights/final"
    assert any("skipped 1 unreadable line" in e.summary["message"] for e in run.events.filter(type="log"))
    assert "8 metric points, 1 checkpoints" in capsys.readouterr().out
