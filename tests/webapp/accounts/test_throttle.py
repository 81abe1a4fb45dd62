"""Signing in is throttled: after LOGIN_FAILURES_PER_ADDRESS wrong passwords for one username from one
address the page answers 429 and says why, even to the right password, until the window moves on; spread
over many addresses, LOGIN_FAILURES_PER_USERNAME does the same. The admin's sign-in goes through the same
backend."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from tests.conftest import PASSWORD
from webapp.accounts.models import LoginFailure


def sign_in(password: str, username: str = "bob", address: str = "203.0.113.7", client: Client | None = None):
    client = client or Client(REMOTE_ADDR=address)
    return client.post("/accounts/login/", {"username": username, "password": password})


def test_twenty_wrong_passwords_are_not_all_answered_200(users):
    statuses = [sign_in("guess").status_code for _ in range(20)]
    assert statuses[:5] == [200] * 5
    assert set(statuses[5:]) == {429}
    assert LoginFailure.objects.count() == 5  # refused attempts are not even checked


def test_a_throttled_sign_in_says_why_and_refuses_the_right_password(users, settings):
    settings.LOGIN_FAILURES_PER_ADDRESS = 2
    sign_in("guess"), sign_in("guess")
    client = Client(REMOTE_ADDR="203.0.113.7")
    response = sign_in(PASSWORD, client=client)
    assert response.status_code == 429 and int(response["Retry-After"]) > 0
    assert "Too many wrong passwords" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_throttle_ends_when_the_window_moves_on(users, settings):
    settings.LOGIN_FAILURES_PER_ADDRESS = 2
    sign_in("guess"), sign_in("guess")
    LoginFailure.objects.update(at=timezone.now() - timedelta(seconds=settings.LOGIN_THROTTLE_WINDOW_S + 1))
    assert sign_in(PASSWORD).status_code == 302


def test_another_address_is_not_locked_out_by_one_guesser(users, settings):
    settings.LOGIN_FAILURES_PER_ADDRESS = 2
    sign_in("guess"), sign_in("guess")
    assert sign_in(PASSWORD, address="198.51.100.1").status_code == 302


def test_guesses_spread_over_addresses_lock_the_username(users, settings):
    settings.LOGIN_FAILURES_PER_USERNAME = 4
    for n in range(4):
        sign_in("guess", address=f"198.51.100.{n}")
    assert sign_in(PASSWORD, address="192.0.2.99").status_code == 429
    assert sign_in(PASSWORD, username="carol", address="192.0.2.99").status_code == 302


def test_the_admin_sign_in_is_throttled_by_the_same_backend(users, settings):
    settings.LOGIN_FAILURES_PER_ADDRESS = 2
    users["bob"].is_staff = True
    users["bob"].save()
    sign_in("guess"), sign_in("guess")
    client = Client(REMOTE_ADDR="203.0.113.7")
    response = client.post("/admin/login/", {"username": "bob", "password": PASSWORD})
    assert response.status_code == 200 and "_auth_user_id" not in client.session
