"""The rubric builder through the pages: rows of criteria, errors on the row they concern, versions,
and a preview that scores a pasted transcript without saving anything."""

from __future__ import annotations

import re

from django.urls import reverse

from tests.webapp.html_forms import field_errors, flat, form_data, page_errors
from webapp.experiments.models import Rubric, RubricVersion, Run


def url(name: str, project, *args) -> str:
    return reverse(f"experiments:{name}", args=[project.slug, *args])


def row(index: int, name: str, kind: str, weight: str = "1", **params: str | list[str]) -> dict:
    """The fields one builder row posts."""
    fields = {
        f"criteria-{index}-name": name,
        f"criteria-{index}-kind": kind,
        f"criteria-{index}-weight": weight,
    }
    fields.update({f"criteria-{index}-params-{key}": value for key, value in params.items()})
    return fields


def builder_page(client, project, *args) -> dict:
    name = "rubric_edit" if args else "rubric_create"
    return flat(form_data(client.get(url(name, project, *args)).content, "rubric-form"))


def test_it_saves_the_criteria_in_the_order_of_the_rows(client_for, project):
    bob = client_for("bob")
    posted = builder_page(bob, project)
    assert posted["criteria-0-kind"] == "exact_match"  # a first row to start from
    assert not any("__prefix__" in key for key in posted)  # the blank row template is not submitted

    posted.update({"name": "math", "aggregation": "weighted_sum", "criteria-0-name": "right answer"})
    posted.update(
        row(1, "formatted", "regex", "0.25", pattern="<answer>", scope="final_answer", must_match="on")
    )
    posted.update(
        row(2, "short", "length", "0.5", min_len="0", max_len="64", unit="words", scope="all_assistant")
    )
    response = bob.post(url("rubric_create", project), posted)

    rubric = Rubric.objects.get(project=project, name="math")
    assert response.status_code == 302 and response.url == url("rubric_detail", project, rubric.pk)
    spec = rubric.latest_version.spec
    assert spec["aggregation"] == "weighted_sum"
    assert [(c["name"], c["kind"], c["weight"]) for c in spec["criteria"]] == [
        ("right answer", "exact_match", 1.0),
        ("formatted", "regex", 0.25),
        ("short", "length", 0.5),
    ]
    assert spec["criteria"][1]["params"]["pattern"] == "<answer>"
    assert spec["criteria"][2]["params"]["max_len"] == 64


def test_it_reads_rows_by_their_numbers_not_the_order_they_arrive_in(client_for, project):
    bob = client_for("bob")
    posted = {
        "name": "ordered",
        "aggregation": "weighted_sum",
        **row(3, "third", "env_reward"),
        **row(0, "first", "env_reward"),
    }
    bob.post(url("rubric_create", project), posted)
    names = [c["name"] for c in Rubric.objects.get(name="ordered").latest_version.spec["criteria"]]
    assert names == ["first", "third"]


def test_it_shows_an_unknown_kind_on_its_row_and_writes_nothing(client_for, project):
    bob = client_for("bob")
    posted = {
        "name": "odd",
        "aggregation": "weighted_sum",
        **row(0, "fine", "env_reward"),
        **row(1, "odd", "bogus"),
    }
    posted["criteria-1-params-params"] = '{"x": 1}'

    response = bob.post(url("rubric_create", project), posted)

    assert response.status_code == 200
    assert field_errors(response.content, "criteria-1-kind") == [
        "Kind 'bogus' is not a known criterion kind."
    ]
    assert field_errors(response.content, "criteria-0-kind") == []
    kept = flat(form_data(response.content, "rubric-form"))
    assert kept["criteria-1-kind"] == "bogus"  # still selected, marked unknown
    assert kept["criteria-1-params-params"] == '{"x": 1}'  # its params fall back to JSON
    assert Rubric.objects.count() == 0 and RubricVersion.objects.count() == 0


def test_it_shows_a_negative_weight_on_its_row_and_writes_nothing(client_for, project, rubric):
    bob = client_for("bob")
    posted = builder_page(bob, project, rubric.pk)
    posted["criteria-1-weight"] = "-0.5"

    response = bob.post(url("rubric_edit", project, rubric.pk), posted)

    assert response.status_code == 200
    assert field_errors(response.content, "criteria-1-weight") == ["Weight must be 0 or more (got -0.5)."]
    assert 'class="criteria-row has-errors"' in response.content.decode()
    assert flat(form_data(response.content, "rubric-form"))["criteria-1-weight"] == "-0.5"
    assert rubric.versions.count() == 1


def test_it_shows_a_bad_parameter_under_its_row(client_for, project):
    bob = client_for("bob")
    posted = {
        "name": "re",
        "aggregation": "weighted_sum",
        **row(0, "tag", "regex", pattern="(unclosed", scope="final_answer"),
    }
    response = bob.post(url("rubric_create", project), posted)
    (message,) = field_errors(response.content, "criteria-0-params-pattern")
    assert message.startswith("invalid regular expression")
    assert Rubric.objects.count() == 0


def test_it_refuses_a_rubric_without_criteria(client_for, project):
    response = client_for("bob").post(
        url("rubric_create", project), {"name": "empty", "aggregation": "weighted_sum"}
    )
    assert "criteria: A rubric needs at least one criterion." in page_errors(response.content)
    assert Rubric.objects.count() == 0


def test_it_saves_a_change_as_a_new_version_and_the_run_keeps_the_old_one(client_for, project, rubric, run):
    resolved_before = dict(run.resolved_config)
    bob = client_for("bob")
    posted = builder_page(bob, project, rubric.pk)
    assert posted["criteria-1-params-pattern"] == "<answer>.*</answer>"

    posted.update({"criteria-1-weight": "0.5", "note": "format matters more"})
    response = bob.post(url("rubric_edit", project, rubric.pk), posted, follow=True)

    assert [v.number for v in rubric.versions.all()] == [2, 1]
    assert rubric.latest_version.spec["criteria"][1]["weight"] == 0.5
    run.refresh_from_db()
    assert run.rubric_version.number == 1 and run.resolved_config == resolved_before
    assert "Saved as v2" in response.content.decode()


def test_it_keeps_the_version_when_the_builder_is_saved_untouched(client_for, project, rubric):
    bob = client_for("bob")
    response = bob.post(
        url("rubric_edit", project, rubric.pk), builder_page(bob, project, rubric.pk), follow=True
    )
    assert rubric.versions.count() == 1
    assert "runs still use v1" in response.content.decode()


def test_it_swaps_in_the_params_of_the_kind_a_row_picks(client_for, project):
    bob = client_for("bob")
    html = bob.get(
        url("criterion_params", project), {"kind": "llm_judge", "prefix": "criteria-4-params"}
    ).content.decode()
    assert "<html" not in html
    assert 'name="criteria-4-params-template"' in html and 'name="criteria-4-params-max_score"' in html
    assert "Needs a model" in html

    odd = bob.get(
        url("criterion_params", project), {"kind": "format", "prefix": '"><script>'}
    ).content.decode()
    assert 'name="criteria-__prefix__-params-checks"' in odd and "<script>" not in odd


def test_the_builder_page_has_a_blank_row_to_add_and_keyboard_buttons_to_move_rows(
    client_for, project, rubric
):
    html = client_for("bob").get(url("rubric_edit", project, rubric.pk)).content.decode()
    template = re.search(r'<template id="criterion-row-template">(.*?)</template>', html, re.S).group(1)
    assert 'name="criteria-__prefix__-name"' in template
    assert html.count('aria-label="Move criterion up"') == 3  # two rows and the blank one
    assert 'data-action="add"' in html and "js/rubric_builder.js" in html


def preview(
    client,
    project,
    transcript: str,
    answer: str = "",
    rows: dict | None = None,
    trajectory: int | None = None,
):
    rows = (
        rows
        if rows is not None
        else {
            **row(
                0,
                "correct",
                "numeric_match",
                "1",
                extract="answer_tag_or_last_number",
                abs_tolerance="0.000001",
                rel_tolerance="0",
            ),
            **row(1, "tagged", "regex", "0.5", pattern="<answer>", scope="final_answer", must_match="on"),
        }
    )
    data = {"aggregation": "weighted_sum", **rows, "preview-transcript": transcript, "preview-answer": answer}
    if trajectory is not None:
        data["preview-trajectory"] = str(trajectory)
    return client.post(url("rubric_preview", project), data, HTTP_HX_REQUEST="true")


def cells(html: str) -> list[list[str]]:
    body = html.split("<tbody>")[1].split("</tbody>")[0]
    return [
        [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        for tr in body.split("</tr>")[:-1]
    ]


def test_the_preview_scores_a_pasted_transcript_criterion_by_criterion(client_for, project):
    before = (Rubric.objects.count(), RubricVersion.objects.count())
    response = preview(
        client_for("bob"), project, "user: What is 2 + 3?\nassistant: It is <answer>5</answer>", answer="5"
    )

    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    table = cells(html)
    assert [r[:5] for r in table] == [
        ["correct", "numeric_match", "1.0000", "1.0000", "1.0000"],
        ["tagged", "regex", "1.0000", "0.5000", "0.5000"],
    ]
    assert re.search(r'class="num total">1.5000<', html)
    assert "Read 2 messages (1 model turn)" in html
    assert (Rubric.objects.count(), RubricVersion.objects.count()) == before


def test_the_preview_says_a_model_criterion_is_scored_on_the_workers(client_for, project):
    rows = {
        **row(0, "judge", "llm_judge", "1"),
        **row(1, "tagged", "regex", "1", pattern="<answer>", scope="final_answer", must_match="on"),
    }
    bob = client_for("bob")
    judge_params = bob.get(
        url("criterion_params", project), {"kind": "llm_judge", "prefix": "criteria-0-params"}
    )
    judge_defaults = flat(form_data(f"<form>{judge_params.content.decode()}</form>"))
    response = preview(bob, project, "assistant: <answer>4</answer>", rows={**rows, **judge_defaults})
    table = cells(response.content.decode())
    assert table[0][2] == "needs a model — scored on workers"
    assert table[1][2:5] == ["1.0000", "1.0000", "1.0000"]


def test_the_preview_explains_what_is_wrong_instead_of_scoring(client_for, project):
    bob = client_for("bob")
    bad_weight = preview(bob, project, "assistant: 4", rows=row(0, "x", "env_reward", "-1"))
    assert "Criterion 1 · weight: Weight must be 0 or more (got -1.0)." in bad_weight.content.decode()
    typo = preview(bob, project, "assistant: 4", rows=row(0, "x", "env_reward", "heavy"))
    assert "Criterion 1 · weight: Enter a number." in typo.content.decode()
    empty = preview(bob, project, "")
    assert "transcript: Paste a transcript or pick a trajectory." in empty.content.decode()
    broken = preview(bob, project, '[{"role": "wizard", "text": "hi"}]')
    assert "Transcript: turns.0.role" in broken.content.decode()


def test_the_preview_scores_a_real_trajectory_picked_from_the_project(client_for, project, run, users):
    from tests.webapp.factories import make_trajectory, turn
    from webapp.projects.services import project_create

    stored = make_trajectory(
        run, step=2, turns=[turn("user", "What is 2 + 3?"), turn("assistant", "<answer>5</answer>")]
    )
    bob = client_for("bob")
    page = bob.get(url("rubric_create", project)).content.decode()
    assert f'<option value="#{stored.pk} · add-7 · {run.name} · train step 2' in page

    response = preview(bob, project, "", answer="5", trajectory=stored.pk)

    html = response.content.decode()
    assert "Trajectory <a href=" in html and f"#{stored.pk}</a>" in html
    assert cells(html)[0][2:5] == ["1.0000", "1.0000", "1.0000"]  # its stored answer matched
    # A trajectory of another project is not one to pick (and is not read).
    other = project_create(name="Elsewhere", owner=users["eve"])
    theirs_run = Run.objects.create(project=other, name="theirs", preset="grpo")
    theirs = make_trajectory(theirs_run, turns=[turn("assistant", "secret")])
    refused = preview(bob, project, "", trajectory=theirs.pk).content.decode()
    assert "secret" not in refused and f"this project has no trajectory #{theirs.pk}" in refused


def test_every_error_of_a_rubric_shows_in_one_pass_on_its_numbered_row(client_for, project):
    bob = client_for("bob")
    posted = {
        "name": "",
        "aggregation": "weighted_sum",
        **row(0, "same", "env_reward", "heavy"),  # does not parse
        **row(1, "same", "env_reward", "-1"),  # a duplicate name and a negative weight
    }
    response = bob.post(url("rubric_create", project), posted)
    html = response.content.decode()
    assert field_errors(response.content, "name") == ["Name is required."]
    assert field_errors(response.content, "criteria-0-weight") == ["Enter a number."]
    assert field_errors(response.content, "criteria-1-name") == [
        "Name 'same' is already used by criterion 1."
    ]
    assert field_errors(response.content, "criteria-1-weight") == ["Weight must be 0 or more (got -1.0)."]
    assert "#<span data-row-number>2</span>" in html  # the row that message names
    assert Rubric.objects.count() == 0


def test_a_stored_trajectory_previews_to_its_stored_total(client_for, project, run):
    """The rubric that scored a trajectory, previewed on it, gives its stored total: the preview reads
    the environment's own reward and the task's answer as they were stored (a typed answer does not
    replace the trajectory's own)."""
    from webapp.rollouts.ingest import ingest_batch
    from webapp.rollouts.models import Trajectory

    item = {
        "group": 0,
        "sample": 0,
        "task_id": "add-2-3",
        "prompt": "What is 2 + 3?",
        "reward": 1.3,  # correct 1 × 1 + environment 0.6 × 0.5
        "env_reward": 0.6,
        "answer": "5",
        "components": [
            {"name": "correct", "kind": "numeric_match", "raw": 1.0, "weight": 1.0, "weighted": 1.0},
            {"name": "environment", "kind": "env_reward", "raw": 0.6, "weight": 0.5, "weighted": 0.3},
        ],
        "turns": [
            {"role": "user", "text": "What is 2 + 3?"},
            {"role": "assistant", "text": "<answer>5</answer>"},
        ],
    }
    ingest_batch(
        run=run, payload={"events": [{"seq": 1, "type": "trajectories", "step": 1, "items": [item]}]}
    )
    stored = Trajectory.objects.get(run=run, task_id="add-2-3")
    assert (stored.env_reward, stored.answer) == (0.6, "5")

    rows = {
        **row(
            0,
            "correct",
            "numeric_match",
            "1",
            extract="answer_tag_or_last_number",
            abs_tolerance="0.000001",
            rel_tolerance="0",
        ),
        **row(1, "environment", "env_reward", "0.5"),
    }
    html = preview(
        client_for("bob"), project, "", answer="7", trajectory=stored.pk, rows=rows
    ).content.decode()
    assert 'data-preview-total class="num total">1.3000<' in html, html
    assert "<span data-preview-answer>5</span>" in html
    assert "<span data-preview-env-reward>0.6000</span>" in html
