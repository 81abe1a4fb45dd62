"""The OpenAPI document: served at /api/schema/, valid, complete, free of generator warnings."""

from __future__ import annotations

import pytest
import yaml
from django.core.management import call_command
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

EXPECTED_OPERATIONS = {
    ("/api/projects/", "get"),
    ("/api/projects/", "post"),
    ("/api/projects/{slug}/", "get"),
    ("/api/projects/{slug}/members/", "get"),
    ("/api/projects/{slug}/members/", "post"),
    ("/api/projects/{slug}/members/{id}/", "patch"),
    ("/api/projects/{slug}/members/{id}/", "delete"),
    ("/api/projects/{slug}/environments/", "get"),
    ("/api/projects/{slug}/environments/", "post"),
    ("/api/projects/{slug}/environments/{id}/", "get"),
    ("/api/projects/{slug}/environments/{id}/", "patch"),
    ("/api/projects/{slug}/environments/{id}/versions/", "get"),
    ("/api/projects/{slug}/rubrics/", "get"),
    ("/api/projects/{slug}/rubrics/", "post"),
    ("/api/projects/{slug}/rubrics/{id}/", "get"),
    ("/api/projects/{slug}/rubrics/{id}/", "patch"),
    ("/api/projects/{slug}/rubrics/{id}/versions/", "get"),
    ("/api/projects/{slug}/runs/", "get"),
    ("/api/projects/{slug}/runs/", "post"),
    ("/api/runs/{id}/", "get"),
    ("/api/runs/{id}/cancel/", "post"),
    ("/api/runs/{id}/checkpoints/", "get"),
    ("/api/runs/{id}/trajectories/", "get"),
    ("/api/runs/{id}/trajectories/{trajectory_id}/", "get"),
    ("/api/runs/{id}/metrics/", "get"),
    ("/api/kinds/environments/", "get"),
    ("/api/kinds/criteria/", "get"),
    ("/api/presets/", "get"),
    ("/api/tokens/", "get"),
    ("/api/tokens/", "post"),
    ("/api/tokens/{id}/", "delete"),
}


@pytest.fixture(scope="module")
def document() -> dict:
    response = APIClient().get("/api/schema/?format=json")
    assert response.status_code == 200
    return response.json()


def test_schema_is_public_valid_openapi(document):
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"] == "Rollout Studio API"
    validate_schema(document)  # raises on an invalid document


def test_schema_lists_every_endpoint(document):
    operations = {
        (path, method)
        for path, item in document["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    }
    assert EXPECTED_OPERATIONS <= operations


def test_schema_documents_both_ways_to_authenticate(document):
    schemes = document["components"]["securitySchemes"]
    assert schemes["apiToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["apiToken"]["description"],
    }
    assert schemes["cookieAuth"]["in"] == "cookie"


def test_schema_describes_request_bodies_and_error_shapes(document):
    run_create = document["paths"]["/api/projects/{slug}/runs/"]["post"]
    body = run_create["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert {"environment", "rubric", "preset", "overrides"} <= set(
        document["components"]["schemas"][body]["properties"]
    )
    created = run_create["responses"]["201"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[
        -1
    ]
    assert "ingest_token" in document["components"]["schemas"][created]["properties"]
    assert "400" in run_create["responses"]
    params = {p["name"] for p in document["paths"]["/api/runs/{id}/trajectories/"]["get"]["parameters"]}
    assert {"step", "split", "min_reward", "limit", "offset"} <= params


def test_spectacular_validates_without_warnings(tmp_path, db):
    """The same check as `manage.py spectacular --validate --fail-on-warn`: any generator warning fails."""
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    assert "/api/runs/{id}/metrics/" in yaml.safe_load(out.read_text())["paths"]


@pytest.mark.parametrize("url, marker", [("/api/docs/", b"swagger-ui"), ("/api/docs/redoc/", b"redoc")])
def test_docs_pages_render_with_local_assets(url, marker, client):
    response = client.get(url)
    assert response.status_code == 200
    page = response.content.lower()
    assert marker in page
    assert b"cdn.jsdelivr" not in page and b"/static/drf_spectacular_sidecar/" in page
