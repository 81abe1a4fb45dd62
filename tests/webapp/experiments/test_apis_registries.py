"""Registries (kinds, presets) for clients that build forms, and personal API tokens."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator
from rest_framework.test import APIClient

from trainers.config import PRESETS
from trainers.registry import criterion_kinds, environment_kinds
from webapp.accounts.models import ApiToken, hash_token


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def eve(users) -> APIClient:
    client = APIClient()
    client.force_login(users["eve"])
    return client


@pytest.mark.parametrize(
    "url, registry",
    [("/api/kinds/environments/", environment_kinds), ("/api/kinds/criteria/", criterion_kinds)],
)
def test_kinds_come_with_their_json_schemas(url, registry, eve):
    kinds = eve.get(url).json()
    assert [k["name"] for k in kinds] == sorted(registry())
    for kind in kinds:
        assert kind["title"] and isinstance(kind["needs_model"], bool)
        Draft202012Validator.check_schema(kind["config_schema"])
        assert kind["config_schema"] == registry()[kind["name"]].config_schema


def test_presets_schema_and_defaults(eve):
    body = eve.get("/api/presets/").json()
    assert [p["name"] for p in body["presets"]] == list(PRESETS)
    dapo = next(p for p in body["presets"] if p["name"] == "dapo")
    assert dapo["title"] == "DAPO"
    assert dapo["knobs"]["clip_high"] == 0.28
    assert dapo["resolved"]["clip_high"] == 0.28 and dapo["resolved"]["preset"] == "dapo"
    Draft202012Validator.check_schema(body["schema"])
    assert "group_size" in body["schema"]["properties"]
    assert body["defaults"]["group_size"] == body["schema"]["properties"]["group_size"]["default"]
    assert "algorithm" in body["groups"]


def test_a_token_is_shown_once_and_stored_hashed(eve, users):
    created = eve.post("/api/tokens/", {"name": "laptop"}, format="json")
    assert created.status_code == 201
    raw = created.json()["token"]
    assert raw.startswith("rsu_") and created.json()["prefix"] == raw[:10]
    stored = ApiToken.objects.get(pk=created.json()["id"])
    assert stored.token_hash == hash_token(raw) and raw not in (stored.prefix, stored.token_hash)

    listed = eve.get("/api/tokens/").json()["results"]
    assert [t["name"] for t in listed] == ["laptop"]
    assert "token" not in listed[0]

    script = APIClient()
    script.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert script.get("/api/tokens/").status_code == 200
    stored.refresh_from_db()
    assert stored.last_used_at is not None


def test_a_token_needs_a_name(eve):
    response = eve.post("/api/tokens/", {"name": " "}, format="json")
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["name"]
    assert not ApiToken.objects.exists()


def test_tokens_are_private_to_their_owner(eve, users):
    from webapp.accounts.services import api_token_create

    api_token_create(user=users["alice"], name="alice's")
    assert eve.get("/api/tokens/").json()["count"] == 0


def test_revoking_twice_is_404(eve):
    token_id = eve.post("/api/tokens/", {"name": "once"}, format="json").json()["id"]
    assert eve.delete(f"/api/tokens/{token_id}/").status_code == 204
    assert eve.delete(f"/api/tokens/{token_id}/").status_code == 404
    listed = eve.get("/api/tokens/").json()["results"]
    assert listed[0]["revoked_at"] is not None
