"""The curriculum's LLM generator from the dashboard's side: a launch refuses a generator model no worker
serves (the valid names shown), a key secret the project lacks, an endpoint that does not answer — on the
knob's own field, nothing queued; and the task_pool events it sends keep their generator and refusals, shown
on the run page's panel."""

from __future__ import annotations

import json
import socket

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.factories import make_run
from webapp.experiments.models import Run, RunStatus
from webapp.experiments.services import run_create
from webapp.projects.services import secret_set
from webapp.recipes.models import TaskPoolStep


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(project, environment, rubric, user, **knobs) -> Run:
    run, _ = run_create(
        project=project,
        name="curriculum",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={"curriculum": "from_failures", **knobs},
        user=user,
    )
    return run


def test_a_typo_in_the_generator_model_is_refused_at_launch_with_the_valid_names(
    project, environment, rubric, users, django_capture_on_commit_callbacks
):
    with (
        django_capture_on_commit_callbacks(execute=False) as queued,
        pytest.raises(ValidationError) as refused,
    ):
        launch(project, environment, rubric, users["bob"], curriculum_generator_model="smolm2-135m")
    [message] = refused.value.message_dict["config.curriculum_generator_model"]
    assert "No worker serves a judge model 'smolm2-135m'. Did you mean 'smollm2-135m'?" in message
    assert not Run.objects.exists() and not queued
    run = launch(project, environment, rubric, users["bob"], curriculum_generator_model="smollm2-135m")
    assert run.resolved_config["curriculum_generator"] == "auto"  # auto: the LLM, since a model is named


def test_an_llm_generator_without_a_model_is_a_knob_error(project, environment, rubric, users):
    with pytest.raises(ValidationError) as refused:
        launch(project, environment, rubric, users["bob"], curriculum_generator="llm")
    assert "needs a model" in refused.value.message_dict["config.curriculum_generator_model"][0]


def test_a_generator_endpoint_needs_a_secret_of_the_project_and_an_answer(
    project, environment, rubric, users
):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    knobs = {
        "curriculum_generator_model": "tutor",
        "curriculum_generator_base_url": url,
        "curriculum_generator_api_key_secret": "TUTOR_KEY",
    }
    with pytest.raises(ValidationError) as refused:
        launch(project, environment, rubric, users["bob"], **knobs)
    assert (
        "no secret named 'TUTOR_KEY'"
        in refused.value.message_dict["config.curriculum_generator_api_key_secret"][0]
    )
    secret_set(project=project, name="TUTOR_KEY", value="sk-x", user=users["bob"])
    with pytest.raises(ValidationError) as refused:
        launch(project, environment, rubric, users["bob"], **knobs)
    [message] = refused.value.message_dict["config.curriculum_generator_base_url"]
    assert message.startswith("Cannot reach the judge endpoint " + url)
    # The environment's own generator asks for none of it.
    launch(project, environment, rubric, users["bob"], **knobs, curriculum_generator="environment")


def test_the_api_answers_a_bad_generator_with_a_400_naming_the_knob(project, environment, rubric, signed_in):
    response = signed_in("bob").post(
        f"/api/projects/{project.slug}/runs/",
        json.dumps(
            {
                "name": "r",
                "environment": environment.pk,
                "rubric": rubric.pk,
                "preset": "grpo",
                "overrides": {"curriculum": "from_failures", "curriculum_generator_model": "gpt-17"},
            }
        ),
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "No worker serves a judge model 'gpt-17'" in json.dumps(response.json())
    assert not Run.objects.exists()


def test_the_pool_keeps_its_generator_and_refusals_and_the_panel_has_room_for_them(
    project, environment, rubric, users, client, signed_in
):
    run = make_run(project, environment, rubric, users["bob"], overrides={"curriculum": "from_failures"})
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    child = {
        "id": "llm-1",
        "prompt": '<img src=x onerror="alert(1)"> What is 36 + 48?',
        "parent": "t-hard",
        "generator": "llm:tutor",
        "born": 1,
    }
    event = {
        "seq": 1,
        "type": "task_pool",
        "step": 1,
        "size": 2,
        "frontier": 1,
        "drawn": {"tasks": 2, "frontier": 0, "replay": 0},
        "generator": "llm:tutor",
        "generated": 1,
        "refused": {"wrong_answer": 1, "no_answer": 2},
        "entries": [{"id": "t-hard", "state": "failed", "rate": 0.0, "attempts": 1}, child],
    }
    response = client.post(
        f"/api/runs/{run.pk}/events",
        {"events": [event]},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {run.ingest_token()}",
    )
    assert response.status_code == 200, response.content
    summary = TaskPoolStep.objects.get(run=run, step=1).summary()
    assert (summary["generator"], summary["generated"]) == ("llm:tutor", 1)
    assert summary["refused"] == {"wrong_answer": 1, "no_answer": 2}
    assert summary["entries"][1]["generator"] == "llm:tutor"
    page = signed_in("bob").get(f"/p/{project.slug}/runs/{run.pk}/").content.decode()
    assert "data-task-pool-refused" in page and "<th>Generator</th>" in page
    assert "onerror" not in page  # the model's text reaches the page only through the panel's script


def test_the_worker_hands_the_trainer_the_generators_key_and_no_other(project, environment, rubric, users):
    from workers.execution import judge_secrets

    secret_set(project=project, name="TUTOR_KEY", value="sk-tutor", user=users["bob"])
    secret_set(project=project, name="OTHER", value="sk-other", user=users["bob"])
    overrides = {
        "curriculum": "from_failures",
        "curriculum_generator": "environment",  # not asked at launch: the key is still handed over
        "curriculum_generator_api_key_secret": "TUTOR_KEY",
    }
    run = make_run(project, environment, rubric, users["bob"], overrides=overrides)
    assert judge_secrets(run, run.resolved_config["rubric"]) == {"TUTOR_KEY": "sk-tutor"}
