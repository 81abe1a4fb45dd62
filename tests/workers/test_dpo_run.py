"""A DPO run end to end on a real Celery worker: a preference snapshot → our DPO (tiny settings) →
metrics and checkpoints through the ingestion API → resume → a GRPO run that starts from the DPO
checkpoint; and cancel. Plumbing, not learning: the policy is the tiny random Llama (`tiny_model_path`, a
local model directory), so its checkpoints are a few MB and the GRPO run starts from a local path."""

from __future__ import annotations

import pytest

from tests.processes import asgi_server, celery_worker
from tests.webapp.review_factories import make_group
from tests.workers.test_run_lifecycle import TINY, status_of, wait_for
from webapp.experiments.models import Checkpoint, Run
from webapp.experiments.services import (
    environment_create,
    run_create,
    run_create_dpo,
    run_create_from_checkpoint,
    run_request_cancel,
    run_resume,
)
from webapp.review import services as review
from webapp.rollouts.models import MetricPoint

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DPO_TINY = {"max_steps": 2, "batch_size": 2, "max_length": 96, "save_every": 1, "device": "cpu"}


@pytest.fixture
def snapshot(project, users, run):
    for group in range(3):
        make_group(run, group=group, rewards=[1.0, 0.0], tool=group == 1)
    queue = review.queue_create(
        project=project, user=users["bob"], name="prefs", runs=[run], annotators=[users["carol"]]
    )
    while (assignment := review.next_pair(queue=queue, annotator=users["carol"])) is not None:
        better = "a" if assignment.pair.a.reward >= assignment.pair.b.reward else "b"
        review.judgement_submit(pair=assignment.pair, annotator=users["carol"], choice=better)
    return review.snapshot_create(queue, users["bob"])


def finished(run: Run, timeout_s: float = 420) -> Run:
    wait_for(lambda: status_of(run) in ("SUCCEEDED", "FAILED", "CANCELLED"), timeout_s, f"run {run.pk}")
    run.refresh_from_db()
    assert run.status == "SUCCEEDED", run.error_message + run.error_traceback
    return run


def test_snapshot_to_dpo_run_to_checkpoint_to_resume_and_a_grpo_run_from_it(
    project, users, rubric, snapshot, tiny_model_path
):
    environment = environment_create(
        project=project,
        name="tiny",
        kind="arithmetic_calculator",
        config={"max_turns": 1},
        user=users["alice"],
    )
    with asgi_server() as url, celery_worker("cpu", DASHBOARD_URL=url):
        dpo, _ = run_create_dpo(
            project=project,
            snapshot=snapshot,
            name="dpo",
            params={**DPO_TINY, "model": tiny_model_path},
            user=users["bob"],
        )
        dpo = finished(dpo)
        assert dpo.current_step == 2 and dpo.kind == "dpo"
        for key in ("loss", "dpo/reward_chosen", "dpo/reward_rejected", "dpo/margin", "dpo/accuracy"):
            assert MetricPoint.objects.filter(run=dpo, key=key).count() == 2, key
        steps = list(Checkpoint.objects.filter(run=dpo).values_list("step", flat=True))
        assert steps == [1, 2]
        first = Checkpoint.objects.get(run=dpo, step=1)
        # A DPO run that finished its steps is not resumed (a new run starts from its checkpoint); one stopped
        # on the way is, from any of its checkpoints.
        assert not dpo.can_resume() and "finished its steps" in dpo.resume_refusal()[1]
        Run.objects.filter(pk=dpo.pk).update(status="CANCELLED")
        dpo.refresh_from_db()

        resumed, _ = run_resume(run=dpo, user=users["bob"], checkpoint=first)
        resumed = finished(resumed)
        assert (resumed.lineage, resumed.parent_id, resumed.kind) == ("resume", dpo.pk, "dpo")
        assert list(MetricPoint.objects.filter(run=resumed, key="loss").values_list("step", flat=True)) == [2]

        grpo, _ = run_create_from_checkpoint(
            checkpoint=Checkpoint.objects.get(run=dpo, step=2),
            name="grpo from dpo",
            environment=environment,
            rubric=rubric,
            preset="grpo",
            overrides={**TINY, "max_steps": 1},
            user=users["bob"],
        )
        grpo = finished(grpo)
    assert grpo.lineage == "init" and grpo.parent_id == dpo.pk
    assert grpo.resolved_config["model"] == Checkpoint.objects.get(run=dpo, step=2).path
    assert grpo.parent.preference_snapshot_id == snapshot.pk  # snapshot → DPO run → checkpoint → GRPO run
    assert MetricPoint.objects.filter(run=grpo, key="reward/mean").exists()


def test_cancelling_a_dpo_run_stops_it_with_a_checkpoint(project, users, snapshot, tiny_model_path):
    steps = 5000  # the tiny model steps in milliseconds: far more than it can do before the cancel lands
    with asgi_server() as url, celery_worker("cpu", DASHBOARD_URL=url):
        params = {**DPO_TINY, "max_steps": steps, "save_every": 0, "model": tiny_model_path}
        run, _ = run_create_dpo(
            project=project, snapshot=snapshot, name="long dpo", params=params, user=users["bob"]
        )
        wait_for(lambda: MetricPoint.objects.filter(run=run, key="loss").exists(), 300, "the first step")
        assert run_request_cancel(run=Run.objects.get(pk=run.pk)) == "cancel_requested"
        wait_for(lambda: status_of(run) == "CANCELLED", 180, "the run to stop")
    run.refresh_from_db()
    assert run.current_step < steps
    assert Checkpoint.objects.filter(run=run).exists()  # what it trained is kept, and can be resumed


def test_the_worker_task_of_a_dpo_run_returns_done(project, users, snapshot, tiny_model_path, settings):
    """The task's own answer (what Celery logs) says the run trained: an error raised after the run had
    reported SUCCEEDED went nowhere, since a final run refuses the FAILED transition (seen in the deploy
    tier: a DPO task that ended 'failed' beside a SUCCEEDED run)."""
    from workers import execution

    with asgi_server() as url:
        settings.DASHBOARD_URL = url
        params = {**DPO_TINY, "max_steps": 1, "model": tiny_model_path}
        run, _ = run_create_dpo(
            project=project,
            snapshot=snapshot,
            name="dpo task",
            params=params,
            user=users["bob"],
            dispatch=False,
        )
        answer = execution.execute_run(run.pk, hostname="test@host")
    run.refresh_from_db()
    assert run.status == "SUCCEEDED" and answer == "done (1 steps)", (answer, run.error_traceback)


def test_dpo_and_grpo_start_from_a_lora_grpo_runs_checkpoint(
    project, users, rubric, snapshot, tiny_model_path, signed_in
):
    """The demo trains LoRA: its checkpoint is a model DPO (asked for through the API, as a script would)
    and a new GRPO run start from (the DPO run's policy before its first step is the checkpoint's: its
    held-out margin is 0 against that reference)."""
    environment = environment_create(
        project=project,
        name="tiny",
        kind="arithmetic_calculator",
        config={"max_turns": 1},
        user=users["alice"],
    )
    with asgi_server() as url, celery_worker("cpu", DASHBOARD_URL=url):
        grpo, _ = run_create(
            project=project,
            name="lora grpo",
            environment=environment,
            rubric=rubric,
            preset="grpo",
            overrides={**TINY, "max_steps": 1, "model": tiny_model_path, "lora": {"enabled": True, "r": 4}},
            user=users["bob"],
        )
        grpo = finished(grpo)
        lora_checkpoint = Checkpoint.objects.get(run=grpo, step=1)
        assert lora_checkpoint.kind == "adapter"
        response = signed_in("bob").post(
            f"/api/preference-snapshots/{snapshot.pk}/dpo-runs/",
            {
                "name": "dpo from grpo",
                "config": {**DPO_TINY, "max_steps": 1},
                "from_checkpoint": lora_checkpoint.pk,
            },
            format="json",
        )
        assert response.status_code == 201, response.content
        dpo = finished(Run.objects.get(pk=response.json()["id"]))
        assert dpo.resolved_config["model"] == lora_checkpoint.path
        assert (dpo.lineage, dpo.parent_checkpoint_id) == ("init", lora_checkpoint.pk)
        assert MetricPoint.objects.filter(run=dpo, key="dpo/accuracy").count() == 1
        again, _ = run_create_from_checkpoint(
            checkpoint=lora_checkpoint,
            name="grpo from grpo",
            environment=environment,
            rubric=rubric,
            preset="grpo",
            overrides={**TINY, "max_steps": 1, "eval_tasks": 2},
            user=users["bob"],
        )
        finished(again)
    # Evaluating the checkpoint: a run from it evaluates its policy before the first step.
    assert MetricPoint.objects.filter(run=again, key="eval/accuracy", step=0).exists()
