"""The rubric preview's trajectory picker as a researcher uses it: any trajectory of the project — not only
the newest 40 — typed by id or found by words of its task, named by its task text (escaped), never its hash;
and a trajectory page that opens a rubric's preview with itself picked."""

from __future__ import annotations

import re

from django.urls import reverse

from tests.webapp.experiments.test_pages_rubrics import cells, preview, url
from tests.webapp.factories import make_trajectory, turn
from webapp.rollouts.selectors.runs import PREVIEW_TRAJECTORY_CHOICES


def options(client, project, typed: str) -> list[str]:
    html = client.get(
        url("rubric_preview_trajectories", project), {"preview-trajectory": typed}, HTTP_HX_REQUEST="true"
    ).content.decode()
    return re.findall(r'<option value="([^"]*)">', html)


def many(run, count: int):
    return [
        make_trajectory(
            run,
            step=i,
            task_id=f"9f{i:06x}c0ffee",  # a hash, as environments name tasks
            prompt=f"Question {i}: what is {i} + 2?\nAnswer with a number.",
            answer=str(i + 2),
            turns=[turn("user", f"What is {i} + 2?"), turn("assistant", f"<answer>{i + 2}</answer>")],
        )
        for i in range(count)
    ]


def test_the_oldest_trajectory_can_be_found_by_its_task_and_previewed(client_for, project, run):
    made = many(run, PREVIEW_TRAJECTORY_CHOICES + 5)
    oldest = made[0]
    bob = client_for("bob")

    page = bob.get(url("rubric_create", project)).content.decode()
    listed = re.findall(r'<option value="(#\d+)', page)
    assert len(listed) == PREVIEW_TRAJECTORY_CHOICES and f"#{oldest.pk}" not in listed  # the newest, at first
    assert "Question 44: what is 44 + 2?" in page and "9f00002cc0ffee" not in page  # task text, not its hash

    by_text = options(bob, project, "Question 0:")
    assert by_text == [f"#{oldest.pk} · Question 0: what is 0 + 2? · {run.name} · train step 0 · reward 0"]
    assert options(bob, project, str(oldest.pk))[0].startswith(f"#{oldest.pk} · ")
    assert options(bob, project, f"#{oldest.pk}")[0].startswith(f"#{oldest.pk} · ")

    picked = preview(bob, project, "", trajectory=by_text[0]).content.decode()  # what the datalist fills in
    assert "Select a valid choice" not in picked
    assert f"#{oldest.pk}</a>" in picked and cells(picked)[0][2] == "1.0000"  # its answer 2 is right
    typed = preview(bob, project, "", trajectory=str(oldest.pk)).content.decode()
    assert f"#{oldest.pk}</a>" in typed


def test_what_names_no_trajectory_is_a_field_error(client_for, project, run):
    bob = client_for("bob")
    html = preview(bob, project, "", trajectory="not a trajectory").content.decode()
    assert "Pick a trajectory from the list or type its id" in html and "data-preview-total" not in html
    assert (
        "this project has no trajectory #999999"
        in preview(bob, project, "", trajectory="999999").content.decode()
    )


def test_task_text_in_the_picker_stays_text(client_for, project, run):
    make_trajectory(run, prompt="<img src=x onerror=alert(1)> what is 1 + 1?", turns=[turn("assistant", "2")])
    bob = client_for("bob")
    page = bob.get(url("rubric_create", project)).content.decode()
    found = bob.get(
        url("rubric_preview_trajectories", project), {"preview-trajectory": "onerror"}
    ).content.decode()
    for html in (page, found):
        assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt; what is 1 + 1?" in html


def test_a_trajectory_page_opens_its_runs_rubric_with_itself_picked(client_for, project, run):
    stored = many(run, 1)[0]
    bob = client_for("bob")
    page = bob.get(reverse("rollouts:trajectory_detail", args=[project.slug, stored.pk])).content.decode()
    link = re.search(r'<a class="button secondary" data-preview-rubric href="([^"]+)"', page).group(1)
    assert link == url("rubric_edit", project, run.rubric_version.rubric_id) + f"?preview={stored.pk}#preview"

    form = bob.get(link.split("#")[0]).content.decode()
    assert re.search(rf'name="preview-trajectory" value="#{stored.pk} · Question 0: what is 0 \+ 2\?', form)
    # A viewer may not change rubrics: no such button for dave.
    viewer = client_for("dave").get(reverse("rollouts:trajectory_detail", args=[project.slug, stored.pk]))
    assert "data-preview-rubric" not in viewer.content.decode()
