"""Runs through the pages: launching with a preset and knobs, errors on the knob they concern, the
run list with its filter, the run page and its cancel button."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

from django.urls import reverse
from django.utils import timezone

from tests.webapp.factories import make_run
from tests.webapp.html_forms import field_errors, flat, form_data
from trainers.config import resolve_run_config
from webapp.experiments.models import Checkpoint, Run, RunStatus
from webapp.experiments.services import run_transition


def url(name: str, project, *args) -> str:
    return reverse(f"experiments:{name}", args=[project.slug, *args])


def launch_form(client, project) -> tuple[dict, dict, list]:
    """The run form as posted, each preset's knob values and the knobs a preset choice rewrites."""
    html = client.get(url("run_create", project)).content.decode()
    presets = json.loads(
        re.search(r'<script id="preset-knobs" type="application/json">(.*?)</script>', html, re.S).group(1)
    )
    keys = json.loads(
        re.search(r'<script id="preset-keys" type="application/json">(.*?)</script>', html, re.S).group(1)
    )
    return flat(form_data(html, "run-form")), presets, keys


def choose_preset(posted: dict, preset: str, presets: dict, keys: list) -> None:
    """What run_create.js does when the preset select changes."""
    posted["preset"] = preset
    for name in keys:
        value = presets[preset][name]
        posted[name] = "on" if value is True else ("" if value is False else str(value))
        if value is False:
            posted.pop(name)


def test_it_prefills_every_knob_from_the_default_preset(client_for, project, environment, rubric):
    posted, presets, keys = launch_form(client_for("bob"), project)
    grpo = resolve_run_config("grpo", {})
    assert posted["preset"] == "grpo" and posted["queue"] == "cpu"
    assert posted["knob-group_size"] == str(grpo["group_size"])
    assert posted["knob-loss_agg"] == "seq-mean-token-mean"
    assert posted["knob-lora__r"] == "16"
    assert (
        "knob-environment" not in posted and "knob-rubric" not in posted
    )  # they come from the choices above
    assert presets["dapo"]["knob-clip_high"] == 0.28 and presets["grpo"]["knob-clip_high"] == 0.2
    assert {"knob-clip_high", "knob-dynamic_sampling", "knob-loss_agg"} <= set(keys)


def test_it_launches_a_run_with_the_preset_and_only_the_changed_knobs_as_overrides(
    client_for, project, environment, rubric, monkeypatch, django_capture_on_commit_callbacks
):
    queued = []  # the Celery call itself is the workers' business; here: queued once, after commit
    monkeypatch.setattr(
        "webapp.core.dispatch.celery_app.send_task",
        lambda name, args, queue: queued.append((args[0], queue)) or SimpleNamespace(id="task-1"),
    )
    bob = client_for("bob")
    posted, presets, keys = launch_form(bob, project)
    choose_preset(posted, "dapo", presets, keys)
    posted.update(
        {"name": "dapo try", "queue": "gpu", "knob-learning_rate": "2e-06", "knob-lora__enabled": "on"}
    )

    with django_capture_on_commit_callbacks(execute=True):
        response = bob.post(url("run_create", project), posted)

    run = Run.objects.get(name="dapo try")
    assert response.status_code == 302 and response.url == url("run_detail", project, run.pk)
    assert run.preset == "dapo" and run.queue == "gpu" and run.created_by.username == "bob"
    # The form starts from the bundled model's recommended knobs, so those are overrides too.
    assert run.overrides == {
        "learning_rate": 2e-06,
        "lora": {"enabled": True},
        "max_new_tokens": 48,
        "eval_tasks": 16,
        "eval_every": 10,
    }
    assert run.resolved_config["clip_high"] == 0.28 and run.resolved_config["dynamic_sampling"] is True
    assert run.resolved_config["lora"]["r"] == 16
    assert (
        run.environment_version == environment.latest_version and run.rubric_version == rubric.latest_version
    )
    assert queued == [(run.pk, "gpu")]


def test_it_shows_an_invalid_knob_next_to_it_and_launches_nothing(client_for, project, environment, rubric):
    bob = client_for("bob")
    posted, _presets, _keys = launch_form(bob, project)
    posted.update({"name": "bad", "knob-clip_high": "-1", "knob-lora__r": "0"})

    response = bob.post(url("run_create", project), posted)

    assert response.status_code == 200
    assert field_errors(response.content, "knob-clip_high") == ["Clip high must be 0 or more (got -1.0)."]
    assert field_errors(response.content, "knob-lora__r") == ["Rank must be 1 or more (got 0)."]
    assert flat(form_data(response.content, "run-form"))["knob-clip_high"] == "-1"
    assert Run.objects.count() == 0


def test_it_shows_a_rule_between_knobs_on_the_knob_concerned(client_for, project, environment, rubric):
    bob = client_for("bob")
    posted, _presets, _keys = launch_form(bob, project)
    posted.update({"name": "off policy", "knob-max_staleness": "1", "knob-num_rollout_workers": "0"})
    response = bob.post(url("run_create", project), posted)
    assert field_errors(response.content, "knob-max_staleness") == [
        "Generating ahead (max staleness above 0) needs at least one rollout worker."
    ]
    assert Run.objects.count() == 0


def test_it_refuses_an_unknown_preset_and_a_knob_that_is_not_a_number(
    client_for, project, environment, rubric
):
    bob = client_for("bob")
    posted, _presets, _keys = launch_form(bob, project)
    posted.update({"name": "odd", "preset": "ppo-ultra", "knob-group_size": "many"})
    response = bob.post(url("run_create", project), posted)
    assert field_errors(response.content, "preset") == [
        "Select a valid choice. ppo-ultra is not one of the available choices."
    ]
    assert field_errors(response.content, "knob-group_size") == ["Enter a whole number."]
    assert Run.objects.count() == 0


def test_it_requires_a_name_and_offers_only_this_projects_environments(
    client_for, project, environment, rubric, users
):
    from webapp.experiments.services import environment_create
    from webapp.projects.services import project_create

    elsewhere = environment_create(
        project=project_create(name="Other", owner=users["eve"]),
        name="theirs",
        kind="countdown",
        config={},
        user=users["eve"],
    )
    bob = client_for("bob")
    posted, _presets, _keys = launch_form(bob, project)
    posted.update({"name": "", "environment": str(elsewhere.pk)})
    response = bob.post(url("run_create", project), posted)
    assert field_errors(response.content, "environment") == [
        "Select a valid choice. That choice is not one of the available choices."
    ]
    assert "theirs" not in response.content.decode()
    posted["environment"] = str(environment.pk)
    response = bob.post(url("run_create", project), posted)
    assert field_errors(response.content, "name") == ["Name is required."]
    assert Run.objects.count() == 0


def test_every_error_shows_in_one_pass_and_what_was_typed_stays(client_for, project, environment, rubric):
    bob = client_for("bob")
    posted, _presets, _keys = launch_form(bob, project)
    # A knob that does not parse used to hide the name and schema errors until it was fixed.
    posted.update({"name": "", "knob-group_size": "many", "knob-clip_high": "-1", "knob-learning_rate": "0"})

    response = bob.post(url("run_create", project), posted)

    assert field_errors(response.content, "name") == ["Name is required."]
    assert field_errors(response.content, "knob-group_size") == ["Enter a whole number."]
    assert field_errors(response.content, "knob-clip_high") == ["Clip high must be 0 or more (got -1.0)."]
    assert field_errors(response.content, "knob-learning_rate") == [
        "Learning rate must be more than 0 (got 0.0)."
    ]
    kept = flat(form_data(response.content, "run-form"))
    assert (kept["knob-group_size"], kept["knob-clip_high"], kept["knob-learning_rate"]) == (
        "many",
        "-1",
        "0",
    )
    assert kept["environment"] == str(environment.pk) and kept["rubric"] == str(rubric.pk)
    assert Run.objects.count() == 0


def test_the_run_list_shows_progress_and_filters_by_status(client_for, project, environment, rubric, users):
    make_run(project, environment, rubric, users["bob"], "waiting")
    make_run(
        project,
        environment,
        rubric,
        users["bob"],
        "halfway",
        status=RunStatus.RUNNING,
        current_step=50,
        best_reward=0.625,
    )
    dave = client_for("dave")

    html = dave.get(url("run_list", project)).content.decode()
    assert "waiting" in html and "halfway" in html
    halfway = html.split(">halfway<")[1].split("</tr>")[0]
    assert (
        "status-RUNNING" in halfway
        and "width: 50%" in halfway
        and "50 / 100" in halfway
        and "0.625" in halfway
    )
    assert "New run" not in html  # dave views only

    running = dave.get(url("run_list", project), {"status": "RUNNING"}).content.decode()
    assert "halfway" in running and "waiting" not in running
    everything = dave.get(url("run_list", project), {"status": "NONSENSE"}).content.decode()
    assert "halfway" in everything and "waiting" in everything


def test_the_run_page_shows_what_the_run_used_and_how_it_went(
    client_for, project, environment, rubric, users
):
    parent = make_run(project, environment, rubric, users["bob"], "parent")
    checkpoint = Checkpoint.objects.create(
        run=parent, step=20, path="/runs/1/step-20", metrics={"reward/mean": 0.5, "kl": 1.2750000000000001}
    )
    child = make_run(
        project,
        environment,
        rubric,
        users["bob"],
        "child",
        parent=parent,
        parent_checkpoint=checkpoint,
        lineage="resume",
        status=RunStatus.FAILED,
        error_message="CUDA out of memory",
        error_traceback="Traceback (most recent call last):\n  boom",
        finished_at=timezone.now(),
    )

    html = client_for("dave").get(url("run_detail", project, child.pk)).content.decode()

    assert "status-FAILED" in html and "CUDA out of memory" in html
    assert '<pre class="traceback">Traceback (most recent call last):\n  boom</pre>' in html
    assert f'href="{url("environment_detail", project, environment.pk)}#v1"' in html
    assert f'href="{url("rubric_detail", project, rubric.pk)}#v1"' in html
    assert f'href="{url("run_detail", project, parent.pk)}"' in html and "at checkpoint step 20" in html
    assert "&quot;clip_high&quot;: 0.2" in html  # the resolved config as JSON
    assert '<div id="live"></div>' in html
    assert "Cancel run" not in html
    parent_html = client_for("dave").get(url("run_detail", project, parent.pk)).content.decode()
    # dave views: the metrics formatted (a key one as its column), a download link, no server path.
    assert "/runs/1/step-20" not in parent_html
    assert '<td class="num metric">0.5</td>' in parent_html and "kl=1.275" in parent_html
    table = parent_html.split("<h2>Checkpoints</h2>")[1].split("Resolved config")[0]
    assert "1.2750000000000001" not in table
    assert f"/api/runs/{parent.pk}/checkpoints/" in parent_html
    assert f'href="{url("run_detail", project, child.pk)}"' in parent_html  # continued by the child


def test_the_cancel_button_cancels_a_queued_run_at_once(client_for, project, run):
    bob = client_for("bob")
    assert "Cancel run" in bob.get(url("run_detail", project, run.pk)).content.decode()

    response = bob.post(url("run_cancel", project, run.pk), follow=True)

    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert "Run cancelled before it started." in response.content.decode()


def test_the_cancel_button_asks_a_running_run_to_stop(client_for, project, run):
    run_transition(run.pk, RunStatus.STARTING)
    run_transition(run.pk, RunStatus.RUNNING)
    response = client_for("bob").post(url("run_cancel", project, run.pk), follow=True)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.cancel_requested
    html = response.content.decode()
    assert "Cancellation requested" in html and "cancel requested" in html


def test_the_cancel_button_explains_why_a_finished_run_cannot_be_cancelled(client_for, project, run):
    run_transition(run.pk, RunStatus.FAILED, error_message="boom")
    response = client_for("bob").post(url("run_cancel", project, run.pk), follow=True)
    assert "A failed run cannot be cancelled." in response.content.decode()


def test_the_form_starts_from_what_the_learning_bench_measured_on_the_bundled_model(client_for, project):
    html = client_for("bob").get(url("run_create", project)).content.decode()
    posted = flat(form_data(html, "run-form"))
    assert posted["knob-model"] == "smollm2-135m"
    assert (posted["knob-learning_rate"], posted["knob-max_new_tokens"], posted["knob-eval_tasks"]) == (
        "2e-05",
        "48",
        "16",
    )
    assert "Measured on SmolLM2-135M by bench/learning.py" in html


def test_naming_a_model_gives_its_recommended_knobs_and_why(client_for, project):
    bob = client_for("bob")
    small = bob.get(url("run_recommended_knobs", project), {"model": "HuggingFaceTB/SmolLM2-360M-Instruct"})
    assert small.json()["fields"]["knob-learning_rate"] == 2e-05
    assert small.json()["fields"]["knob-max_new_tokens"] == 48
    assert "bench/learning.py" in small.json()["why"]
    big = bob.get(url("run_recommended_knobs", project), {"model": "meta-llama/Llama-3.1-8B"}).json()
    assert big["fields"] == {} and "general defaults" in big["why"]
