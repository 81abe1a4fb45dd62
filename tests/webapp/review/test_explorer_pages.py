"""The explorer's pages and API: who may use them, saved views stay private, hostile text stays inert.

alice owns the project, bob researches, carol annotates, dave views, eve is an outsider.
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from tests.webapp.review.test_explorer import STORY, ingest
from webapp.review.models import Tag, TrajectoryTag
from webapp.rollouts.models import SavedView, Trajectory

PEOPLE = [None, "alice", "bob", "carol", "dave", "eve"]
MEMBERS = {"alice", "bob", "carol", "dave"}


@pytest.fixture
def world(project, run, users):
    ingest(run, STORY)
    views = {
        name: SavedView.objects.create(
            project=project, user=users[name], name=f"{name}'s view", query="status=ok"
        )
        for name in MEMBERS
    }
    return {"project": project, "run": run, "views": views}


def explorer_url(project) -> str:
    return reverse("review:explorer", args=[project.slug])


# --- the permission matrix -----------------------------------------------------------------------------


def _requests(world, person):
    project = world["project"]
    own_view = world["views"].get(person) or world["views"]["alice"]
    return {
        "explorer page": ("get", explorer_url(project), {"q": "answer", "status": "ok"}, 200),
        "explorer results (htmx)": ("get", explorer_url(project), {"q": "answer"}, 200),
        "save a view": (
            "post",
            reverse("review:saved_view_save", args=[project.slug]),
            {"name": "mine", "query": "status=error"},
            302,
        ),
        "delete own view": (
            "post",
            reverse("review:saved_view_delete", args=[project.slug, own_view.pk]),
            {},
            302,
        ),
    }


@pytest.mark.parametrize("person", PEOPLE, ids=lambda p: p or "anonymous")
@pytest.mark.parametrize(
    "action", ["explorer page", "explorer results (htmx)", "save a view", "delete own view"]
)
def test_every_member_may_explore_and_keep_views_outsiders_see_nothing(client, users, world, person, action):
    if person is not None:
        client.force_login(users[person])
    method, url, data, ok = _requests(world, person)[action]
    headers = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "explorer-results"} if "htmx" in action else {}
    views_before = SavedView.objects.count()

    response = getattr(client, method)(url, data, **headers)

    if person is None:
        assert response.status_code == 302 and response.url.startswith(reverse("accounts:login"))
    elif person == "eve":
        assert response.status_code == 404
    else:
        assert response.status_code == ok, response.content[:300]
    if person not in MEMBERS:
        assert SavedView.objects.count() == views_before


@pytest.mark.parametrize("person", PEOPLE, ids=lambda p: p or "anonymous")
def test_the_api_answers_members_only(world, users, person):
    client = APIClient()
    if person is not None:
        client.force_login(users[person])
    response = client.get(f"/api/projects/{world['project'].slug}/trajectories/", {"q": "calculator"})
    expected = {None: 401, "eve": 404}.get(person, 200)
    assert response.status_code == expected
    if expected == 200:
        assert [row["task_id"] for row in response.json()["results"]] == ["add-0", "add-0"]


def test_the_explorer_routes_are_all_in_this_matrix():
    from webapp.review import urls_explorer

    assert {p.name for p in urls_explorer.urlpatterns} == {"explorer", "saved_view_save", "saved_view_delete"}


# --- saved views ----------------------------------------------------------------------------------------


def test_a_saved_view_keeps_only_the_filters_and_only_its_owner_sees_it(client_for, world):
    project = world["project"]
    alice = client_for("alice")
    response = alice.post(
        reverse("review:saved_view_save", args=[project.slug]),
        {"name": "Errors", "query": "?status=error&cursor=abc&evil=1&q=timeout&split="},
    )
    view = SavedView.objects.get(name="Errors")
    assert view.query == "status=error&q=timeout"
    assert response.url == f"{explorer_url(project)}?status=error&q=timeout"
    assert (
        'href="?status=error&amp;q=timeout">Errors</a>' in alice.get(explorer_url(project)).content.decode()
    )

    dave = client_for("dave")
    page = dave.get(explorer_url(project)).content.decode()
    assert "Errors" not in page and "alice&#x27;s view" not in page and "dave&#x27;s view" in page
    assert dave.post(reverse("review:saved_view_delete", args=[project.slug, view.pk])).status_code == 404
    assert SavedView.objects.filter(pk=view.pk).exists()


def test_saving_under_the_same_name_replaces_the_view(client_for, world):
    project = world["project"]
    alice = client_for("alice")
    url = reverse("review:saved_view_save", args=[project.slug])
    alice.post(url, {"name": "Mine", "query": "status=error"})
    alice.post(url, {"name": "Mine", "query": "status=truncated"})
    assert list(SavedView.objects.filter(name="Mine").values_list("query", flat=True)) == ["status=truncated"]


def test_a_view_needs_a_name(client_for, world):
    alice = client_for("alice")
    response = alice.post(
        reverse("review:saved_view_save", args=[world["project"].slug]),
        {"name": "  ", "query": "status=error"},
        follow=True,
    )
    assert "Give the view a name." in response.content.decode()
    assert not SavedView.objects.filter(query="status=error").exists()


def test_deleting_a_view(client_for, world):
    project, view = world["project"], world["views"]["carol"]
    carol = client_for("carol")
    carol.post(reverse("review:saved_view_delete", args=[project.slug, view.pk]))
    assert not SavedView.objects.filter(pk=view.pk).exists()


# --- hostile text ---------------------------------------------------------------------------------------

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    "[click me](javascript:alert(3))",
    '"><svg onload=alert(4)>',
]


@pytest.fixture
def hostile(project, run, users):
    from webapp.experiments.models import Run

    Run.objects.filter(pk=run.pk).update(name="<script>alert('run')</script>")
    item_text = " then ".join(HOSTILE) + " answer"
    ingest(run, [(1, 0, 0, 1.0, "ok", "Hostile " + item_text)], task="<b>task</b>")
    trajectory = Trajectory.objects.get()
    Trajectory.objects.filter(pk=trajectory.pk).update(
        components=[
            {"name": "<img src=y onerror=alert(5)>", "kind": "regex", "raw": 1, "weight": 1, "weighted": 1},
        ]
    )
    tag = Tag.objects.create(
        project=project, name="<script>t</script>", color='"><i>x'
    )  # 7 characters at most
    TrajectoryTag.objects.create(trajectory=trajectory, tag=tag)
    SavedView.objects.create(
        project=project, user=users["dave"], name="<img src=z onerror=alert(7)>", query="q=%3Cscript%3E"
    )
    return trajectory


def assert_inert(html: str) -> None:
    assert "<script>alert" not in html and "<script>t</script>" not in html
    assert not re.search(r"<img[^>]*onerror", html)
    assert not re.search(r"<svg[^>]*onload", html)
    assert 'href="javascript:' not in html.lower()
    assert "<i>x" not in html


@pytest.mark.parametrize("query", ["alert", "script", "javascript", "onerror", '"><script>alert(9)</script>'])
def test_hostile_text_in_results_and_snippets_renders_inert(client_for, project, hostile, query):
    client = client_for("dave")
    for headers in ({}, {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "explorer-results"}):
        response = client.get(explorer_url(project), {"q": query}, **headers)
        assert response.status_code == 200
        html = response.content.decode()
        assert_inert(html)
    page = client.get(explorer_url(project), {"q": "alert"}).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page or "&lt;script&gt;" in page  # shown, as text
    assert "&lt;b&gt;task&lt;/b&gt;" in page and "&lt;img src=y onerror=alert(5)&gt;" in page
    assert "&lt;img src=z onerror=alert(7)&gt;" in page  # the saved view's name


def test_snippets_cannot_forge_a_highlight(client_for, project, run):
    from webapp.rollouts.search import MATCH_END, MATCH_START

    ingest(
        run,
        [(1, 0, 0, 1.0, "ok", f"Forged {MATCH_START}<b>bold</b>{MATCH_END} highlight and a real kumquat")],
    )
    html = client_for("dave").get(explorer_url(project), {"q": "kumquat"}).content.decode()
    assert "<mark>kumquat</mark>" in html
    assert "<mark>&lt;b&gt;" not in html and "<b>bold</b>" not in html
    assert MATCH_START not in html and MATCH_END not in html


def test_the_api_returns_hostile_text_as_json_data(project, hostile, users):
    client = APIClient()
    client.force_login(users["dave"])
    response = client.get(f"/api/projects/{project.slug}/trajectories/", {"q": "onerror"})
    assert response["Content-Type"].startswith("application/json")
    (row,) = response.json()["results"]
    assert row["task_id"] == "<b>task</b>-0" and row["tags"] == ["<script>t</script>"]
    assert any(segment["match"] for segment in row["snippet"])


def test_the_api_rejects_bad_filters_and_cursors_by_field(project, world, users):
    client = APIClient()
    client.force_login(users["dave"])
    url = f"/api/projects/{project.slug}/trajectories/"
    body = client.get(url, {"reward_min": "x", "sort": "random"}).json()
    assert body["error"] == "validation_failed" and {"reward_min", "sort"} <= set(body["fields"])
    body = client.get(url, {"cursor": "garbage"}).json()
    assert body["error"] == "validation_failed" and "cursor" in body["fields"]
