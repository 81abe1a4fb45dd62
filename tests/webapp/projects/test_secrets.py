"""Project secrets: stored encrypted, listed by name, never shown back — in pages or the API."""

from __future__ import annotations

import json

import pytest

from webapp.projects.models import ProjectSecret
from webapp.projects.services import secret_set, secret_values

VALUE = "sk-live-7f3a9c0d-very-secret"


def send(client, method: str, url: str, body=None):
    return client.generic(
        method, url, json.dumps(body) if body is not None else None, content_type="application/json"
    )


def test_bob_stores_a_key_that_no_page_or_api_shows_back(project, users, signed_in, client_for):
    bob = signed_in("bob")
    created = send(
        bob, "POST", f"/api/projects/{project.slug}/secrets/", {"name": "JUDGE_KEY", "value": VALUE}
    )
    assert created.status_code == 201, created.content
    assert created.json()["name"] == "JUDGE_KEY" and VALUE not in created.content.decode()

    stored = ProjectSecret.objects.get(project=project, name="JUDGE_KEY")
    assert VALUE not in stored.ciphertext  # encrypted at rest
    assert secret_values(project=project, names=["JUDGE_KEY", "OTHER"]) == {"JUDGE_KEY": VALUE}

    listed = bob.get(f"/api/projects/{project.slug}/secrets/")
    assert [s["name"] for s in listed.json()["results"]] == ["JUDGE_KEY"]
    assert VALUE not in listed.content.decode()
    page = client_for("bob").get(f"/p/{project.slug}/secrets/")
    assert page.status_code == 200 and "JUDGE_KEY" in page.content.decode()
    assert VALUE not in page.content.decode()


def test_saving_a_name_again_replaces_the_value(project, users):
    secret_set(project=project, name="KEY", value="one", user=users["alice"])
    secret_set(project=project, name="KEY", value="two", user=users["bob"])
    assert secret_values(project=project, names=["KEY"]) == {"KEY": "two"}
    assert ProjectSecret.objects.filter(project=project).count() == 1


def test_a_bad_name_or_empty_value_is_a_field_error(project, signed_in):
    response = send(
        signed_in("bob"), "POST", f"/api/projects/{project.slug}/secrets/", {"name": "1 key", "value": " "}
    )
    assert response.status_code == 400
    assert set(response.json()["fields"]) == {"name", "value"}
    assert not ProjectSecret.objects.exists()


@pytest.mark.parametrize(("name", "status"), [("carol", 403), ("dave", 403), ("eve", 404)])
def test_only_researchers_and_owners_reach_secrets(project, users, signed_in, name, status):
    secret_set(project=project, name="KEY", value=VALUE, user=users["alice"])
    client = signed_in(name)
    assert client.get(f"/api/projects/{project.slug}/secrets/").status_code == status
    assert send(client, "DELETE", f"/api/projects/{project.slug}/secrets/KEY/").status_code == status
    assert ProjectSecret.objects.filter(name="KEY").exists()


def test_deleting_a_secret(project, users, client_for):
    secret_set(project=project, name="KEY", value=VALUE, user=users["alice"])
    response = client_for("alice").post(f"/p/{project.slug}/secrets/KEY/delete/")
    assert response.status_code == 302
    assert not ProjectSecret.objects.exists()
