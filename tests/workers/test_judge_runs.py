"""LLM judges as rewards, end to end: a run launched like a user launches one, trained on a real Celery
worker reporting to a real daphne server, scored by an llm_judge criterion — on the bundled model loaded
by the worker, and on an OpenAI-compatible endpoint (the project's agent gateway, a real HTTP server in
this process) whose key comes from a project secret."""

from __future__ import annotations

import json
import time

import pytest
from django.test import Client

from tests.processes import asgi_server, celery_worker
from webapp.experiments.models import Run
from webapp.experiments.services import environment_create, rubric_create, run_create
from webapp.projects.services import secret_set
from webapp.rollouts.models import MetricPoint, RunEvent, Trajectory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TINY = {
    "group_size": 2,
    "prompts_per_step": 1,
    "max_new_tokens": 8,
    "eval_tasks": 0,
    "checkpoint_every": 0,
    "max_steps": 1,
}
KEY = "sk-judge-4b1e7c"


def launch(project, users, spec: dict, name: str, policy: str) -> Run:
    """A one-step run of `policy` judged by `spec`'s rubric. The judges are what the test is about, so the
    policy is the tiny model: its answers are noise, which a judge scores like any other."""
    environment = environment_create(
        project=project,
        name=f"{name} env",
        kind="arithmetic_calculator",
        config={"max_turns": 1},
        user=users["bob"],
    )
    rubric = rubric_create(project=project, name=f"{name} rubric", spec=spec, user=users["bob"])
    run, _ = run_create(
        project=project,
        name=name,
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={**TINY, "model": policy},
        user=users["bob"],
    )
    return run


def finished(run: Run, timeout_s: float = 1500) -> Run:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in ("SUCCEEDED", "FAILED", "CANCELLED", "LOST"):
            return run
        time.sleep(0.5)
    raise AssertionError(f"run {run.pk} still {run.status} after {timeout_s} s")


def judge_components(run: Run, name: str) -> list[dict]:
    return [
        c
        for t in Trajectory.objects.filter(run=run)
        for c in t.components
        if c.get("name") == name and c.get("kind") == "llm_judge"
    ]


@pytest.mark.timeout(1800)  # two runs and three model loads: 6.5 min at load 14, past 10 min at load 50
def test_judges_on_the_bundled_model_and_on_an_endpoint_reward_runs_that_succeed(
    project, users, tiny_model_path
):
    from trainers.gateway.server import Gateway
    from trainers.rollout.backends import make_backend
    from trainers.rollout.chat import ChatFormat
    from trainers.rollout.toolformats import resolve_tool_format

    backend = make_backend("transformers", model_name="smollm2-135m", device="cpu")
    chat = ChatFormat(backend.tokenizer, resolve_tool_format("studio", backend.tokenizer))
    secret_set(project=project, name="JUDGE_KEY", value=KEY, user=users["bob"])
    local_spec = {
        "criteria": [
            {"name": "correct", "kind": "numeric_match", "weight": 1.0},
            {
                "name": "judge",
                "kind": "llm_judge",
                "weight": 0.5,
                "params": {"model": "smollm2-135m", "max_new_tokens": 6, "reply_prefix": "Score:"},
            },
        ]
    }
    with (
        Gateway(backend, chat, model_name="judge-135m", require_session=False, api_key=KEY) as gateway,
        asgi_server() as url,
        celery_worker("cpu", DASHBOARD_URL=url),
    ):
        endpoint_spec = {
            "criteria": [
                {
                    "name": "ruler",
                    "kind": "llm_judge",
                    "weight": 1.0,
                    "params": {
                        "base_url": f"{gateway.url}/v1",
                        "model": "judge-135m",
                        "api_key_secret": "JUDGE_KEY",
                        "mode": "group",
                        "max_new_tokens": 16,
                        "timeout_s": 600,  # a loaded shared CPU: one reply took 112 s here
                    },
                }
            ]
        }
        local = launch(project, users, local_spec, "judged on the worker", tiny_model_path)
        endpoint = launch(project, users, endpoint_spec, "judged by an endpoint", tiny_model_path)
        local, endpoint = finished(local), finished(endpoint)
        endpoint_calls = gateway.calls

    for run in (local, endpoint):
        assert run.status == "SUCCEEDED", run.error_message + run.error_traceback
    [local_said, _] = judge_components(local, "judge")
    assert local_said["provenance"]["judge_where"] == "model" and "Score:" in local_said["explanation"]
    # Two answers, one or two prompts: identical answers are asked once.
    assert MetricPoint.objects.get(run=local, key="judge/judge/calls").value in (1, 2)
    assert MetricPoint.objects.get(run=local, key="judge/judge/completion_tokens").value > 0

    group = judge_components(endpoint, "ruler")
    assert len(group) == 2 and {c["provenance"]["judge_mode"] for c in group} == {"group"}
    assert endpoint_calls == 1  # the whole group in one prompt
    assert MetricPoint.objects.get(run=endpoint, key="judge/ruler/calls").value == 1
    # The key reached the endpoint (it refuses others) and went nowhere else.
    stored = json.dumps(endpoint.resolved_config) + "".join(
        json.dumps(e.summary) for e in RunEvent.objects.filter(run=endpoint)
    )
    assert KEY not in stored and "JUDGE_KEY" in stored

    client = Client()
    client.force_login(users["dave"])
    page = client.get(f"/p/{project.slug}/runs/{endpoint.pk}/").content.decode()
    assert "LLM judges" in page and "judge-135m at" in page and "whole group in one prompt" in page
    assert KEY not in page
