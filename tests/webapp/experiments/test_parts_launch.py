"""A run can use the training parts its queue's workers have: each worker reports its parts (names,
versions, docstrings, option schemas) with its heartbeat, `GET /api/parts/` and the run form list them,
and a launch naming a part no online worker of the queue has is refused with the reason.

The parts are the example package's (tests/fixtures/rs_example_parts: `median_baseline`, an advantage
estimator, and `temperature_ladder`, a rollout strategy), installed in this venv like any user's package;
a worker without it reports the built-ins only.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from tests.webapp.html_forms import field_errors, flat, form_data, page_errors
from trainers.parts import BUILTIN_PARTS, part_catalogue
from webapp.experiments.models import Run
from webapp.experiments.services import run_create
from webapp.fleet.models import WorkerNode
from webapp.fleet.services import worker_report

EXAMPLE = {"algorithm": "median_baseline", "rollout_strategy": "temperature_ladder"}


def report(hostname: str, queues: list[str], parts: list[dict]) -> None:
    worker_report(hostname=hostname, queues=queues, gpus=[], cpus=2, ray_address="local", pid=1, parts=parts)


def with_example_parts() -> list[dict]:
    return part_catalogue()


def builtins_only() -> list[dict]:
    return [part.describe() for part in BUILTIN_PARTS]


def test_a_worker_reports_its_parts_with_its_heartbeat_and_the_api_lists_them(signed_in):
    report("cpu-box:1", ["cpu"], with_example_parts())
    report("gpu-box:1", ["gpu"], builtins_only())
    assert {p["name"] for p in WorkerNode.objects.get(hostname="cpu-box:1").parts} >= set(EXAMPLE.values())

    body = signed_in("bob").get("/api/parts/?queue=cpu").json()

    assert body["queue"] == "cpu" and body["knobs"]["rollout_strategy"] == "rollout_strategy"
    (ladder,) = [p for p in body["parts"]["rollout_strategy"] if p["name"] == "temperature_ladder"]
    assert ladder["title"] == "Temperature ladder"
    assert "temperatures spread evenly" in ladder["description"]
    assert ladder["options_schema"]["properties"]["spread"]["maximum"] == 1
    assert ladder["source"] == "rs-example-parts" and ladder["version"] == "0.2.0"
    assert ladder["workers"] == [{"hostname": "cpu-box:1", "queues": ["cpu"], "version": "0.2.0"}]
    gpu = signed_in("bob").get("/api/parts/?queue=gpu").json()["parts"]
    assert "median_baseline" not in {p["name"] for p in gpu["advantage_estimator"]}
    assert "grpo" in {p["name"] for p in gpu["advantage_estimator"]}
    assert signed_in("bob").get("/api/parts/?queue=nowhere").status_code == 400


def test_the_api_launches_a_run_with_the_example_parts(signed_in, project, environment, rubric):
    report("cpu-box:1", ["cpu"], with_example_parts())

    response = signed_in("bob").post(
        f"/api/projects/{project.slug}/runs/",
        {
            "name": "median",
            "environment": environment.pk,
            "rubric": rubric.pk,
            "preset": "grpo",
            "overrides": {**EXAMPLE, "part_options": {"rollout_strategy": {"spread": 0.25}}},
        },
        format="json",
    )

    assert response.status_code == 201, response.content
    config = Run.objects.get(name="median").resolved_config
    assert (config["algorithm"], config["rollout_strategy"]) == ("median_baseline", "temperature_ladder")
    assert config["part_options"] == {"rollout_strategy": {"spread": 0.25}}


def test_a_part_no_worker_of_the_queue_has_is_refused_with_the_reason(
    signed_in, project, environment, rubric, users
):
    report("cpu-box:1", ["cpu"], builtins_only())
    report("gpu-box:1", ["gpu"], with_example_parts())  # another queue has it: not this one

    response = signed_in("bob").post(
        f"/api/projects/{project.slug}/runs/",
        {"name": "median", "environment": environment.pk, "rubric": rubric.pk, "overrides": EXAMPLE},
        format="json",
    )

    assert response.status_code == 400, response.content
    fields = response.json()["fields"]
    assert fields["overrides.algorithm"] == [
        "Advantage estimator 'median_baseline' is not installed on any online worker of the cpu queue. "
        "Installed: dapo, dr_grpo, grpo, reinforce_pp, rloo."
    ]
    assert "Rollout strategy 'temperature_ladder'" in fields["overrides.rollout_strategy"][0]
    assert not Run.objects.filter(name="median").exists()
    # The options are checked against the part's own schema, as the workers reported it.
    with pytest.raises(ValidationError) as refused:
        run_create(
            project=project,
            name="median",
            environment=environment,
            rubric=rubric,
            preset="grpo",
            overrides={**EXAMPLE, "part_options": {"rollout_strategy": {"spread": 3}}},
            user=users["bob"],
            queue="gpu",
            dispatch=False,
        )
    assert refused.value.message_dict == {
        "config.part_options.rollout_strategy.spread": ["Spread must be 1 or less (got 3)."]
    }


def test_the_run_form_offers_the_workers_parts_and_launches_with_them(
    client_for, project, environment, rubric
):
    report("cpu-box:1", ["cpu"], with_example_parts())
    bob = client_for("bob")
    url = reverse("experiments:run_create", args=[project.slug])
    page = bob.get(url).content.decode()
    assert '<option value="median_baseline"' in page and '<option value="temperature_ladder"' in page
    assert "Reward minus the group&#x27;s median" in page  # each part's docstring, escaped
    posted = flat(form_data(page.encode(), "run-form"))
    posted.update(
        {
            "name": "median",
            "knob-algorithm": "median_baseline",
            "knob-rollout_strategy": "temperature_ladder",
        }
    )

    response = bob.post(url, posted)

    assert response.status_code == 302, page_errors(response.content)
    run = Run.objects.get(name="median")
    assert (run.resolved_config["algorithm"], run.resolved_config["rollout_strategy"]) == (
        "median_baseline",
        "temperature_ladder",
    )


def test_the_run_form_shows_the_refusal_on_the_knob(client_for, project, environment, rubric):
    report("cpu-box:1", ["cpu"], with_example_parts())
    report("gpu-box:1", ["gpu"], builtins_only())
    bob = client_for("bob")
    url = reverse("experiments:run_create", args=[project.slug])
    posted = flat(form_data(bob.get(url).content, "run-form"))
    posted.update({"name": "median", "queue": "gpu", "knob-rollout_strategy": "temperature_ladder"})

    response = bob.post(url, posted)

    assert response.status_code == 200
    (message,) = field_errors(response.content, "knob-rollout_strategy")
    assert message == (
        "Rollout strategy 'temperature_ladder' is not installed on any online worker of the gpu queue. "
        "Installed: branching, independent."
    )
    assert not Run.objects.filter(name="median").exists()


def test_with_no_worker_of_the_queue_online_a_run_queues_as_it_did(
    signed_in, project, environment, rubric, users
):
    """Only the control worker is up (the cpu one restarting, or waiting for its database after an outage:
    the compose stack's test saw it): the launch is not refused for parts nobody can report; the run
    queues, and the page says no worker serves its queue."""
    report("control-box:1", ["control"], builtins_only())
    response = signed_in("bob").post(
        f"/api/projects/{project.slug}/runs/",
        {"name": "waits", "environment": environment.pk, "rubric": rubric.pk},
        format="json",
    )
    assert response.status_code == 201, response.content
