"""Names and texts users (and models, and trainers) write are shown as text, never run as markup; and
rendering the form pages keeps torch out of the web process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from webapp.experiments.models import Checkpoint, Run
from webapp.experiments.services import environment_create, rubric_create, run_create
from webapp.projects.models import Membership
from webapp.projects.services import project_create

SCRIPT = "<script>alert(1)</script>"
IMAGE = "<img src=x onerror=alert(1)>"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
ESCAPED_IMAGE = "&lt;img src=x onerror=alert(1)&gt;"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def hostile(users):
    """A project where everything a user can name is named with a script tag."""
    alice = users["alice"]
    project = project_create(name=SCRIPT, owner=alice, description=IMAGE)
    Membership.objects.create(project=project, user=users["dave"], role="viewer")
    environment = environment_create(
        project=project,
        name=SCRIPT,
        kind="from_dataset",
        config={"path": SCRIPT, "system_prompt": IMAGE},
        user=alice,
        description=IMAGE,
    )
    spec = {
        "aggregation": "weighted_sum",
        "criteria": [{"name": SCRIPT, "kind": "exact_match", "weight": 1.0, "params": {"target": IMAGE}}],
    }
    rubric = rubric_create(project=project, name=SCRIPT, spec=spec, user=alice, description=IMAGE)
    run, _token = run_create(
        project=project,
        name=SCRIPT,
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={"best_metric": SCRIPT},
        user=alice,
        dispatch=False,
    )
    Run.objects.filter(pk=run.pk).update(
        status="FAILED", error_message=IMAGE, error_traceback=f"Traceback\n{IMAGE}\n{SCRIPT}"
    )
    Checkpoint.objects.create(run=run, step=1, path=SCRIPT, metrics={SCRIPT: 1})
    return {"project": project, "environment": environment, "rubric": rubric, "run": run}


def pages_showing_names(h: dict) -> list[str]:
    slug = h["project"].slug
    return [
        reverse("projects:list"),
        reverse("projects:home", args=[slug]),
        reverse("projects:members", args=[slug]),
        reverse("experiments:environment_list", args=[slug]),
        reverse("experiments:environment_detail", args=[slug, h["environment"].pk]),
        reverse("experiments:environment_edit", args=[slug, h["environment"].pk]),
        reverse("experiments:rubric_list", args=[slug]),
        reverse("experiments:rubric_detail", args=[slug, h["rubric"].pk]),
        reverse("experiments:rubric_edit", args=[slug, h["rubric"].pk]),
        reverse("experiments:run_list", args=[slug]),
        reverse("experiments:run_create", args=[slug]),
        reverse("experiments:run_detail", args=[slug, h["run"].pk]),
    ]


def test_every_page_shows_hostile_names_as_text(client_for, hostile):
    alice = client_for("alice")
    for url in pages_showing_names(hostile):
        html = alice.get(url).content.decode()
        assert SCRIPT not in html, url
        assert IMAGE not in html, url
        assert ESCAPED_SCRIPT in html, url


def test_the_run_page_shows_an_error_and_traceback_as_text(client_for, hostile):
    html = (
        client_for("dave")
        .get(reverse("experiments:run_detail", args=[hostile["project"].slug, hostile["run"].pk]))
        .content.decode()
    )
    assert f'<p class="error-message" data-run-error>{ESCAPED_IMAGE}</p>' in html
    assert f'<pre class="traceback">Traceback\n{ESCAPED_IMAGE}\n{ESCAPED_SCRIPT}</pre>' in html


def test_errors_that_repeat_what_was_typed_are_escaped(client_for, hostile):
    slug = hostile["project"].slug
    alice = client_for("alice")
    duplicate = alice.post(
        reverse("experiments:environment_create", args=[slug]), {"name": SCRIPT, "kind": "countdown"}
    )
    unknown_kind = alice.post(
        reverse("experiments:rubric_create", args=[slug]),
        {
            "name": "x",
            "aggregation": "weighted_sum",
            "criteria-0-name": "c",
            "criteria-0-kind": SCRIPT,
            "criteria-0-weight": "1",
        },
    )
    no_user = alice.post(reverse("projects:members", args=[slug]), {"username": SCRIPT, "role": "viewer"})
    for response in (duplicate, unknown_kind, no_user):
        html = response.content.decode()
        assert response.status_code == 200 and SCRIPT not in html and ESCAPED_SCRIPT in html


def test_the_preview_shows_model_output_as_text(client_for, hostile):
    response = client_for("alice").post(
        reverse("experiments:rubric_preview", args=[hostile["project"].slug]),
        {
            "aggregation": "weighted_sum",
            "criteria-0-name": SCRIPT,
            "criteria-0-kind": "exact_match",
            "criteria-0-weight": "1",
            "criteria-0-params-extract": "full",
            "criteria-0-params-match": "equals",
            "preview-transcript": f"user: hi\nassistant: {IMAGE}",
            "preview-answer": SCRIPT,
        },
    )
    html = response.content.decode()
    assert SCRIPT not in html and IMAGE not in html
    assert ESCAPED_SCRIPT in html


# Renders every form page and posts a rubric preview in a fresh interpreter (its own throwaway
# SQLite database), then reports which heavy modules got imported.
TORCH_FREE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import django
    django.setup()
    from django.core.management import call_command
    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse
    from webapp.experiments.services import environment_create, rubric_create, run_create
    from webapp.projects.services import project_create

    alice = get_user_model().objects.create_user("alice")  # no password: force_login, no slow hashing
    project = project_create(name="Agents", owner=alice)
    environment = environment_create(project=project, name="arith", kind="arithmetic_calculator", config={}, user=alice)
    spec = {"aggregation": "weighted_sum", "criteria": [
        {"name": "judge", "kind": "llm_judge", "weight": 1.0, "params": {}},
        {"name": "reward model", "kind": "learned_reward", "weight": 1.0, "params": {"path": "/nowhere"}},
        {"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}}]}
    rubric = rubric_create(project=project, name="r", spec=spec, user=alice)
    run, _ = run_create(project=project, name="run", environment=environment, rubric=rubric, preset="grpo",
                        overrides={}, user=alice, dispatch=False)
    client = Client()
    client.force_login(alice)
    s = project.slug
    statuses = {}
    for url in [
        reverse("experiments:environment_create", args=[s]),
        reverse("experiments:environment_edit", args=[s, environment.pk]),
        reverse("experiments:environment_config_fields", args=[s]) + "?kind=python_tool",
        reverse("experiments:rubric_create", args=[s]),
        reverse("experiments:rubric_edit", args=[s, rubric.pk]),
        reverse("experiments:criterion_params", args=[s]) + "?kind=learned_reward&prefix=criteria-0-params",
        reverse("experiments:run_create", args=[s]),
        reverse("experiments:run_detail", args=[s, run.pk]),
        reverse("projects:members", args=[s]),
        reverse("accounts:tokens"),
    ]:
        statuses[url] = client.get(url).status_code
    preview = client.post(reverse("experiments:rubric_preview", args=[s]), {
        "aggregation": "weighted_sum",
        "criteria-0-name": "judge", "criteria-0-kind": "llm_judge", "criteria-0-weight": "1",
        "criteria-1-name": "rm", "criteria-1-kind": "learned_reward", "criteria-1-weight": "1",
        "criteria-1-params-path": "/nowhere", "criteria-1-params-batch_size": "8",
        "criteria-2-name": "correct", "criteria-2-kind": "numeric_match", "criteria-2-weight": "1",
        "preview-transcript": "user: 2+2?\\nassistant: <answer>4</answer>", "preview-answer": "4"})
    statuses["preview"] = preview.status_code
    print(json.dumps({
        "statuses": statuses,
        "preview_mentions_workers": "scored on workers" in preview.content.decode(),
        "heavy": sorted(m for m in ("torch", "transformers", "ray", "vllm", "peft") if m in sys.modules),
    }))
    """
)


def test_rendering_every_form_page_does_not_import_torch(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "ROLLOUT_STUDIO_VAR": str(tmp_path),
        "DATABASE_URL": "",  # a throwaway SQLite file under tmp_path, whatever the suite runs on
        # The channel layer of the suite's Redis: broadcasts after commit need somewhere to go.
        "REDIS_URL": django_settings.REDIS_URL,
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-c", TORCH_FREE_SCRIPT],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(report["statuses"].values()) == {200}, report["statuses"]
    assert report["preview_mentions_workers"]
    assert report["heavy"] == []
