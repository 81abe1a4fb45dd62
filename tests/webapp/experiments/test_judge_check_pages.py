"""The judge check as a researcher meets it: the rubric page leads to "Check the judge", which scores the
judge example's answers (reasoning-gym one-digit sums, right and wrong, graded by the environment's own
verifier) with the bundled model and shows its agreement; and the run form flags that judge before the
run is queued — a warning with a "launch anyway" box, or a refusal, as the project's setting says."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.urls import reverse

from tests.webapp.html_forms import field_errors, flat, form_data
from webapp.experiments.models import Run
from webapp.experiments.services import environment_create, rubric_create

pytestmark = pytest.mark.slow

EXAMPLE = yaml.safe_load((Path(__file__).parents[3] / "trainers/examples/judge_grpo.yaml").read_text())


@pytest.fixture(autouse=True)
def small_check(settings):
    settings.JUDGE_CHECK_TASKS = 2  # four answers: seconds with the bundled model


@pytest.fixture
def judged(project, users):
    environment = environment_create(
        project=project,
        name="one-digit sums",
        kind=EXAMPLE["environment"]["kind"],
        config=EXAMPLE["environment"]["config"],
        user=users["alice"],
    )
    rubric = rubric_create(project=project, name="judge", spec=EXAMPLE["rubric"], user=users["alice"])
    return environment, rubric


def url(name: str, project, *args) -> str:
    return reverse(f"experiments:{name}", args=[project.slug, *args])


def test_the_rubric_page_checks_its_judge_against_the_environments_verifier(client_for, project, judged):
    environment, rubric = judged
    bob = client_for("bob")  # a researcher
    page = bob.get(url("rubric_detail", project, rubric.pk)).content.decode()
    assert "data-judge-check-link" in page and url("rubric_judge_check", project, rubric.pk) in page

    checked = bob.post(url("rubric_judge_check", project, rubric.pk), {"truth": f"env:{environment.pk}"})
    html = checked.content.decode()
    assert checked.status_code == 200 and "data-judge-check-results" in html
    assert 'data-judge-check="judge"' in html and "cannot tell right from wrong" in html
    # The confusion of right vs wrong answers: it calls the wrong answers right too.
    confusion = html[html.index("data-judge-confusion") :].split("</table>")[0]
    assert 'wrong answers</th><td class="num">2</td><td class="num">0</td>' in confusion
    assert "data-judge-auc>0.50" in html and "data-judge-kappa>0.00" in html

    # A viewer sees the page, not the button (checking runs a model).
    viewer = client_for("dave").get(url("rubric_judge_check", project, rubric.pk)).content.decode()
    assert "researchers and owners can" in viewer
    assert (
        client_for("dave").post(url("rubric_judge_check", project, rubric.pk), {"truth": "x"}).status_code
        == 403
    )


def launch(client, project, environment, rubric, **extra):
    html = client.get(url("run_create", project)).content.decode()
    posted = flat(form_data(html, "run-form"))
    posted.update({"name": "judged run", "environment": environment.pk, "rubric": rubric.pk, **extra})
    return client.post(url("run_create", project), posted)


def test_the_run_form_warns_before_queuing_a_judge_that_cannot_tell_and_launches_when_told_to(
    client_for, project, judged
):
    environment, rubric = judged
    bob = client_for("bob")
    warned = launch(bob, project, environment, rubric)
    html = warned.content.decode()
    assert warned.status_code == 200 and "data-judge-warning" in html
    assert (
        "cannot tell right from wrong on this environment" in html and 'name="accept_untrusted_judge"' in html
    )
    assert not Run.objects.filter(name="judged run").exists()

    launched = launch(bob, project, environment, rubric, accept_untrusted_judge="1")
    assert launched.status_code == 302
    assert Run.objects.filter(name="judged run").count() == 1


def test_a_project_set_to_refuse_refuses_the_launch(client_for, project, judged):
    environment, rubric = judged
    assert (
        client_for("bob")
        .post(url("project_untrusted_judge", project, rubric.pk), {"untrusted_judge": "refuse"})
        .status_code
        == 403
    )  # the project's setting: an owner's
    client_for("alice").post(
        url("project_untrusted_judge", project, rubric.pk), {"untrusted_judge": "refuse"}
    )
    project.refresh_from_db()
    assert project.untrusted_judge == "refuse"

    refused = launch(client_for("bob"), project, environment, rubric, accept_untrusted_judge="1")
    assert refused.status_code == 200
    errors = field_errors(refused.content, "rubric")
    assert any("cannot tell right from wrong" in e for e in errors)
    assert any("This project refuses such a launch" in e for e in errors)
    assert not Run.objects.filter(name="judged run").exists()
