"""Projects and members through the JSON API."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from webapp.projects.models import Membership, Project


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def send(client: APIClient, method: str, url: str, body=None):
    return client.generic(
        method, url, json.dumps(body) if body is not None else None, content_type="application/json"
    )


def test_eve_creates_a_project_and_owns_it(signed_in, users):
    eve = signed_in("eve")
    created = send(eve, "POST", "/api/projects/", {"name": "Eve's Lab", "description": "agents"})
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["slug"] == "eves-lab"
    assert body["role"] == "owner"
    assert body["capabilities"] == ["adjudicate", "annotate", "launch", "manage", "read"]
    assert body["run_count"] == 0
    assert Membership.objects.get(project__slug="eves-lab", user=users["eve"]).role == "owner"

    again = send(eve, "POST", "/api/projects/", {"name": "Eve's Lab"})
    assert again.json()["slug"] == "eves-lab-2"


def test_a_project_needs_a_name(signed_in):
    response = send(signed_in("eve"), "POST", "/api/projects/", {"name": "   "})
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["name"]
    assert not Project.objects.exists()


def test_project_list_shows_only_your_projects_with_your_role_and_counts(signed_in, project, run):
    listed = signed_in("dave").get("/api/projects/").json()
    assert listed["count"] == 1
    entry = listed["results"][0]
    assert entry["slug"] == project.slug
    assert entry["role"] == "viewer"
    assert entry["run_count"] == 1 and entry["active_run_count"] == 1
    assert signed_in("eve").get("/api/projects/").json()["count"] == 0


def test_project_detail_tells_the_caller_what_they_may_do(signed_in, project):
    assert signed_in("carol").get(f"/api/projects/{project.slug}/").json()["capabilities"] == [
        "annotate",
        "read",
    ]
    assert signed_in("bob").get(f"/api/projects/{project.slug}/").json()["role"] == "researcher"
    assert signed_in("eve").get(f"/api/projects/{project.slug}/").status_code == 404
    assert signed_in("alice").get("/api/projects/no-such-project/").status_code == 404


def test_members_are_listed_by_username(signed_in, project):
    members = signed_in("dave").get(f"/api/projects/{project.slug}/members/").json()["results"]
    assert [(m["username"], m["role"]) for m in members] == [
        ("alice", "owner"),
        ("bob", "researcher"),
        ("carol", "annotator"),
        ("dave", "viewer"),
    ]


def test_alice_adds_promotes_and_removes_a_member(signed_in, project, users):
    alice = signed_in("alice")
    url = f"/api/projects/{project.slug}/members/"
    added = send(alice, "POST", url, {"username": "eve", "role": "annotator"})
    assert added.status_code == 201, added.content
    member = added.json()
    assert (member["username"], member["role"]) == ("eve", "annotator")
    assert signed_in("eve").get(f"/api/projects/{project.slug}/").status_code == 200

    promoted = send(alice, "PATCH", f"{url}{member['id']}/", {"role": "researcher"})
    assert promoted.json()["role"] == "researcher"

    # POSTing an existing member changes their role rather than duplicating them
    again = send(alice, "POST", url, {"username": "eve", "role": "viewer"})
    assert again.status_code == 201 and again.json()["id"] == member["id"]
    assert Membership.objects.filter(project=project, user=users["eve"]).count() == 1

    assert send(alice, "DELETE", f"{url}{member['id']}/").status_code == 204
    assert signed_in("eve").get(f"/api/projects/{project.slug}/").status_code == 404


@pytest.mark.parametrize(
    "body, path",
    [
        ({"username": "mallory", "role": "viewer"}, "username"),
        ({"username": "eve", "role": "admin"}, "role"),
        ({"username": "eve"}, "role"),
    ],
)
def test_bad_member_input_names_the_field(body, path, signed_in, project):
    before = Membership.objects.count()
    response = send(signed_in("alice"), "POST", f"/api/projects/{project.slug}/members/", body)
    assert response.status_code == 400
    assert list(response.json()["fields"]) == [path]
    assert Membership.objects.count() == before


def test_the_last_owner_can_neither_leave_nor_be_demoted(signed_in, project):
    alice = signed_in("alice")
    own = Membership.objects.get(project=project, user__username="alice")
    url = f"/api/projects/{project.slug}/members/{own.pk}/"

    demoted = send(alice, "PATCH", url, {"role": "viewer"})
    assert demoted.status_code == 400
    assert list(demoted.json()["fields"]) == ["role"]
    assert send(alice, "DELETE", url).status_code == 400
    own.refresh_from_db()
    assert own.role == "owner"

    # with a second owner, alice may step down
    bob = Membership.objects.get(project=project, user__username="bob")
    send(alice, "PATCH", f"/api/projects/{project.slug}/members/{bob.pk}/", {"role": "owner"})
    assert send(alice, "PATCH", url, {"role": "viewer"}).status_code == 200


def test_a_membership_of_another_project_is_404(signed_in, project, users):
    from webapp.projects.services import project_create

    other = project_create(name="Other", owner=users["alice"])
    foreign = Membership.objects.get(project=other)
    response = send(signed_in("alice"), "DELETE", f"/api/projects/{project.slug}/members/{foreign.pk}/")
    assert response.status_code == 404
    assert Membership.objects.filter(pk=foreign.pk).exists()
