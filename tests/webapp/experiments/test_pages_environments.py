"""Environments through the pages: a config form generated from the kind's schema, errors next to
their fields, and versions that runs keep."""

from __future__ import annotations

from django.urls import reverse

from tests.webapp.html_forms import field_block, field_errors, flat, form_data
from webapp.experiments.models import Environment, EnvironmentVersion


def url(name: str, project, *args) -> str:
    return reverse(f"experiments:{name}", args=[project.slug, *args])


def test_it_creates_an_environment_from_the_form_the_kind_generates(client_for, project):
    bob = client_for("bob")
    page = bob.get(url("environment_create", project))
    posted = flat(form_data(page.content, "environment-form"))
    assert posted["kind"] == "arithmetic_calculator"
    assert posted["config-max_turns"] == "4"  # the schema's default, prefilled
    assert posted["config-operations"] == ["+", "-", "*"]

    posted.update({"name": "hard sums", "config-max_digits": "3", "config-operations": ["+", "*"]})
    response = bob.post(url("environment_create", project), posted)

    environment = Environment.objects.get(project=project, name="hard sums")
    assert response.status_code == 302
    assert response.url == url("environment_detail", project, environment.pk)
    version = environment.latest_version
    assert (version.number, version.kind) == (1, "arithmetic_calculator")
    assert version.config["max_digits"] == 3 and version.config["operations"] == ["+", "*"]
    detail = bob.get(response.url).content.decode()
    assert "hard sums" in detail and "v1" in detail and "&quot;max_digits&quot;: 3" in detail


def test_it_shows_an_invalid_setting_next_to_its_field_and_writes_nothing(client_for, project):
    bob = client_for("bob")
    posted = flat(form_data(bob.get(url("environment_create", project)).content, "environment-form"))
    posted.update({"name": "too long", "config-max_turns": "100"})

    response = bob.post(url("environment_create", project), posted)

    assert response.status_code == 200
    assert field_errors(response.content, "config-max_turns") == ["Max turns must be 32 or less (got 100)."]
    assert "field-error" in response.content.decode().split('data-field="config-max_turns"')[0][-60:]
    kept = flat(form_data(response.content, "environment-form"))
    assert kept["name"] == "too long" and kept["config-max_turns"] == "100"
    assert Environment.objects.count() == 0 and EnvironmentVersion.objects.count() == 0


def test_it_says_which_field_is_missing_when_a_required_setting_is_empty(client_for, project):
    bob = client_for("bob")
    response = bob.post(
        url("environment_create", project), {"name": "mine", "kind": "from_dataset", "config-path": ""}
    )
    assert field_errors(response.content, "config-path") == ["Dataset path is required."]
    assert Environment.objects.count() == 0


def test_it_refuses_a_name_already_taken_in_the_project(client_for, project, environment):
    bob = client_for("bob")
    response = bob.post(url("environment_create", project), {"name": "arith", "kind": "countdown"})
    assert field_errors(response.content, "name") == [
        "An environment named 'arith' already exists in this project."
    ]
    assert Environment.objects.count() == 1


def test_it_keeps_what_the_user_typed_when_a_number_does_not_parse(client_for, project):
    bob = client_for("bob")
    response = bob.post(
        url("environment_create", project), {"name": "x", "kind": "countdown", "config-max_number": "lots"}
    )
    assert field_errors(response.content, "config-max_number") == ["Enter a whole number."]
    assert 'value="lots"' in field_block(response.content, "config-max_number")
    assert Environment.objects.count() == 0


def test_it_swaps_in_the_fields_of_the_kind_the_user_picks(client_for, project):
    bob = client_for("bob")
    page = bob.get(url("environment_create", project)).content.decode()
    assert 'hx-get="' + url("environment_config_fields", project) + '"' in page

    fields = bob.get(
        url("environment_config_fields", project), {"kind": "frozen_lake"}, HTTP_HX_REQUEST="true"
    )

    html = fields.content.decode()
    assert "<html" not in html  # a partial, not a page
    assert 'name="config-size"' in html and 'name="config-interface"' in html
    assert 'name="config-max_digits"' not in html
    assert "Grid size" in html and "Width and height of the square grid." in html


def test_switching_back_to_the_current_kind_while_editing_shows_the_current_settings(
    client_for, project, users
):
    from webapp.experiments.services import environment_create

    lake = environment_create(
        project=project, name="lake", kind="frozen_lake", config={"size": 6}, user=users["bob"]
    )
    bob = client_for("bob")
    page = bob.get(url("environment_edit", project, lake.pk)).content.decode()
    swap_url = url("environment_config_fields", project) + f"?environment={lake.pk}"
    assert f'hx-get="{swap_url}"' in page

    back = bob.get(swap_url + "&kind=frozen_lake").content.decode()  # htmx adds the chosen kind
    other = bob.get(swap_url + "&kind=countdown").content.decode()

    assert 'name="config-size" value="6"' in back
    assert 'name="config-num_numbers" value="3"' in other  # another kind starts from its defaults


def test_it_makes_a_new_version_and_leaves_the_run_on_the_old_one(client_for, project, environment, run):
    resolved_before = dict(run.resolved_config)
    bob = client_for("bob")
    posted = flat(
        form_data(bob.get(url("environment_edit", project, environment.pk)).content, "environment-form")
    )
    assert posted["config-operations"] == ["+", "-", "*"]

    posted.update({"config-max_turns": "8", "note": "more turns"})
    response = bob.post(url("environment_edit", project, environment.pk), posted)

    assert response.status_code == 302
    assert [v.number for v in environment.versions.all()] == [2, 1]
    v2 = environment.latest_version
    assert v2.config["max_turns"] == 8 and v2.note == "more turns" and v2.created_by.username == "bob"
    run.refresh_from_db()
    assert run.environment_version.number == 1
    assert run.resolved_config == resolved_before
    detail = bob.get(response.url).content.decode()
    assert "Saved as v2" in detail
    v1_section = detail.split('id="v1"')[1]
    assert "first run" in v1_section  # the run that pinned v1 is listed under v1
    assert "first run" not in detail.split('id="v2"')[1].split('id="v1"')[0]


def test_it_keeps_the_version_when_nothing_changed(client_for, project, environment):
    bob = client_for("bob")
    posted = flat(
        form_data(bob.get(url("environment_edit", project, environment.pk)).content, "environment-form")
    )

    response = bob.post(url("environment_edit", project, environment.pk), posted, follow=True)

    assert environment.versions.count() == 1
    assert "runs still use v1" in response.content.decode()


def test_it_changes_the_kind_as_a_new_version(client_for, project, environment):
    bob = client_for("bob")
    response = bob.post(
        url("environment_edit", project, environment.pk), {"name": "arith", "kind": "countdown"}
    )
    assert response.status_code == 302
    assert environment.latest_version.kind == "countdown"
    assert environment.versions.get(number=1).kind == "arithmetic_calculator"


def test_it_lists_environments_with_kind_version_and_runs(client_for, project, environment, run):
    html = client_for("dave").get(url("environment_list", project)).content.decode()
    row = html.split(url("environment_detail", project, environment.pk))[1].split("</tr>")[0]
    assert "arithmetic_calculator" in row and "v1" in row
    assert "New environment" not in html  # dave views; he does not define


def test_it_offers_edit_only_to_members_who_launch(client_for, project, environment):
    edit = url("environment_edit", project, environment.pk)
    assert edit in client_for("bob").get(url("environment_detail", project, environment.pk)).content.decode()
    assert (
        edit
        not in client_for("carol").get(url("environment_detail", project, environment.pk)).content.decode()
    )


def test_it_does_not_find_an_environment_of_another_project(client_for, project, users):
    from webapp.experiments.services import environment_create
    from webapp.projects.services import project_create

    elsewhere = project_create(name="Elsewhere", owner=users["eve"])
    theirs = environment_create(
        project=elsewhere, name="secret", kind="countdown", config={}, user=users["eve"]
    )
    assert client_for("alice").get(url("environment_detail", project, theirs.pk)).status_code == 404


def test_preview_shows_a_sample_task_the_tools_and_the_system_prompt_before_saving(client_for, project):
    bob = client_for("bob")
    posted = flat(form_data(bob.get(url("environment_create", project)).content, "environment-form"))
    html = bob.post(url("environment_preview", project), posted).content.decode()
    assert 'data-ok="true"' in html and "data-preview-task" in html
    assert "<code>calculator</code>" in html  # the tool the model will see
    assert "data-preview-system" in html and "&lt;answer&gt;" in html  # the prompt, as text
    assert not Environment.objects.exists()  # nothing saved


def test_preview_says_what_is_wrong_with_a_config_or_an_unreachable_server(client_for, project):
    bob = client_for("bob")
    posted = flat(form_data(bob.get(url("environment_create", project)).content, "environment-form"))
    crossed = bob.post(
        url("environment_preview", project), {**posted, "config-min_digits": "5", "config-max_digits": "2"}
    ).content.decode()
    assert 'data-ok="false"' in crossed and "max_digits" in crossed and "min digits (5)" in crossed

    fields = {
        "name": "remote",
        "kind": "openenv",
        "config-url": "http://127.0.0.1:9",
        "config-connect_timeout_s": "1",
    }
    dead = bob.post(url("environment_preview", project), fields)
    assert dead.status_code == 200 and "127.0.0.1:9 is unreachable" in dead.content.decode()


def test_only_members_who_launch_may_preview(client_for, project):
    assert (
        client_for("dave").post(url("environment_preview", project), {"kind": "countdown"}).status_code == 403
    )


def test_every_error_of_an_environment_shows_in_one_pass(client_for, project):
    bob = client_for("bob")
    posted = {
        "name": "",
        "kind": "arithmetic_calculator",
        "config-max_turns": "many",  # does not parse
        "config-max_digits": "0",  # parses, breaks the schema
        "config-operations": ["+"],
    }
    response = bob.post(url("environment_create", project), posted)
    assert field_errors(response.content, "name") == ["Name is required."]
    assert field_errors(response.content, "config-max_turns") == ["Enter a whole number."]
    assert field_errors(response.content, "config-max_digits") == ["Max digits must be 1 or more (got 0)."]
    assert flat(form_data(response.content, "environment-form"))["config-max_turns"] == "many"
    assert Environment.objects.count() == 0


def test_reasoning_gym_datasets_and_textarena_games_are_pick_lists(client_for, project):
    bob = client_for("bob")
    for kind, field, option in (
        ("reasoning_gym", "config-dataset", "leg_counting"),
        ("textarena", "config-game", "Mastermind-v0"),
    ):
        html = bob.get(
            url("environment_config_fields", project), {"kind": kind}, HTTP_HX_REQUEST="true"
        ).content.decode()
        select = html[html.index(f'name="{field}"') :].split("</select>")[0]
        assert f'<option value="{option}"' in select, (kind, select[:300])
