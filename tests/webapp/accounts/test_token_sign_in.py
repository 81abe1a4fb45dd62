"""A script gets its first token without a browser — `POST /api/auth/token/` with a password, or
`manage.py api_token` on the server — and wrong passwords are throttled there as on the sign-in page."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from tests.conftest import PASSWORD
from webapp.accounts.models import ApiToken, LoginFailure


def sign_in(username: str, password: str, name: str = "laptop script", **extra):
    return APIClient(**extra).post(
        "/api/auth/token/", {"username": username, "password": password, "name": name}, format="json"
    )


def test_a_password_buys_a_token_that_then_works(users):
    response = sign_in("bob", PASSWORD)
    assert response.status_code == 201 and "no-store" in response["Cache-Control"]
    token = response.json()["token"]
    assert token.startswith("rsu_") and ApiToken.objects.get(user=users["bob"]).name == "laptop script"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/projects/").status_code == 200


def test_a_wrong_password_is_a_400_that_does_not_say_which_part_was_wrong(users):
    for username in ("bob", "nobody"):
        response = sign_in(username, "wrong")
        assert response.status_code == 400
        assert response.json()["fields"] == {"non_field_errors": ["Wrong username or password."]}
    assert not ApiToken.objects.exists()


def test_wrong_passwords_are_throttled_then_even_the_right_one_waits(users, settings):
    settings.LOGIN_FAILURES_PER_ADDRESS = 3
    for _ in range(3):
        assert sign_in("bob", "guess").status_code == 400
    response = sign_in("bob", PASSWORD)
    assert response.status_code == 429
    assert response.json()["error"] == "throttled" and int(response["Retry-After"]) > 0
    assert not ApiToken.objects.exists()
    assert sign_in("carol", PASSWORD).status_code == 201  # other accounts are not affected


def test_the_command_prints_a_working_token(users):
    out = StringIO()
    call_command("api_token", "dave", "--name", "ci job", stdout=out)
    token = out.getvalue().strip()
    assert ApiToken.objects.get(user=users["dave"]).name == "ci job"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/tokens/").json()["count"] == 1


def test_the_command_names_what_is_wrong(users):
    with pytest.raises(CommandError, match="No active user named 'nobody'"):
        call_command("api_token", "nobody")
    with pytest.raises(CommandError, match="At most 80 characters"):
        call_command("api_token", "dave", "--name", "x" * 81)


def test_a_successful_sign_in_clears_the_failures_from_that_address(users):
    sign_in("bob", "guess")
    assert LoginFailure.objects.count() == 1
    assert sign_in("bob", PASSWORD).status_code == 201
    assert not LoginFailure.objects.exists()
