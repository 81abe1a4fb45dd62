"""The HTTP side of the live pages: the run page's live part, events.json, and compare."""

from __future__ import annotations

import json

from tests.conftest import RUBRIC_SPEC
from tests.webapp.factories import make_run, make_trajectory
from webapp.experiments.services import environment_create, rubric_create, rubric_update
from webapp.projects.services import project_create
from webapp.rollouts.models import RunEvent


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
    rubric_update(
        rubric=rubric, user=users["bob"], spec={**RUBRIC_SPEC, "aggregation": "group_normalized_sum"}
    )
    second = make_run(project, environment, rubric, users["bob"], "hotter", overrides={"kl_coef": 0.05})

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
    # A click on a point opens that run's groups at the step (static/js/curve_click.js).
    assert live[1]["groups_url"] == f"/p/{project.slug}/runs/{second.pk}/groups/"


def test_compare_ignores_runs_of_other_projects_and_hides_the_project_from_outsiders(
    client_for, project, environment, rubric, users
):
    mine = make_run(project, environment, rubric, users["bob"], "mine")
    elsewhere = project_create(name="Elsewhere", owner=users["eve"])
    theirs = make_run(
        elsewhere,
        environment_create(
            project=elsewhere, name="e", kind="arithmetic_calculator", config={}, user=users["eve"]
        ),
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
    html = (
        client_for("dave").get(f"/p/{project.slug}/compare/?run={first.pk}&run={second.pk}").content.decode()
    )
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "These runs used the same configuration." in html


# --- per-step histograms and their cells ------------------------------------------------------------------


def stage_rewards(
    run, rewards_by_step: dict[int, list[float]], *, split: str = "train", lengths=None
) -> None:
    for step, rewards in rewards_by_step.items():
        for sample, reward in enumerate(rewards):
            length = lengths[step][sample] if lengths else 10
            make_trajectory(
                run,
                step=step,
                sample=sample,
                split=split,
                reward=reward,
                completion_tokens=length,
                task_id=f"task-{step}",
            )


def test_histograms_count_each_steps_rewards_per_bin_in_the_database(client_for, run):
    stage_rewards(run, {1: [0.0, 0.1, 0.9], 2: [0.5, 1.0, 1.0]})
    stage_rewards(run, {2: [0.3]}, split="eval")
    url = f"/p/{run.project.slug}/runs/{run.pk}/histograms.json"

    body = client_for("dave").get(url, {"field": "reward", "bins": 4}).json()
    assert body["edges"] == [0.0, 0.25, 0.5, 0.75, 1.0] and body["steps"] == [1, 2] and body["stride"] == 1
    # Step 1: 0.0 and 0.1 in the first bin, 0.9 in the last; step 2: 0.5 in the third, both 1.0 in the last
    # (the top value belongs to the last bin).
    assert body["counts"] == [[2, 0, 0, 1], [0, 0, 1, 2]]
    evaluation = client_for("dave").get(url, {"field": "reward", "split": "eval"}).json()
    assert evaluation["steps"] == [2] and sum(evaluation["counts"][0]) == 1


def test_length_histograms_have_whole_token_bins_and_long_runs_group_steps(client_for, run, monkeypatch):
    from webapp.live import selectors

    monkeypatch.setattr(selectors, "MAX_COLUMNS", 2)
    stage_rewards(run, {0: [0.0, 0.0], 1: [0.0], 3: [0.0]}, lengths={0: [10, 13], 1: [11], 3: [16]})
    body = (
        client_for("dave")
        .get(f"/p/{run.project.slug}/runs/{run.pk}/histograms.json", {"field": "length", "bins": 3})
        .json()
    )
    assert body["edges"] == [10.0, 13.0, 16.0, 19.0]  # 10…16 in bins three tokens wide
    assert body["stride"] == 2 and body["steps"] == [0, 2]  # steps 0–1 and 2–3
    assert body["counts"] == [[2, 1, 0], [0, 0, 1]]


def test_a_histogram_cell_lists_its_trajectories_best_first(client_for, run):
    stage_rewards(run, {1: [0.0, 0.1, 0.9], 2: [0.5, 1.0, 1.0]})
    url = f"/p/{run.project.slug}/runs/{run.pk}/bin.json"
    first = (
        client_for("dave")
        .get(url, {"field": "reward", "step_min": 1, "step_max": 1, "min": 0, "max": 0.25})
        .json()
    )
    assert [(t["step"], t["reward"], t["sample"]) for t in first["trajectories"]] == [
        (1, 0.1, 1),
        (1, 0.0, 0),
    ]
    top = client_for("dave").get(url, {"step_min": 2, "min": 0.75, "max": 1.0, "last": "1"}).json()
    assert [t["reward"] for t in top["trajectories"]] == [1.0, 1.0]
    assert client_for("dave").get(url, {"step_min": 2, "min": 0.75, "max": 1.0}).json()["trajectories"] == []


def test_histograms_refuse_unknown_fields_and_hide_the_run_from_outsiders(client, client_for, run):
    base = f"/p/{run.project.slug}/runs/{run.pk}"
    for path in ("histograms.json", "bin.json"):
        assert client.get(f"{base}/{path}").status_code == 404  # anonymous
        assert client_for("eve").get(f"{base}/{path}").status_code == 404
    assert client_for("dave").get(f"{base}/histograms.json", {"field": "secrets"}).status_code == 400
    assert client_for("dave").get(f"{base}/bin.json", {"split": "test"}).status_code == 400
    empty = client_for("dave").get(f"{base}/histograms.json").json()
    assert empty["steps"] == [] and empty["counts"] == []


def test_health_json_counts_staleness_and_the_truncated_and_aborted_share(client, client_for, run):
    for step, sample, staleness, status in [
        (1, 0, 0, "ok"),
        (1, 1, 0, "truncated"),
        (2, 0, 1, "error"),
        (2, 1, 2, "ok"),
    ]:
        make_trajectory(run, step=step, sample=sample, staleness=staleness, status=status)
    make_trajectory(run, step=2, sample=0, split="eval", staleness=5, status="error")  # not a trained sample
    base = f"/p/{run.project.slug}/runs/{run.pk}"
    assert client_for("eve").get(f"{base}/health.json").status_code == 404
    body = client_for("dave").get(f"{base}/health.json").json()
    assert body["staleness"] == [[0, 2], [1, 1], [2, 1]]
    assert body["steps"] == [1, 2] and body["truncated"] == [0.5, 0.0] and body["aborted"] == [0.0, 0.5]
    html = client_for("dave").get(f"{base}/").content.decode()
    assert "data-async-health" in html and f'data-health-url="{base}/health.json"' in html


def test_the_group_list_of_one_step_names_each_groups_best_and_worst(client_for, run):
    best = make_trajectory(run, step=3, sample=0, reward=0.9)
    worst = make_trajectory(run, step=3, sample=1, reward=0.1)
    make_trajectory(run, step=4, sample=0, reward=0.5)
    html = (
        client_for("dave").get(f"/p/{run.project.slug}/runs/{run.pk}/groups/", {"step": 3}).content.decode()
    )
    assert "Groups at step 3" in html
    assert f"/trajectories/{best.pk}/" in html and f"/trajectories/{worst.pk}/" in html
    assert "best 0.900" in html and "worst 0.100" in html
    assert html.count("data-best-worst") == 1  # step 4 is not listed
    assert (
        client_for("dave").get(f"/p/{run.project.slug}/runs/{run.pk}/groups/", {"step": "x"}).status_code
        == 400
    )


def test_compare_names_the_two_max_turns_and_the_one_that_applied(
    client_for, project, environment, rubric, users
):
    """The run's knob and the environment's own max_turns, each named, and the smaller that episodes got."""
    first = make_run(project, environment, rubric, users["bob"], "short", overrides={"max_turns": 1})
    second = make_run(project, environment, rubric, users["bob"], "long", overrides={"max_turns": 64})
    response = client_for("dave").get(f"/p/{project.slug}/compare/", {"runs": f"{first.pk},{second.pk}"})
    rows = {row["knob"]: row for row in response.context["differences"]}
    assert rows["max_turns"]["values"] == ["1", "64"]
    assert rows["max_turns"]["note"] == "the run's knob (0: the environment's own)"
    applied = rows["max_turns (applied)"]
    assert applied["values"] == ["1", "4"]  # the test environment's kind allows 4 turns by default
    assert applied["note"] == "the smaller of the two: what episodes got"
    assert '<span class="muted small" data-knob-note>the smaller of the two: what episodes got</span>' in (
        response.content.decode()
    )
