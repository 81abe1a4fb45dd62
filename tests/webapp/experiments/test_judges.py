"""A rubric's LLM judges are checked where a person can fix them: the judge model is one the workers
serve (valid names shown on a typo), an endpoint's key is a secret of the project, and a launch refuses a
judge endpoint the run cannot reach — a field error, nothing queued."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from webapp.experiments.judges import judge_model_choices
from webapp.experiments.models import Run
from webapp.experiments.services import rubric_create, run_create
from webapp.fleet.services import worker_report
from webapp.projects.services import secret_set


def judge_rubric(**params) -> dict:
    return {
        "criteria": [
            {"name": "correct", "kind": "numeric_match", "weight": 1.0},
            {"name": "tone", "kind": "llm_judge", "weight": 0.5, "params": params},
        ]
    }


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report_worker(name: str, models: list[str]) -> None:
    worker_report(hostname=name, queues=["cpu"], gpus=[], cpus=2, ray_address="local", pid=1, models=models)


def test_the_pick_list_is_what_the_online_workers_serve(db):
    assert judge_model_choices()[:2] == ["policy", "smollm2-135m"]  # no worker online: this machine's
    report_worker("w1", ["smollm2-135m", "Qwen/Qwen3-0.6B"])
    report_worker("w2", ["/models/judge"])
    assert judge_model_choices() == ["policy", "/models/judge", "Qwen/Qwen3-0.6B", "smollm2-135m"]
    from webapp.fleet.models import WorkerNode

    WorkerNode.objects.filter(hostname="w2").update(last_seen=timezone.now() - timedelta(minutes=5))
    assert "/models/judge" not in judge_model_choices()


def test_a_typo_in_the_judge_model_names_the_valid_ones(project, users):
    with pytest.raises(ValidationError) as refused:
        rubric_create(
            project=project, name="judged", spec=judge_rubric(model="smolm2-135m"), user=users["bob"]
        )
    [message] = refused.value.message_dict["criteria.1.params.model"]
    assert "No worker serves a judge model 'smolm2-135m'. Did you mean 'smollm2-135m'?" in message
    assert "Valid names: policy, smollm2-135m" in message
    rubric_create(project=project, name="judged", spec=judge_rubric(model="smollm2-135m"), user=users["bob"])


def test_an_endpoint_judge_needs_a_secret_the_project_has(project, users):
    spec = judge_rubric(base_url="http://127.0.0.1:9/v1", model="m", api_key_secret="JUDGE_KEY")
    with pytest.raises(ValidationError) as refused:
        rubric_create(project=project, name="judged", spec=spec, user=users["bob"])
    assert "no secret named 'JUDGE_KEY'" in refused.value.message_dict["criteria.1.params.api_key_secret"][0]
    secret_set(project=project, name="JUDGE_KEY", value="sk-x", user=users["bob"])
    rubric_create(project=project, name="judged", spec=spec, user=users["bob"])  # saved: not asked yet


def test_a_launch_refuses_an_unreachable_judge_endpoint_before_anything_is_queued(
    project, environment, users, django_capture_on_commit_callbacks
):
    secret_set(project=project, name="JUDGE_KEY", value="sk-x", user=users["bob"])
    url = f"http://127.0.0.1:{closed_port()}/v1"
    rubric = rubric_create(
        project=project,
        name="judged",
        spec=judge_rubric(base_url=url, model="judge", api_key_secret="JUDGE_KEY"),
        user=users["bob"],
    )
    with (
        django_capture_on_commit_callbacks(execute=False) as queued,
        pytest.raises(ValidationError) as refused,
    ):
        run_create(
            project=project,
            name="judged run",
            environment=environment,
            rubric=rubric,
            preset="grpo",
            overrides={},
            user=users["bob"],
        )
    [message] = refused.value.message_dict["rubric"]
    assert message.startswith("Criterion 2 (tone) · params.base_url: Cannot reach the judge endpoint " + url)
    assert not Run.objects.exists() and not queued


def test_the_run_form_shows_the_refusal_on_the_rubric_field(project, environment, users, client_for):
    rubric = rubric_create(
        project=project,
        name="judged",
        spec=judge_rubric(base_url=f"http://127.0.0.1:{closed_port()}/v1", model="judge"),
        user=users["bob"],
    )
    response = client_for("bob").post(
        f"/p/{project.slug}/runs/new/",
        {"name": "r", "environment": environment.pk, "rubric": rubric.pk, "preset": "grpo", "queue": "cpu"},
    )
    assert response.status_code == 200  # the form again, with the error on its rubric field
    assert "Cannot reach the judge endpoint" in response.content.decode()
    assert not Run.objects.exists()
