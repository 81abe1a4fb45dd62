"""The pages' JavaScript in real headless Chromium: the rubric builder's rows, the environment kind
swap and the run launcher's presets. Skipped when Debian's chromium is not installed."""

from __future__ import annotations

import pytest
from django.urls import reverse

# The browser fixtures (a daphne server on the test database, Chromium, a page) live with the browser tests.
from tests.browser.conftest import (  # noqa: F401
    _shared_chromium,
    _shared_server,
    browser,
    chromium_path,
    page,
    server,
    sign_in,
)
from tests.conftest import PASSWORD
from trainers.config import recommended_knobs
from webapp.experiments.models import Rubric
from webapp.experiments.services import environment_update

pytestmark = pytest.mark.browser


@pytest.fixture
def signed_in_bob(page, server, project, environment, rubric):  # noqa: F811
    sign_in(page, server, "bob", PASSWORD)
    return page


def test_the_rubric_builder_adds_moves_and_removes_rows_and_previews(signed_in_bob, server, project):  # noqa: F811
    tab = signed_in_bob
    tab.goto(server + reverse("experiments:rubric_create", args=[project.slug]))
    tab.fill("input[name=name]", "built in a browser")
    tab.fill("input[name=criteria-0-name]", "exact")

    tab.click("button[data-action=add]")
    tab.fill("input[name=criteria-1-name]", "tagged")
    tab.select_option("select[name=criteria-1-kind]", "regex")
    tab.wait_for_selector("input[name=criteria-1-params-pattern]")  # the regex params swapped in
    tab.fill("input[name=criteria-1-params-pattern]", "<answer>")
    tab.fill("input[name=criteria-1-weight]", "0.5")

    tab.click("button[data-action=add]")
    tab.fill("input[name=criteria-2-name]", "doomed")
    tab.locator("[data-criterion-row]").nth(2).locator("button[data-action=remove]").click()
    assert tab.locator("[data-criterion-row]").count() == 2

    # Keyboard: focus the second row's "up" button and press Enter; the row moves and keeps focus.
    tab.locator("[data-criterion-row]").nth(1).locator("button[data-action=up]").focus()
    tab.keyboard.press("Enter")
    assert tab.input_value("input[name=criteria-0-name]") == "tagged"
    assert tab.input_value("input[name=criteria-0-params-pattern]") == "<answer>"
    assert tab.input_value("input[name=criteria-1-name]") == "exact"
    assert tab.evaluate("document.activeElement.dataset.action") == "down"  # up is disabled on the first row

    tab.fill("textarea[name=preview-transcript]", "user: 2+2?\nassistant: <answer>4</answer>")
    tab.fill("input[name=preview-answer]", "4")
    tab.click("text=Preview score")
    tab.wait_for_selector(".preview-table")
    assert tab.inner_text(".preview-table .total") == "1.5000"
    assert Rubric.objects.filter(name="built in a browser").count() == 0  # preview saved nothing

    tab.click("button[type=submit]:has-text('Create rubric')")
    tab.wait_for_url("**/rubrics/*/")
    spec = Rubric.objects.get(name="built in a browser").latest_version.spec
    assert [(c["name"], c["kind"], c["weight"]) for c in spec["criteria"]] == [
        ("tagged", "regex", 0.5),
        ("exact", "exact_match", 1.0),
    ]


def test_the_environment_and_run_forms_follow_the_kind_and_preset_chosen(
    signed_in_bob,
    server,  # noqa: F811
    project,
    environment,
    users,
):
    tab = signed_in_bob
    tab.goto(server + reverse("experiments:environment_create", args=[project.slug]))
    assert tab.locator("input[name=config-max_digits]").count() == 1
    tab.select_option("select[name=kind]", "frozen_lake")
    tab.wait_for_selector("input[name=config-size]")
    assert tab.locator("input[name=config-max_digits]").count() == 0
    assert tab.input_value("input[name=config-size]") == "4"

    # Editing: back at the environment's own kind, the fields show its current settings again.
    environment_update(
        environment=environment, user=users["bob"], kind="arithmetic_calculator", config={"max_digits": 5}
    )
    tab.goto(server + reverse("experiments:environment_edit", args=[project.slug, environment.pk]))
    tab.select_option("select[name=kind]", "countdown")
    tab.wait_for_selector("input[name=config-num_numbers]")
    tab.select_option("select[name=kind]", "arithmetic_calculator")
    tab.wait_for_selector("input[name=config-max_digits]")
    assert tab.input_value("input[name=config-max_digits]") == "5"

    # Choosing a preset fills the knobs and marks what differs from it (one browser for both pages).
    tab.goto(server + reverse("experiments:run_create", args=[project.slug]))
    assert tab.input_value("input[name=knob-clip_high]") == "0.2"

    tab.select_option("select[name=preset]", "dapo")

    assert tab.input_value("input[name=knob-clip_high]") == "0.28"
    assert tab.is_checked("input[name=knob-dynamic_sampling]")
    assert tab.input_value("select[name=knob-loss_agg]") == "token-mean"
    # What still differs from the preset is the bundled model's recommended knobs (config.recommended_knobs).
    changed = lambda: {  # noqa: E731
        tab.get_attribute(f".field.changed >> nth={i}", "data-field")
        for i in range(tab.locator(".field.changed").count())
    }
    recommended = {f"knob-{name}" for name in recommended_knobs("smollm2-135m")["knobs"]}
    assert recommended and changed() == recommended
    tab.click("summary:has-text('Optimisation')")
    tab.fill("input[name=knob-clip_high]", "0.3")
    assert changed() == recommended | {"knob-clip_high"}
