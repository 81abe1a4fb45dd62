"""Reward-model services: queue training from a snapshot, the worker's status steps, and registration
into a rubric as a new version that new runs pin and old runs never see."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from tests.webapp.rewards_factories import annotated_snapshot, direct_snapshot, preference_texts
from webapp.experiments.models import RubricVersion, Run
from webapp.experiments.services import rubric_create, rubric_update, run_create
from webapp.fleet.models import WorkerNode
from webapp.fleet.services import worker_report
from webapp.review.services import snapshot_pairs
from webapp.rewards import selectors, services
from webapp.rewards.models import RewardModel
from workers.reward_execution import execute_reward_training, reward_model_dir, training_pairs


@pytest.fixture
def snapshot(project, users):
    return direct_snapshot(project=project, rows=preference_texts(6), user=users["bob"])


def ready(
    reward_model: RewardModel, path: str = "/srv/reward_models/rm-1", accuracy: float = 0.9, n_eval: int = 60
) -> RewardModel:
    assert services.reward_model_claim(reward_model.pk, worker="w1")
    assert services.reward_model_finish(
        reward_model.pk, path=path, metrics={"held_out_accuracy": accuracy, "n_eval": n_eval}, curve=[]
    )
    return RewardModel.objects.get(pk=reward_model.pk)


def test_training_is_queued_after_commit_with_the_knobs_filled_in(
    snapshot, users, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        reward_model = services.reward_model_train(
            snapshot=snapshot, user=users["bob"], name="style", params={"head": "mlp"}
        )
    assert len(callbacks) == 1  # the Celery task is sent only once the row is committed
    assert reward_model.status == "queued" and reward_model.version == 1 and reward_model.queue == "cpu"
    assert reward_model.params == {
        "head": "mlp",
        "hidden_units": 64,
        "epochs": 100,
        "lr": 0.01,
        "weight_decay": 0.01,
        "batch_size": 32,
        "held_out_fraction": 0.2,
        "seed": 0,
        "max_length": 1024,
    }
    assert reward_model.metrics == {"n_pairs": 6}
    again = services.reward_model_train(snapshot=snapshot, user=users["bob"], name="style", dispatch=False)
    other = services.reward_model_train(snapshot=snapshot, user=users["bob"], name="other", dispatch=False)
    assert (again.version, other.version) == (2, 1)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "  "}, "name"),
        ({"params": {"head": "transformer"}}, "params.head"),
        ({"params": {"epochs": 0}}, "params.epochs"),
        ({"params": {"surprise": 1}}, "params"),
        ({"queue": "tpu"}, "queue"),
    ],
)
def test_bad_requests_write_nothing(snapshot, users, kwargs, field):
    with pytest.raises(ValidationError) as error:
        services.reward_model_train(**{"snapshot": snapshot, "user": users["bob"], "name": "style", **kwargs})
    assert field in error.value.message_dict
    assert not RewardModel.objects.exists()


def test_a_snapshot_too_small_to_hold_pairs_out_is_refused(project, users):
    tiny = direct_snapshot(project=project, rows=preference_texts(3))
    with pytest.raises(ValidationError, match="training needs at least 4"):
        services.reward_model_train(snapshot=tiny, user=users["bob"], name="style")


def test_status_steps_are_taken_once_and_a_finished_model_is_never_failed(snapshot, users):
    reward_model = services.reward_model_train(
        snapshot=snapshot, user=users["bob"], name="style", dispatch=False
    )
    assert services.reward_model_claim(reward_model.pk, worker="w1", task_id="t1")
    assert not services.reward_model_claim(reward_model.pk, worker="w2")  # a redelivered task
    services.reward_model_progress(reward_model.pk, phase="embed", progress=0.5)
    assert services.reward_model_finish(
        reward_model.pk, path="/rm", metrics={"held_out_accuracy": 0.8}, curve=[{"epoch": 1.0}]
    )
    assert not services.reward_model_fail(reward_model.pk, error="too late")
    reward_model.refresh_from_db()
    assert (reward_model.status, reward_model.worker, reward_model.path) == ("ready", "w1", "/rm")
    assert reward_model.metrics == {"n_pairs": 6, "held_out_accuracy": 0.8} and reward_model.progress == 1.0


def test_the_worker_records_a_failure_with_its_reason(project, users):
    broken = direct_snapshot(
        project=project, rows=preference_texts(1)
    )  # made before the minimum existed, say
    reward_model = RewardModel.objects.create(
        project=project, name="style", version=1, snapshot=broken, params={}
    )
    assert execute_reward_training(reward_model.pk, hostname="w1") == "failed"
    reward_model.refresh_from_db()
    assert reward_model.status == "failed" and "at least 2 preference pairs" in reward_model.error_message
    assert execute_reward_training(reward_model.pk) == "skipped (failed)"


def test_the_model_learns_from_the_whole_response_the_criterion_will_score(run, users, project):
    rows = preference_texts(2)
    snapshot = annotated_snapshot(
        project=project, run=run, researcher=users["bob"], annotator=users["carol"], rows=rows
    )
    pairs = training_pairs(snapshot_pairs(snapshot))
    assert sorted(pairs, key=lambda p: p["prompt"]) == sorted(
        [{"prompt": p, "chosen": good, "rejected": bad} for p, good, bad in rows], key=lambda p: p["prompt"]
    )
    multi_turn = {
        "prompt": "q",
        "chosen": "assistant: call\ntool (add): 4\nassistant: <answer>4</answer>",
        "rejected": "5",
        "chosen_messages": [
            {"role": "assistant", "content": "call"},
            {"role": "tool", "content": "4"},
            {"role": "assistant", "content": "<answer>4</answer>"},
        ],
        "rejected_messages": [],
    }
    assert training_pairs([multi_turn]) == [{"prompt": "q", "chosen": multi_turn["chosen"], "rejected": "5"}]


def test_models_live_under_an_absolute_directory(snapshot, users, settings, tmp_path):
    settings.REWARD_MODELS_DIR = "var/relative"
    reward_model = services.reward_model_train(
        snapshot=snapshot, user=users["bob"], name="style", dispatch=False
    )
    assert (
        reward_model_dir(reward_model).is_absolute()
        and reward_model_dir(reward_model).name == f"rm-{reward_model.pk}"
    )


def test_registering_makes_a_new_rubric_version_that_new_runs_pin_and_old_runs_never_see(
    snapshot, users, project, environment, rubric, run
):
    reward_model = ready(
        services.reward_model_train(snapshot=snapshot, user=users["bob"], name="Style & tone", dispatch=False)
    )
    version = services.reward_model_register(
        reward_model=reward_model, rubric=rubric, weight=0.5, user=users["bob"]
    )

    assert version.number == 2
    assert version.note == "added learned reward Style & tone v1, counted only when the checks pass"
    assert version.spec["criteria"][-1] == {
        "name": "style___tone_v1",
        "kind": "learned_reward",
        "weight": 0.5,
        # Safe by default: the model cannot pay the policy for failing the rubric's checks.
        "params": {"path": "/srv/reward_models/rm-1", "bounded": True, "only_when_checks_pass": True},
    }
    assert (
        version.spec["criteria"][:-1] == RubricVersion.objects.get(rubric=rubric, number=1).spec["criteria"]
    )
    run.refresh_from_db()
    assert run.rubric_version.number == 1  # the earlier run keeps what it pinned
    assert all(c["kind"] != "learned_reward" for c in run.resolved_config["rubric"]["criteria"])

    new_run, _ = run_create(
        project=project,
        name="with the reward model",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    assert new_run.rubric_version == version
    assert new_run.resolved_config["rubric"]["criteria"][-1]["params"]["path"] == "/srv/reward_models/rm-1"

    # A later edit that keeps the criterion still counts as using the model; v1 never did.
    later = rubric_update(
        rubric=rubric,
        user=users["alice"],
        spec={**version.spec, "aggregation": "weighted_sum", "criteria": version.spec["criteria"][1:]},
    )
    assert [v.number for v in selectors.rubric_versions_using(reward_model)] == [2, later.number]


def test_registration_refuses_what_would_not_make_sense(snapshot, users, project, rubric):
    queued = services.reward_model_train(snapshot=snapshot, user=users["bob"], name="style", dispatch=False)
    with pytest.raises(ValidationError, match="is queued, not ready"):
        services.reward_model_register(reward_model=queued, rubric=rubric, weight=1.0, user=users["bob"])
    reward_model = ready(queued)
    services.reward_model_register(reward_model=reward_model, rubric=rubric, weight=1.0, user=users["bob"])
    with pytest.raises(ValidationError, match="already scores with style v1"):
        services.reward_model_register(
            reward_model=reward_model, rubric=rubric, weight=1.0, user=users["bob"]
        )
    with pytest.raises(ValidationError, match="already has a criterion named 'correct'"):
        services.reward_model_register(
            reward_model=reward_model,
            rubric=rubric_create(
                project=project,
                name="other",
                spec={"criteria": [{"name": "correct", "kind": "numeric_match"}]},
                user=users["bob"],
            ),
            weight=1.0,
            user=users["bob"],
            criterion_name="correct",
        )
    from webapp.projects.services import project_create

    elsewhere = project_create(name="Elsewhere", owner=users["eve"])
    foreign = rubric_create(
        project=elsewhere,
        name="theirs",
        spec={"criteria": [{"name": "c", "kind": "numeric_match"}]},
        user=users["eve"],
    )
    with pytest.raises(ValidationError, match="Choose a rubric of this project"):
        services.reward_model_register(
            reward_model=reward_model, rubric=foreign, weight=1.0, user=users["bob"]
        )
    assert foreign.versions.count() == 1 and Run.objects.count() == 0


def test_the_web_side_of_reward_models_never_imports_torch():
    """Views, forms, services and the worker-side module import torch only inside the training call."""
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import django, os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'webapp.settings'); django.setup();"
        "import webapp.urls, webapp.rewards.views, webapp.rewards.forms, workers.reward_execution, workers.reward_tasks;"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_training_whose_worker_stopped_heartbeating_fails_with_a_reason(snapshot, users):
    now = timezone.now()
    dead = services.reward_model_train(snapshot=snapshot, user=users["bob"], name="dead", dispatch=False)
    busy = services.reward_model_train(snapshot=snapshot, user=users["bob"], name="busy", dispatch=False)
    assert services.reward_model_claim(dead.pk, worker="celery@gone")
    assert services.reward_model_claim(busy.pk, worker="celery@alive")
    RewardModel.objects.update(started_at=now - timedelta(minutes=5))
    worker_report(hostname="celery@alive", queues=["cpu"], gpus=[], cpus=2, ray_address="", pid=1)
    worker_report(hostname="celery@gone", queues=["cpu"], gpus=[], cpus=2, ray_address="", pid=2)
    WorkerNode.objects.filter(hostname="celery@gone").update(last_seen=now - timedelta(minutes=2))

    assert services.reward_models_reap_lost(now=now, timeout_s=45) == [dead.pk]
    dead.refresh_from_db()
    busy.refresh_from_db()
    assert dead.status == "failed" and "celery@gone stopped reporting" in dead.error_message
    assert busy.status == "training"
    assert services.reward_models_reap_lost(now=now, timeout_s=45) == []


def test_an_unreliable_model_needs_an_explicit_override_to_join_a_rubric(snapshot, users, rubric):
    # The walk-through: 0 % held-out accuracy on 2 pairs was marked Ready and added without a word.
    reward_model = ready(
        services.reward_model_train(snapshot=snapshot, user=users["bob"], name="style", dispatch=False),
        accuracy=0.0,
        n_eval=2,
    )
    reliability = reward_model.reliability()
    assert not reliability.reliable and reliability.n == 2 and reliability.low == 0.0
    with pytest.raises(ValidationError) as refused:
        services.reward_model_register(
            reward_model=reward_model, rubric=rubric, weight=1.0, user=users["bob"]
        )
    message = refused.value.message_dict["allow_unreliable"][0]
    assert "not reliable" in message and "includes 50 %" in message and "below the threshold 60%" in message
    version = services.reward_model_register(
        reward_model=reward_model,
        rubric=rubric,
        weight=1.0,
        user=users["bob"],
        allow_unreliable=True,
        only_when_checks_pass=False,
    )
    criterion = version.spec["criteria"][-1]
    assert criterion["params"] == {"path": reward_model.path, "bounded": True, "only_when_checks_pass": False}
    assert "not reliable" in version.note


def test_the_threshold_is_the_users(snapshot, users):
    strict = services.reward_model_train(
        snapshot=snapshot, user=users["bob"], name="strict", dispatch=False, accuracy_threshold=0.95
    )
    assert not ready(strict, accuracy=0.9, n_eval=200).reliability().reliable
    with pytest.raises(ValidationError):
        services.reward_model_train(
            snapshot=snapshot, user=users["bob"], name="x", dispatch=False, accuracy_threshold=1.5
        )
