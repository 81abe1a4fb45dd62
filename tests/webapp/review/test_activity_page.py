"""The activity page as a team reads it: a run of judgements is one line ("carol judged 6 pairs in …"), so
two comments stay in sight; it filters by kind of activity and by person; it marks what is new since the
reader was last here; members joining and invitations are in it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.webapp.review_factories import make_group, make_trajectory
from webapp.projects import services as project_services
from webapp.review import services

pytestmark = pytest.mark.django_db

PAIRS = 6


def lines_of(html: str) -> list[str]:
    items = re.findall(r'<li class="activity [^"]*"[^>]*>(.*?)</li>', html, re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", item).split()) for item in items]


@pytest.fixture
def busy_project(project, run, users):
    for group in range(PAIRS):
        make_group(run, group=group, rewards=[1.0, 0.0])
    queue = services.queue_create(
        project=project, user=users["bob"], name="sums", runs=[run], annotators=[users["carol"]]
    )
    trajectory = make_trajectory(run, group=40)
    services.comment_create(trajectory=trajectory, author=users["bob"], body="first look")
    while (assignment := services.next_pair(queue=queue, annotator=users["carol"])) is not None:
        services.judgement_submit(pair=assignment.pair, annotator=users["carol"], choice="a")
    services.comment_create(trajectory=trajectory, author=users["alice"], body="second look", turn_index=2)
    return project, queue


def activity(client, project, **query) -> str:
    response = client.get(reverse("review:activity", args=[project.slug]), query)
    assert response.status_code == 200
    return response.content.decode()


def test_a_run_of_judgements_is_one_line_and_the_comments_stay_in_sight(busy_project, client, users):
    project, queue = busy_project
    client.force_login(users["dave"])
    lines = lines_of(activity(client, project))
    assert lines[0].startswith("alice commented on trajectory") and "turn #2" in lines[0]
    assert lines[1].startswith(f"carol judged {PAIRS} pairs in sums")
    assert lines[2].startswith("bob commented on trajectory")
    assert sum("judged" in line for line in lines) == 1


def test_filters_by_kind_and_person(busy_project, client, users):
    project, _ = busy_project
    client.force_login(users["dave"])
    discussion = lines_of(activity(client, project, kind="discussion"))
    assert [line.split()[0] for line in discussion] == ["alice", "bob"]
    assert all(line.startswith("bob") for line in lines_of(activity(client, project, person="bob")))
    refused = activity(client, project, kind="gossip")
    assert "Select a valid choice" in refused and len(lines_of(refused)) >= 3  # unfiltered, saying why


def test_what_is_new_since_the_last_visit_is_marked(busy_project, client, users, run):
    project, _ = busy_project
    client.force_login(users["dave"])
    assert "Your first visit" in activity(client, project)
    assert "Nothing new since you were last here" in activity(client, project)
    services.comment_create(trajectory=make_trajectory(run, group=41), author=users["carol"], body="new")
    page = activity(client, project)
    assert "1 change since you were last here" in page
    before, after = page.split("data-activity-since", 1)
    assert "carol commented" in " ".join(lines_of(before)) and "carol commented" not in " ".join(
        lines_of(after)
    )


def test_members_joining_and_invitations_are_in_it(project, users, client, django_user_model):
    invitation, raw = project_services.invitation_create(
        project=project, created_by=users["alice"], role="annotator"
    )
    spare, _ = project_services.invitation_create(project=project, created_by=users["alice"], role="viewer")
    project_services.invitation_revoke(project=project, invitation_id=spare.pk, by=users["alice"])
    project_services.invitation_sign_up(raw=raw, username="frank", password="a-long-password-for-frank")
    django_user_model.objects.create_user("gina", "gina@example.com", "a-long-password-for-gina")
    project_services.membership_set(project=project, username="gina", role="viewer", by=users["alice"])
    client.force_login(users["dave"])
    lines = lines_of(activity(client, project, kind="members"))
    assert lines[0].startswith("gina joined the project · as viewer, added by alice")
    assert lines[1].startswith("frank joined the project · as annotator, through an invitation")
    assert lines[2].startswith("alice revoked an invitation · as viewer")
    assert lines[3].startswith("alice invited a new member · as viewer")
    assert lines[4].startswith("alice invited a new member · as annotator")
