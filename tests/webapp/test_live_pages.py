"""The HTTP side of the live pages: the run page's live part, events.json, and compare."""

from __future__ import annotations

import json

from tests.conftest import RUBRIC_SPEC
from webapp.experiments.services import environment_create, rubric_create, rubric_update, run_create
from webapp.projects.services import project_create
from webapp.rollouts.models import RunEvent


def make_run(project, environment, rubric, user, name, **overrides):
    run, _token = run_create(project=project, name=name, environment=environment, rubric=rubric, preset="grpo",
                             overrides=overrides, user=user, dispatch=False)
    return run


def test_the_run_page_carries_the_live_part(client_for, run):
    html = client_for("dave").get(f"/p/{run.project.slug}/runs/{run.pk}/").content.decode()
    assert 'id="run-live"' in html and f'data-ws-path="/ws/runs/{run.pk}/"' in html
    assert f'data-metrics-url="/p/{run.project.slug}/runs/{run.pk}/metrics.json"' in html
    assert "js/run_live.js" in html and "plotly/plotly.min.js" in html


def test_events_json_gives_the_newest_events_of_one_type_oldest_first(client_for, run):
    RunEvent.objects.bulk_create(
        RunEvent(run=run, seq=seq, type="log" if seq % 2 else "metrics", summary={"seq": seq, "type": "log"})
        for seq in range(1, 21)
    )
    url = f"/p/{run.project.slug}/runs/{run.pk}/events.json"
    body = client_for("carol").get(url, {"type": "log", "limit": 3, "until_seq": 15}).json()
    assert [e["seq"] for e in body["events"]] == [11, 13, 15]
    assert client_for("carol").get(url, {"type": "secrets"}).status_code == 400


def test_events_json_hides_the_run_from_outsiders(client, client_for, run):
    url = f"/p/{run.project.slug}/runs/{run.pk}/events.json"
    assert client.get(url).status_code == 404
    assert client_for("eve").get(url).status_code == 404


def test_compare_lists_only_the_knobs_that_differ(client_for, project, environment, rubric, users):
    first = make_run(project, environment, rubric, users["bob"], "baseline")
    rubric_update(rubric=rubric, user=users["bob"], spec={**RUBRIC_SPEC, "aggregation": "group_normalized_sum"})
    second = make_run(project, environment, rubric, users["bob"], "hotter", kl_coef=0.05)

    response = client_for("dave").get(f"/p/{project.slug}/compare/", {"runs": f"{first.pk},{second.pk}"})
    assert response.status_code == 200
    knobs = {row["knob"]: row["values"] for row in response.context["differences"]}
    assert knobs["kl_coef"] == [json.dumps(first.resolved_config["kl_coef"]), "0.05"]
    assert knobs["rubric.version"] == ['"correctness v1"', '"correctness v2"']
    assert knobs["rubric.aggregation"] == ['"weighted_sum"', '"group_normalized_sum"']
    assert "learning_rate" not in knobs and "environment.version" not in knobs and "group_size" not in knobs
    html = response.content.decode()
    assert "<code>kl_coef</code>" in html and 'id="compare-runs"' in html and "js/compare.js" in html
    live = json.loads(html.split('id="compare-runs" type="application/json">')[1].split("</script>")[0])
    assert [r["id"] for r in live] == [first.pk, second.pk]
    assert live[0]["metrics_url"] == f"/p/{project.slug}/runs/{first.pk}/metrics.json"


def test_compare_ignores_runs_of_other_projects_and_hides_the_project_from_outsiders(
    client_for, project, environment, rubric, users
):
    mine = make_run(project, environment, rubric, users["bob"], "mine")
    elsewhere = project_create(name="Elsewhere", owner=users["eve"])
    theirs = make_run(
        elsewhere,
        environment_create(project=elsewhere, name="e", kind="arithmetic_calculator", config={}, user=users["eve"]),
        rubric_create(project=elsewhere, name="r", spec=RUBRIC_SPEC, user=users["eve"]),
        users["eve"],
        "secret run",
    )
    response = client_for("alice").get(f"/p/{project.slug}/compare/", {"runs": f"{mine.pk},{theirs.pk}"})
    assert [run.pk for run in response.context["runs"]] == [mine.pk]
    assert "secret run" not in response.content.decode()
    assert client_for("eve").get(f"/p/{project.slug}/compare/", {"runs": str(mine.pk)}).status_code == 404


def test_compare_accepts_the_picker_form_and_escapes_names(client_for, project, environment, rubric, users):
    first = make_run(project, environment, rubric, users["bob"], "<script>alert(1)</script>")
    second = make_run(project, environment, rubric, users["bob"], "two")
    html = client_for("dave").get(f"/p/{project.slug}/compare/?run={first.pk}&run={second.pk}").content.decode()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "These runs used the same configuration." in html
