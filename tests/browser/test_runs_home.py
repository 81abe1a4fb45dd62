"""The runs list as a home, in real headless Chromium: tick two runs and compare them (and come back),
tag a run in place and filter by the tag, then "New run like this" from a run's page, where naming a
model fills the knobs recommended for it and says why."""

from __future__ import annotations

import pytest

from tests.browser.conftest import sign_in
from tests.conftest import PASSWORD
from tests.webapp.factories import make_run
from webapp.experiments.models import Run


@pytest.fixture
def lab(transactional_db, project, environment, rubric, users):
    """Three runs in the test story's project (tests/conftest.py) that differ in preset and knobs."""
    runs = [
        make_run(project, environment, rubric, users["alice"], name, preset=preset, overrides=overrides)
        for name, preset, overrides in (
            ("slow lr", "grpo", {"learning_rate": 1e-6}),
            ("fast lr", "dapo", {"learning_rate": 3e-5, "max_new_tokens": 64}),
            ("untouched", "grpo", {}),
        )
    ]
    return project, runs


def test_select_compare_tag_and_clone(lab, server, page):
    project, (slow, fast, _untouched) = lab
    sign_in(page, server, "alice", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/")

    # Select → Compare: the button waits for two runs, and the compare page links back.
    button = page.locator("[data-compare-button]")
    assert button.is_disabled()
    page.check(f"input[data-compare-pick][value='{slow.pk}']")
    assert button.is_disabled() and "tick one more" in page.inner_text("[data-compare-count]")
    page.check(f"input[data-compare-pick][value='{fast.pk}']")
    assert button.is_enabled()
    button.click()
    page.wait_for_url("**/compare/**")
    page.wait_for_selector(f"[data-compare-status='{slow.pk}']")
    page.wait_for_selector(f"[data-compare-status='{fast.pk}']")
    assert "learning_rate" in page.inner_text("table.diff")
    page.click("[data-back-to-runs]")
    page.wait_for_url(f"**/p/{project.slug}/runs/")

    # Tags and a note, edited in place; the tag then filters the list.
    row = page.locator(f"tr[data-run-row='{fast.pk}']")
    row.locator("[data-run-notes-edit]").click()
    row.locator("input[name=tags]").fill("sweep, keep")
    row.locator("textarea[name=note]").fill("<script>alert(1)</script> learns in 10 steps")
    row.locator("button[type=submit]:has-text('Save')").click()
    row.locator("a.tag:has-text('sweep')").wait_for()
    assert "<script>alert(1)</script> learns" in row.locator("[data-run-note]").inner_text()
    stored = Run.objects.get(pk=fast.pk)
    assert stored.tags == ["sweep", "keep"] and stored.note.endswith("learns in 10 steps")
    row.locator("a.tag:has-text('sweep')").click()
    page.wait_for_url("**tag=sweep**")
    assert page.locator("tr[data-run-row]").count() == 1

    # Sort by best reward and search by name keep working together.
    page.fill("input[name=q]", "lr")
    page.click("button:has-text('Search')")
    page.wait_for_url("**q=lr**")

    # New run like this: the form holds the run's preset and knobs, all changeable.
    page.goto(f"{server}/p/{project.slug}/runs/{fast.pk}/")
    page.click("[data-run-like]")
    page.wait_for_url(f"**/runs/new/?like={fast.pk}")
    assert page.input_value("select[name=preset]") == "dapo"
    assert page.input_value("input[name=knob-learning_rate]") == "3e-05"
    assert page.input_value("input[name=knob-max_new_tokens]") == "64"
    assert page.input_value("input[name=name]") == "fast lr · again"

    # Naming a model fills what is recommended for its size and says why.
    page.locator("details:has(input[name=knob-model])").evaluate("group => { group.open = true; }")
    page.fill("input[name=knob-model]", "meta-llama/Llama-3.1-8B")
    page.press("input[name=knob-model]", "Tab")
    page.wait_for_function(
        "document.querySelector('[data-recommendation-title]').textContent.includes('No recommended')"
    )
    assert page.input_value("input[name=knob-learning_rate]") == "3e-05"  # nothing measured: kept
    page.fill("input[name=knob-model]", "HuggingFaceTB/SmolLM2-360M-Instruct")
    page.press("input[name=knob-model]", "Tab")
    page.wait_for_function(
        "document.querySelector('[data-recommendation-title]').textContent.includes('Filled')"
    )
    assert page.input_value("input[name=knob-learning_rate]") == "0.00002"
    assert page.input_value("input[name=knob-max_new_tokens]") == "48"
    assert "bench/learning.py" in page.inner_text("[data-recommendation-why]")

    page.fill("input[name=name]", "fast lr, 360M")
    page.select_option("select[name=preset]", "grpo")  # the preset stays changeable
    page.click("button[type=submit]:has-text('Launch run')")
    page.wait_for_url("**/runs/*/")
    clone = Run.objects.get(name="fast lr, 360M")
    assert clone.preset == "grpo"
    assert clone.resolved_config["model"] == "HuggingFaceTB/SmolLM2-360M-Instruct"
    assert clone.resolved_config["learning_rate"] == 2e-5 and clone.resolved_config["max_new_tokens"] == 48
    assert clone.environment_version == fast.environment_version
