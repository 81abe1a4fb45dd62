"""ATIF from the web: the trajectory page's download, the run's export and the API, each checked by Harbor's
own pydantic models (tests/harbor_models.py, .venv-harbor) — and read back by our importer unchanged."""

from __future__ import annotations

import json

from django.urls import reverse

from tests.trainers.sdk.test_atif_harbor import harbor_errors
from tests.webapp.factories import make_trajectory
from tests.webapp.rollouts.test_trajectory_view import COMPONENTS, page_url
from tests.webapp.rollouts.test_trajectory_view import solved as solved  # noqa: F401 (the fixture)
from trainers.sdk.atif import atif_to_wire


def test_the_trajectory_page_offers_its_atif_and_harbor_accepts_it(client_for, project, solved):
    dave = client_for("dave")
    page = dave.get(page_url(project, "trajectory_detail", solved.pk)).content.decode()
    assert page_url(project, "trajectory_atif", solved.pk) in page

    response = dave.get(page_url(project, "trajectory_atif", solved.pk))

    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == f'attachment; filename="trajectory-{solved.pk}.atif.json"'
    doc = json.loads(response.content)
    assert harbor_errors([doc]) == [None]
    assert doc["schema_version"] == "ATIF-v1.7"
    call, answer = [s for s in doc["steps"] if s["source"] == "agent"]
    assert call["tool_calls"][0]["function_name"] == "calculator"
    assert call["metrics"]["prompt_token_ids"] == [1, 2, 3, 4, 5] and call["metrics"][
        "completion_token_ids"
    ] == [
        6,
        7,
        8,
        9,
    ]
    assert answer["metrics"]["prompt_token_ids"] == list(range(1, 12))
    back = atif_to_wire(doc)
    assert back["reward"] == 1.4 and back["components"] == COMPONENTS and back["step"] == 3
    assert back["turns"][4]["loss_mask"] == [1, 1, 0, 0, 1] and back["turns"][3]["tool_result"] == "42"


def test_the_run_exports_every_trajectory_and_the_api_serves_both(
    client_for, signed_in, project, run, solved
):
    make_trajectory(run, step=4, split="eval", task_id="eval-1", reward=0.0)
    dave = client_for("dave")
    run_page = dave.get(reverse("experiments:run_detail", args=[project.slug, run.pk])).content.decode()
    assert page_url(project, "run_atif", run.pk) in run_page

    response = dave.get(page_url(project, "run_atif", run.pk))
    lines = b"".join(response.streaming_content).decode().splitlines()
    docs = [json.loads(line) for line in lines]
    assert response["Content-Type"] == "application/x-ndjson" and len(docs) == 2
    assert harbor_errors(docs) == [None, None]
    assert [d["extra"]["rollout_studio"]["step"] for d in docs] == [3, 4]
    evals = dave.get(page_url(project, "run_atif", run.pk, query="?split=eval"))
    assert len(b"".join(evals.streaming_content).splitlines()) == 1
    assert dave.get(page_url(project, "run_atif", run.pk, query="?split=nope")).status_code == 400

    api = signed_in("dave")
    one = api.get(reverse("api:run-trajectory-atif", args=[run.pk, solved.pk]))
    assert one.status_code == 200 and json.loads(one.content)["steps"] == docs[0]["steps"]
    every = api.get(reverse("api:run-atif", args=[run.pk]) + "?step=4")
    assert len(b"".join(every.streaming_content).splitlines()) == 1
    assert api.get(reverse("api:run-atif", args=[run.pk]) + "?step=-1").status_code == 400
    assert signed_in("eve").get(reverse("api:run-atif", args=[run.pk])).status_code == 404
