"""Signing in and out, and API tokens: shown once, listed by prefix, revoked."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.conftest import PASSWORD
from tests.webapp.html_forms import field_errors, page_errors
from webapp.accounts.models import ApiToken, hash_token


def test_it_signs_in_with_a_password_and_goes_to_the_projects(client, users):
    page = client.get(reverse("accounts:login"))
    assert page.status_code == 200 and 'name="password"' in page.content.decode()

    response = client.post(reverse("accounts:login"), {"username": "alice", "password": PASSWORD})

    assert response.status_code == 302 and response.url == reverse("projects:list")
    assert client.get(reverse("projects:list")).status_code == 200


def test_it_returns_to_the_page_asked_for_after_signing_in(client, project):
    target = reverse("experiments:run_list", args=[project.slug])
    redirect = client.get(target)
    assert redirect.url == f"{reverse('accounts:login')}?next={target}"
    login_page = client.get(redirect.url).content.decode()
    assert f'name="next" value="{target}"' in login_page
    response = client.post(redirect.url, {"username": "bob", "password": PASSWORD, "next": target})
    assert response.url == target


def test_it_refuses_a_wrong_password(client, users):
    response = client.post(reverse("accounts:login"), {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert any("correct username and password" in error for error in page_errors(response.content))
    assert client.get(reverse("projects:list")).status_code == 302


def test_signing_out_takes_a_post(client_for):
    alice = client_for("alice")
    assert alice.get(reverse("accounts:logout")).status_code == 405
    response = alice.post(reverse("accounts:logout"))
    assert response.url == reverse("accounts:login")
    assert alice.get(reverse("projects:list")).status_code == 302


def test_a_new_token_is_shown_once_and_stored_only_as_a_hash(client_for, users):
    alice = client_for("alice")
    response = alice.post(reverse("accounts:tokens"), {"name": "laptop script"}, follow=True)

    html = response.content.decode()
    raw = html.split('<pre id="new-token-value">')[1].split("</pre>")[0]
    token = ApiToken.objects.get(user=users["alice"])
    assert raw.startswith("rsu_") and token.token_hash == hash_token(raw) and raw[:10] == token.prefix
    assert "shown only this once" in html

    again = alice.get(reverse("accounts:tokens")).content.decode()
    assert raw not in again
    assert f"<code>{token.prefix}…</code>" in again and "laptop script" in again and "never" in again


def test_a_token_needs_a_name(client_for):
    response = client_for("alice").post(reverse("accounts:tokens"), {"name": ""})
    assert field_errors(response.content, "name") == ["Give the token a name, e.g. 'laptop script'."]
    assert ApiToken.objects.count() == 0


def test_a_revoked_token_stops_working(client_for, users, rf):
    from rest_framework.exceptions import AuthenticationFailed

    from webapp.accounts.authentication import ApiTokenAuthentication
    from webapp.accounts.services import api_token_create

    token, raw = api_token_create(user=users["alice"], name="ci")
    request = rf.get("/api/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert ApiTokenAuthentication().authenticate(request)[0] == users["alice"]

    response = client_for("alice").post(reverse("accounts:token_revoke", args=[token.pk]), follow=True)

    html = response.content.decode()
    assert "Token revoked" in html and "revoked " in html
    with pytest.raises(AuthenticationFailed):
        ApiTokenAuthentication().authenticate(request)


def test_nobody_revokes_someone_elses_token(client_for, users):
    from webapp.accounts.services import api_token_create

    bobs, _raw = api_token_create(user=users["bob"], name="bob's")
    response = client_for("alice").post(reverse("accounts:token_revoke", args=[bobs.pk]), follow=True)
    bobs.refresh_from_db()
    assert bobs.revoked_at is None
    assert "No such active token." in response.content.decode()
    assert "bob&#x27;s" not in response.content.decode()  # and alice's list does not show it
