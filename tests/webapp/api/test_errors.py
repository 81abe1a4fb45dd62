"""Every answer under /api/ is JSON — unknown paths, a trailing slash too many or too few, methods an
endpoint lacks, a crash, an `Accept` header that asks for HTML — with the documented `{error, detail}`
body; the pages keep their HTML error pages."""

from __future__ import annotations

import pytest
from django.test import Client

from webapp.experiments import selectors as experiment_selectors


def assert_json_error(response, status: int, error: str) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert body["error"] == error and body["detail"], body
    return body


@pytest.mark.parametrize("method", ["get", "post", "delete"])
def test_an_unknown_api_path_is_a_json_404(signed_in, method):
    assert_json_error(getattr(signed_in("alice"), method)("/api/no-such-thing/"), 404, "not_found")


def test_an_unknown_api_path_is_json_for_anonymous_callers_too():
    assert_json_error(Client().get("/api/nothing/here"), 404, "not_found")


def test_the_events_endpoint_with_a_trailing_slash_is_a_json_404_that_names_the_right_path(run):
    body = assert_json_error(
        Client().post(f"/api/runs/{run.pk}/events/", data="{}", content_type="application/json"),
        404,
        "not_found",
    )
    assert f"Did you mean /api/runs/{run.pk}/events?" in body["detail"]


def test_a_missing_trailing_slash_is_a_json_404_that_names_the_right_path(signed_in):
    body = assert_json_error(
        signed_in("alice").post("/api/projects", {"name": "x"}, format="json"), 404, "not_found"
    )
    assert "Did you mean /api/projects/?" in body["detail"]


def test_a_method_an_endpoint_lacks_is_a_json_405(signed_in, run):
    assert_json_error(
        signed_in("alice").put(f"/api/runs/{run.pk}/", {}, format="json"), 405, "method_not_allowed"
    )


def test_a_crash_is_a_json_500_without_internals(signed_in, run, monkeypatch):
    def explode():
        raise RuntimeError("secret internals")

    monkeypatch.setattr(experiment_selectors, "run_queryset", explode)
    client = signed_in("alice")
    client.raise_request_exception = False
    body = assert_json_error(client.get(f"/api/runs/{run.pk}/"), 500, "server_error")
    assert "secret" not in body["detail"]


def test_a_page_that_crashes_keeps_the_html_error_page(client_for, project, monkeypatch):
    from webapp.experiments.views import definitions as views

    monkeypatch.setattr(views, "render", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    client = client_for("alice")
    client.raise_request_exception = False
    response = client.get(f"/p/{project.slug}/environments/")
    assert response.status_code == 500 and response["Content-Type"].startswith("text/html")


def test_asking_for_html_still_gets_json(signed_in):
    response = signed_in("alice").get("/api/projects/", HTTP_ACCEPT="text/html")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/json")


def test_a_bad_host_header_is_a_json_400():
    response = Client(HTTP_HOST="evil.example.com").get("/api/projects/")
    assert_json_error(response, 400, "bad_request")


def test_a_page_under_an_unknown_path_keeps_the_html_404(client_for):
    response = client_for("alice").get("/no-such-page/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")
