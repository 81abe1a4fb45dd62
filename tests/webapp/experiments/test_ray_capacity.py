"""The launch refuses a run whose Ray actors no worker's cluster can hold, naming the shortfall: the run
form shows it on the knob, POST /api/projects/<slug>/runs/ answers 400 with it, and nothing is queued.

Workers report the Ray cluster they run on (`WorkerNode.ray_resources`); the rule is the trainer's own
(`trainers.learn.distributed.launch_shortfall`). A worker that reported no cluster refuses nothing, nor
does one worker short while another of the queue has room, nor a worker offline.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from tests.webapp.html_forms import field_errors, flat, form_data
from webapp.experiments.capacity import ray_capacity_errors
from webapp.experiments.models import Run
from webapp.experiments.services import run_create
from webapp.fleet.models import WorkerNode
from webapp.fleet.services import worker_report

CUDA_PAIR = {"device": "cuda", "num_rollout_workers": 2}  # two rollout workers, a GPU each


def report(hostname: str, queues: list[str], resources: dict, *, ray_address: str = "ray-head:6379") -> None:
    worker_report(
        hostname=hostname,
        queues=queues,
        gpus=[],
        cpus=16,
        ray_address=ray_address,
        pid=1,
        ray_resources=resources,
    )


def launch(project, environment, rubric, users, overrides: dict, queue: str = "gpu") -> Run:
    run, _token = run_create(
        project=project,
        name="wide",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides=overrides,
        user=users["bob"],
        queue=queue,
        dispatch=False,
    )
    return run


def test_a_cuda_run_needing_more_gpus_than_the_cluster_has_is_refused_naming_them(
    project, environment, rubric, users
):
    report("gpu-box:1", ["gpu"], {"CPU": 16.0, "GPU": 1.0, "memory": 1e10})

    with pytest.raises(ValidationError) as refused:
        launch(project, environment, rubric, users, CUDA_PAIR)

    (message,) = refused.value.message_dict["config.num_rollout_workers"]
    assert "No worker of the gpu queue can place this run's Ray actors (gpu-box:1)" in message
    assert "it needs 2 GPU (the cluster has 1)" in message
    assert not Run.objects.filter(name="wide").exists()
    # One GPU each for one rollout worker fits; a CPU run asks for none.
    assert launch(project, environment, rubric, users, {**CUDA_PAIR, "num_rollout_workers": 1})
    assert launch(project, environment, rubric, users, {"device": "cpu", "num_rollout_workers": 2})


def test_learner_shards_count_too(project, environment, rubric, users):
    report("gpu-box:1", ["gpu"], {"CPU": 16.0, "GPU": 1.0})
    errors = ray_capacity_errors(queue="gpu", config={"device": "cuda", "num_learner_workers": 2})
    assert "it needs 2 GPU (the cluster has 1)" in errors["config.num_learner_workers"][0]


def test_a_cluster_short_of_cpus_is_refused_but_a_local_ray_is_sized_for_the_run(users):
    report("small:1", ["cpu"], {"CPU": 2.0})
    wide = {"device": "cpu", "num_rollout_workers": 4, "num_learner_workers": 1}
    assert (
        "it needs 4 CPU (the cluster has 2)"
        in ray_capacity_errors(queue="cpu", config=wide)["config.num_rollout_workers"][0]
    )
    # Without RAY_ADDRESS the trainer starts a Ray with a CPU per actor: only GPUs can be short there.
    report("small:1", ["cpu"], {"CPU": 2.0}, ray_address="local")
    assert ray_capacity_errors(queue="cpu", config=wide) == {}
    gpu_less = ray_capacity_errors(queue="cpu", config={**wide, "device": "cuda"})
    assert "it needs 4 GPU (the cluster has 0)" in gpu_less["config.num_rollout_workers"][0]


def test_unknown_or_roomy_or_absent_workers_refuse_nothing(project, environment, rubric, users):
    assert ray_capacity_errors(queue="gpu", config=CUDA_PAIR) == {}  # no worker online at all
    report("gpu-box:1", ["gpu"], {})  # reported no cluster: unknown
    assert ray_capacity_errors(queue="gpu", config=CUDA_PAIR) == {}
    report("gpu-box:1", ["gpu"], {"CPU": 16.0, "GPU": 1.0})
    report("gpu-box:2", ["gpu"], {"CPU": 16.0, "GPU": 4.0})  # another worker of the queue has room
    assert ray_capacity_errors(queue="gpu", config=CUDA_PAIR) == {}
    WorkerNode.objects.filter(hostname="gpu-box:2").update(last_seen=timezone.now() - timedelta(minutes=5))
    assert ray_capacity_errors(queue="gpu", config=CUDA_PAIR)  # offline: only gpu-box:1 counts
    assert ray_capacity_errors(queue="cpu", config=CUDA_PAIR) == {}  # nobody serves cpu
    assert (
        ray_capacity_errors(queue="gpu", config={"device": "cuda", "num_rollout_workers": 0}) == {}
    )  # no Ray


def test_an_automatic_resume_is_not_refused(project, environment, rubric, users):
    report("gpu-box:1", ["gpu"], {"CPU": 16.0, "GPU": 1.0})
    run, _token = run_create(
        project=project,
        name="resumed",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides=CUDA_PAIR,
        user=users["bob"],
        queue="gpu",
        dispatch=False,
        auto_resume_count=1,
    )
    assert run.pk


def test_the_run_form_shows_the_shortfall_on_the_knob_and_launches_nothing(
    client_for, project, environment, rubric
):
    report("gpu-box:1", ["gpu"], {"CPU": 16.0, "GPU": 1.0})
    bob = client_for("bob")
    url = reverse("experiments:run_create", args=[project.slug])
    posted = flat(form_data(bob.get(url).content, "run-form"))
    posted.update({"name": "wide", "queue": "gpu", "knob-device": "cuda", "knob-num_rollout_workers": "2"})

    response = bob.post(url, posted)

    assert response.status_code == 200
    (message,) = field_errors(response.content, "knob-num_rollout_workers")
    assert "it needs 2 GPU (the cluster has 1)" in message and "gpu-box:1" in message
    assert not Run.objects.filter(name="wide").exists()


def test_the_api_answers_400_naming_the_shortfall(signed_in, project, environment, rubric):
    report("gpu-box:1", ["gpu"], {"CPU": 16.0, "GPU": 1.0})

    response = signed_in("bob").post(
        f"/api/projects/{project.slug}/runs/",
        {
            "name": "wide",
            "environment": environment.pk,
            "rubric": rubric.pk,
            "preset": "grpo",
            "queue": "gpu",
            "overrides": CUDA_PAIR,
        },
        format="json",
    )

    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"] == "validation_failed"
    (message,) = body["fields"]["overrides.num_rollout_workers"]
    assert "(gpu-box:1)" in message and "it needs 2 GPU (the cluster has 1)" in message
    assert not Run.objects.filter(name="wide").exists()
