"""What the JSON API refuses, it refuses out loud: integers past their column, bodies too large (413) or
nested too deep (400 on the field), names too long, page parameters out of range (400, after the 404 an
outsider gets), bodies that are not JSON (415), tokens on the wrong endpoint. No input answers 500."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tests.webapp.api.openapi import DOCUMENT
from webapp.accounts.models import ApiToken
from webapp.experiments.models import Environment, Run
from webapp.projects.models import Project

BIG = 2**63
LIST_PATHS = sorted(
    path
    for path, item in DOCUMENT["paths"].items()
    if any(p["name"] == "limit" for p in item.get("get", {}).get("parameters", []))
)


def token_client(world) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.personal_token}")
    return client


def fields_of(response, status: int = 400) -> dict:
    assert response.status_code == status, response.content[:500]
    body = response.json()
    assert body["error"] == "validation_failed", body
    return body["fields"]


def test_every_list_endpoint_is_in_the_probe():
    assert len(LIST_PATHS) >= 14 and "/api/projects/{slug}/runs/" in LIST_PATHS


@pytest.mark.parametrize("path", LIST_PATHS)
@pytest.mark.parametrize(
    "query, field",
    [
        (f"limit={BIG}", "limit"),
        ("limit=0", "limit"),
        ("limit=ten", "limit"),
        ("limit=501", "limit"),
        (f"offset={BIG}", "offset"),
        ("offset=-1", "offset"),
    ],
)
def test_a_page_parameter_out_of_range_is_a_400_on_it(world, path, query, field):
    assert field in fields_of(token_client(world).get(f"{world.url(path)}?{query}"))


@pytest.mark.parametrize("path", [p for p in LIST_PATHS if "{slug}" in p])
def test_an_unknown_project_is_a_404_before_the_page_parameters_are_looked_at(world, path):
    url = path.replace("{slug}", "no-such-project")
    url = (
        url.format(**{k: v for k, v in world.parameters_for(path).items() if k != "slug"})
        if "{id}" in url
        else url
    )
    response = token_client(world).get(f"{url}?limit={BIG}")
    assert response.status_code == 404 and response.json()["error"] == "not_found"


def test_an_outsider_gets_the_404_before_the_page_parameters_are_looked_at(signed_in, world):
    response = signed_in("eve").get(f"{world.url('/api/runs/{id}/trajectories/')}?limit={BIG}")
    assert response.status_code == 404


def test_pages_have_the_documented_envelope(world):
    body = token_client(world).get("/api/projects/?limit=1").json()
    assert set(body) == {"count", "next", "previous", "results"} and len(body["results"]) == 1


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("depth, field", [(5000, "non_field_errors"), (40, "config")])
def test_an_environment_config_nested_too_deep_is_a_400(world, depth, field):
    body = '{"name": "deep", "kind": "countdown", "config": ' + nested(depth) + "}"
    response = token_client(world).post(
        world.url("/api/projects/{slug}/environments/"), body, content_type="application/json"
    )
    assert field in fields_of(response)
    assert not Environment.objects.filter(name="deep").exists()


@pytest.mark.parametrize("depth, field", [(5000, "non_field_errors"), (40, "config")])
def test_an_external_run_config_nested_too_deep_is_a_400(world, depth, field):
    body = '{"name": "deep", "config": ' + nested(depth) + "}"
    response = token_client(world).post(
        world.url("/api/projects/{slug}/external-runs/"), body, content_type="application/json"
    )
    assert field in fields_of(response)
    assert not Run.objects.filter(name="deep").exists()


def test_max_steps_past_its_column_is_a_400(world):
    response = token_client(world).post(
        world.url("/api/projects/{slug}/external-runs/"), {"name": "long", "max_steps": BIG}, format="json"
    )
    assert "max_steps" in fields_of(response)


@pytest.mark.parametrize("field", ["environment", "rubric"])
def test_an_id_past_64_bits_is_a_400_on_run_create(world, field):
    body = {"name": "r", "environment": 1, "rubric": 1, field: BIG}
    assert field in fields_of(
        token_client(world).post(world.url("/api/projects/{slug}/runs/"), body, format="json")
    )


def test_a_checkpoint_id_past_64_bits_is_a_400_on_resume(world):
    response = token_client(world).post(
        world.url("/api/runs/{id}/resume/"), {"checkpoint": BIG}, format="json"
    )
    assert "checkpoint" in fields_of(response)


def test_a_body_over_the_limit_is_a_413_and_nothing_is_stored(world):
    description = "x" * (settings.API_MAX_BODY_BYTES + 1)
    response = token_client(world).post(
        world.url("/api/projects/{slug}/environments/"),
        {"name": "big", "kind": "countdown", "description": description},
        format="json",
    )
    assert response.status_code == 413
    assert response.json() == {
        "error": "body_too_large",
        "detail": response.json()["detail"],
        "max_bytes": settings.API_MAX_BODY_BYTES,
    }
    assert not Environment.objects.filter(name="big").exists()


def test_a_description_over_its_limit_is_a_400(world):
    response = token_client(world).post(
        world.url("/api/projects/{slug}/environments/"),
        {"name": "wordy", "kind": "countdown", "description": "x" * 10_001},
        format="json",
    )
    assert "description" in fields_of(response)


def test_a_token_name_too_long_is_a_400_not_a_silent_cut(world):
    response = token_client(world).post("/api/tokens/", {"name": "n" * 10_000}, format="json")
    assert fields_of(response)["name"]
    assert not ApiToken.objects.filter(name__startswith="nnnn").exists()


def test_a_project_name_too_long_is_a_400(world):
    response = token_client(world).post("/api/projects/", {"name": "p" * 121}, format="json")
    assert "name" in fields_of(response)
    assert not Project.objects.filter(name__startswith="ppp").exists()


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_json_is_a_415(world, content_type):
    response = token_client(world).post(
        "/api/projects/", json.dumps({"name": "plain"}), content_type=content_type
    )
    assert response.status_code == 415 and response.json()["error"] == "unsupported_media_type"
    assert not Project.objects.filter(name="plain").exists()


def test_nan_is_not_json(world):
    response = token_client(world).post("/api/projects/", '{"name": NaN}', content_type="application/json")
    assert response.status_code == 400 and response.json()["error"] == "malformed_json"


def test_a_run_token_on_a_user_endpoint_is_an_authentication_failure(world):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.run_token}")
    response = client.get("/api/projects/")
    assert response.status_code == 401
    assert response.json()["error"] == "authentication_failed" and "rsr_" in response.json()["detail"]


def test_a_bearer_value_that_is_no_token_is_an_authentication_failure():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer hello")
    assert client.get("/api/projects/").json()["error"] == "authentication_failed"


def test_no_credentials_is_not_authenticated():
    response = APIClient().get("/api/projects/")
    assert response.status_code == 401 and response.json()["error"] == "not_authenticated"


def test_replies_that_carry_a_token_are_not_cached(world):
    response = token_client(world).post("/api/tokens/", {"name": "ci"}, format="json")
    assert response.status_code == 201 and "no-store" in response["Cache-Control"]
    response = token_client(world).post(
        world.url("/api/projects/{slug}/external-runs/"), {"name": "ext"}, format="json"
    )
    assert response.status_code == 201 and "no-store" in response["Cache-Control"]


@pytest.mark.parametrize(
    "path, body, field",
    [
        (
            "/api/projects/{slug}/environments/",
            '{"name": "n", "kind": "from_dataset", "config": {"path": "x", "system_prompt": "a\\u0000"}}',
            "config.system_prompt",
        ),
        ("/api/projects/{slug}/external-runs/", '{"name": "n", "config": {"a\\u0000": 1}}', "config"),
        (
            "/api/projects/{slug}/rubrics/",
            '{"name": "n", "criteria": [{"name": "c", "kind": "exact_match", "weight": 1, "params": {"target": "\\ud800"}}]}',
            "criteria.0.params.target",
        ),
    ],
)
def test_a_string_the_database_cannot_store_is_a_400_on_its_field(world, path, body, field):
    """Postgres refuses NUL in text and jsonb, and UTF-8 cannot encode a lone surrogate: both were 500s."""
    response = token_client(world).post(world.url(path), body, content_type="application/json")
    assert fields_of(response) == {field: ["Null characters and lone surrogate characters are not allowed."]}


def test_an_escaped_surrogate_pair_is_just_a_character(world):
    response = token_client(world).post(
        "/api/projects/", '{"name": "smile \\ud83d\\ude00"}', content_type="application/json"
    )
    assert response.status_code == 201 and response.json()["name"] == "smile 😀"


def test_a_number_too_large_for_a_double_is_refused_not_stored_as_infinity(world):
    """1e400 parses to infinity in Python: stored in a config, it broke Postgres and every later read."""
    body = '{"name": "huge", "kind": "from_dataset", "config": {"path": "x", "temperature": 1e400}}'
    response = token_client(world).post(
        world.url("/api/projects/{slug}/environments/"), body, content_type="application/json"
    )
    assert response.status_code == 400 and response.json()["error"] == "malformed_json"
    assert "too large" in response.json()["detail"]
