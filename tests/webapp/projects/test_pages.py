"""Projects through the pages: the list of one's projects, a new project, the project home and the
members page."""

from __future__ import annotations

from django.urls import reverse

from tests.webapp.html_forms import field_errors
from webapp.experiments.models import RunStatus
from webapp.experiments.services import run_create
from webapp.projects.models import Membership, Project
from webapp.projects.services import project_create


def card(html: str, name: str) -> str:
    return html.split(f"<h3>{name}</h3>")[1].split("</a>")[0]


def test_it_lists_only_my_projects_with_their_run_numbers(client_for, project, run, users):
    from webapp.experiments.models import Run

    Run.objects.filter(pk=run.pk).update(best_reward=0.75)
    project_create(name="Eve's secret", owner=users["eve"])

    html = client_for("dave").get(reverse("projects:list")).content.decode()

    assert "Eve&#x27;s secret" not in html and "Eve's secret" not in html
    agents = card(html, "Agents")
    assert "<dt>Runs</dt><dd>1</dd>" in agents and "<dt>Active</dt><dd>1</dd>" in agents
    # No "best reward" across the project's runs: their rubrics put rewards on different scales.
    assert "0.750" not in agents and "Best reward" not in agents


def test_it_creates_a_project_and_makes_me_its_owner(client_for, users):
    response = client_for("eve").post(
        reverse("projects:list"), {"name": "Tool use", "description": "agents with tools"}
    )
    project = Project.objects.get(name="Tool use")
    assert response.status_code == 302 and response.url == reverse("projects:home", args=[project.slug])
    assert Membership.objects.get(project=project).user.username == "eve"
    assert Membership.objects.get(project=project).role == "owner"


def test_it_asks_for_a_project_name(client_for, users):
    response = client_for("eve").post(reverse("projects:list"), {"name": "  "})
    assert field_errors(response.content, "name") == ["A project needs a name."]
    assert Project.objects.count() == 0


def test_the_project_home_shows_recent_runs_counts_and_best_rewards(
    client_for, project, environment, rubric, run, users
):
    from webapp.experiments.models import Run

    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, best_reward=0.5, current_step=100)
    second, _ = run_create(
        project=project,
        name="second",
        environment=environment,
        rubric=rubric,
        preset="dapo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    Run.objects.filter(pk=second.pk).update(best_reward=0.875)

    html = client_for("dave").get(reverse("projects:home", args=[project.slug])).content.decode()

    assert "<strong>2</strong> runs" in html and "<strong>1</strong> active" in html
    # One of a thing is singular ("1 environment", not "1 environments").
    assert "<strong>1</strong> environment</a>" in html and "<strong>1</strong> rubric</a>" in html
    assert html.index(">second<") < html.index(">first run<")  # newest first
    best = html.split("Best reward per environment")[1]
    assert ">arith<" in best and "0.875" in best
    assert "New run" not in html


def test_the_project_home_offers_new_things_to_researchers(client_for, project):
    html = client_for("bob").get(reverse("projects:home", args=[project.slug])).content.decode()
    assert reverse("experiments:run_create", args=[project.slug]) in html
    # Every member reads the member list (bob cannot change it: the page shows no controls to him).
    assert reverse("projects:members", args=[project.slug]) in html


def members_url(project) -> str:
    return reverse("projects:members", args=[project.slug])


def test_an_owner_adds_a_member_who_then_sees_the_project(client_for, project, client, users):
    alice = client_for("alice")
    response = alice.post(members_url(project), {"username": "eve", "role": "annotator"}, follow=True)
    assert "eve is now annotator." in response.content.decode()
    assert Membership.objects.get(project=project, user=users["eve"]).role == "annotator"
    client.force_login(users["eve"])
    assert client.get(reverse("projects:home", args=[project.slug])).status_code == 200


def test_it_says_when_no_such_user_exists(client_for, project):
    response = client_for("alice").post(members_url(project), {"username": "mallory", "role": "viewer"})
    assert field_errors(response.content, "username") == ["No user named 'mallory'."]
    assert Membership.objects.filter(project=project).count() == 4


def test_an_owner_changes_a_role_and_removes_a_member(client_for, project, users):
    alice = client_for("alice")
    dave = Membership.objects.get(project=project, user=users["dave"])
    html = alice.get(members_url(project)).content.decode()
    assert reverse("projects:member_role", args=[project.slug, dave.pk]) in html

    alice.post(reverse("projects:member_role", args=[project.slug, dave.pk]), {"role": "researcher"})
    dave.refresh_from_db()
    assert dave.role == "researcher"

    response = alice.post(reverse("projects:member_remove", args=[project.slug, dave.pk]), follow=True)
    assert "Member removed." in response.content.decode()
    assert not Membership.objects.filter(pk=dave.pk).exists()


def test_the_last_owner_cannot_step_down_or_leave(client_for, project, users):
    alice = client_for("alice")
    mine = Membership.objects.get(project=project, user=users["alice"])

    demoted = alice.post(
        reverse("projects:member_role", args=[project.slug, mine.pk]), {"role": "viewer"}, follow=True
    )
    removed = alice.post(reverse("projects:member_remove", args=[project.slug, mine.pk]), follow=True)

    assert "A project keeps at least one owner." in demoted.content.decode()
    assert "A project keeps at least one owner." in removed.content.decode()
    mine.refresh_from_db()
    assert mine.role == "owner"


def test_an_owner_who_leaves_lands_on_the_project_list(client_for, project, users):
    Membership.objects.filter(project=project, user=users["bob"]).update(role="owner")
    alice = client_for("alice")
    mine = Membership.objects.get(project=project, user=users["alice"])
    response = alice.post(reverse("projects:member_remove", args=[project.slug, mine.pk]))
    assert response.url == reverse("projects:list")
    assert not Membership.objects.filter(pk=mine.pk).exists()


def test_a_member_of_another_project_cannot_be_removed_through_this_one(client_for, project, users):
    other = project_create(name="Other", owner=users["eve"])
    eves = Membership.objects.get(project=other)
    response = client_for("alice").post(
        reverse("projects:member_remove", args=[project.slug, eves.pk]), follow=True
    )
    assert "No such member." in response.content.decode()
    assert Membership.objects.filter(pk=eves.pk).exists()


def test_every_member_sees_the_members_page_and_only_owners_get_its_controls(client_for, project):
    viewer = client_for("dave").get(f"/p/{project.slug}/members/")
    assert viewer.status_code == 200
    page = viewer.content.decode()
    assert "alice" in page and "Viewer" in page
    assert "Add a member" not in page and "Change role" not in page and "Remove" not in page
    owner = client_for("alice").get(f"/p/{project.slug}/members/").content.decode()
    assert "Add a member" in owner and "Change role" in owner
