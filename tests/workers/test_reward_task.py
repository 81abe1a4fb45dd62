"""Closing the loop on real processes: a Celery worker trains a reward model from annotators' preference
snapshot, the model joins a rubric, and the next run — on the worker, reporting to a real daphne — scores
its rollouts with it. The reward model on the default model; the run's policy the tiny one."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from tests.processes import asgi_server, celery_worker
from tests.webapp.rewards_factories import annotated_snapshot, preference_texts
from trainers.rubrics.alarms import passes, signal_of
from webapp.experiments.models import Run
from webapp.experiments.services import environment_create, run_create
from webapp.rewards import services
from webapp.rewards.models import RewardModel
from webapp.rollouts.models import Trajectory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TINY = {
    "group_size": 2,
    "prompts_per_step": 1,
    "max_new_tokens": 8,
    "eval_tasks": 0,
    "checkpoint_every": 1,
    "temperature": 1.0,
    "max_steps": 1,
}


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def test_a_worker_trains_a_reward_model_from_a_snapshot_and_the_next_run_scores_with_it(
    project, rubric, run, users, tmp_path, tiny_model_path
):
    snapshot = annotated_snapshot(
        project=project,
        run=run,
        researcher=users["bob"],
        annotator=users["carol"],
        rows=preference_texts(16, seed=5),
    )
    assert snapshot.pairs.count() == 16
    environment = environment_create(
        project=project,
        name="tiny arithmetic",
        kind="arithmetic_calculator",
        config={"max_turns": 1},
        user=users["alice"],
    )

    with asgi_server() as url, celery_worker("cpu", DASHBOARD_URL=url, REWARD_MODELS_DIR=str(tmp_path)):
        started = time.monotonic()
        reward_model = services.reward_model_train(
            snapshot=snapshot, user=users["bob"], name="style", params={"held_out_fraction": 0.25}
        )
        wait_for(
            lambda: RewardModel.objects.get(pk=reward_model.pk).status in ("ready", "failed"), 300, "training"
        )
        trained_in = time.monotonic() - started
        reward_model.refresh_from_db()
        assert reward_model.status == "ready", reward_model.error_message
        print(f"\nreward model on the worker: {trained_in:.1f}s wall, metrics {reward_model.metrics}")
        assert reward_model.metrics["held_out_accuracy"] > 0.7 and reward_model.metrics["n_eval"] == 4
        assert reward_model.metrics["n_pairs"] == 16 and reward_model.curve and reward_model.task_id
        assert Path(reward_model.path) == tmp_path / f"rm-{reward_model.pk}"
        assert (Path(reward_model.path) / "reward_model.json").is_file()

        version = services.reward_model_register(
            reward_model=reward_model, rubric=rubric, weight=1.0, user=users["bob"]
        )
        next_run, _ = run_create(
            project=project,
            name="scored by the reward model",
            environment=environment,
            rubric=rubric,
            preset="grpo",
            # The reward model (the bundled encoder) is what is tested: it scores the tiny policy's text.
            overrides={**TINY, "model": tiny_model_path},
            user=users["bob"],
        )
        assert next_run.rubric_version == version
        wait_for(lambda: Run.objects.get(pk=next_run.pk).status in ("SUCCEEDED", "FAILED"), 420, "the run")

    next_run.refresh_from_db()
    assert next_run.status == "SUCCEEDED", next_run.error_message + next_run.error_traceback
    trajectories = list(Trajectory.objects.filter(run=next_run))
    assert len(trajectories) == 2
    learned = [next(c for c in t.components if c["kind"] == "learned_reward") for t in trajectories]
    assert all(c["name"] == "style_v1" and c["explanation"].startswith("Reward model score") for c in learned)
    assert all(math.isfinite(c["raw"]) for c in learned)
    for trajectory, component in zip(trajectories, learned, strict=True):
        # Added with "only when the checks pass" (the default): it counts where the rubric's verifiable
        # criteria pass, and weighs 0 — saying which check failed — where one does not.
        checks_failed = [
            c["name"]
            for c in trajectory.components
            if signal_of(c["kind"]) == "verifiable" and not passes(c["kind"], c["raw"])
        ]
        if checks_failed or trajectory.status in ("truncated", "error"):
            assert component["counted"] is False and component["weighted"] == 0.0
            assert "not counted:" in component["explanation"]
        else:
            assert "counted" not in component and component["weighted"] == pytest.approx(component["raw"])
    for trajectory in trajectories:  # the total is the weighted sum, the reward model's share included
        assert trajectory.reward == pytest.approx(sum(c["weighted"] for c in trajectory.components), abs=1e-5)
