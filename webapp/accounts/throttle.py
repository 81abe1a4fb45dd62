"""The sign-in throttle: after too many wrong passwords, further attempts are refused for a while, whether
they come through the sign-in page, the admin's or `POST /api/auth/token/`.

Two counts over the last `LOGIN_THROTTLE_WINDOW_S` seconds (15 minutes):
- wrong passwords for one username from one address: `LOGIN_FAILURES_PER_ADDRESS` (5) — a guesser at
  one machine;
- wrong passwords for one username from anywhere: `LOGIN_FAILURES_PER_USERNAME` (20) — guessing spread
  over many machines. (There is no per-address count across usernames: behind a proxy every user has the
  same address.)

Failures are rows (`LoginFailure`), so every web process sees the same counts. Django's
`user_login_failed` signal records them (`apps.py` connects it); a successful sign-in clears that
address's failures for the username. `ThrottledModelBackend` refuses a throttled attempt before the
password is checked.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.utils import timezone

from webapp.accounts.models import LoginFailure


def _settings() -> tuple[int, int, int]:
    return (
        getattr(settings, "LOGIN_THROTTLE_WINDOW_S", 900),
        getattr(settings, "LOGIN_FAILURES_PER_ADDRESS", 5),
        getattr(settings, "LOGIN_FAILURES_PER_USERNAME", 20),
    )


def _key(username: str | None) -> str:
    return (username or "").strip().lower()[:150]


def client_address(request: HttpRequest | None) -> str | None:
    """The peer's IP address (None when there is none, e.g. a unix socket)."""
    raw = request.META.get("REMOTE_ADDR") if request is not None else None
    try:
        return str(ipaddress.ip_address(raw)) if raw else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Throttled:
    retry_after_s: int

    @property
    def message(self) -> str:
        minutes = max(1, round(self.retry_after_s / 60))
        return (
            f"Too many wrong passwords for this account. Try again in {minutes} minute"
            f"{'s' if minutes != 1 else ''}."
        )


def throttled(request: HttpRequest | None, username: str | None) -> Throttled | None:
    """Whether a sign-in as `username` from this request's address is refused now, and for how long."""
    window_s, per_address, per_username = _settings()
    since = timezone.now() - timedelta(seconds=window_s)
    failures = LoginFailure.objects.filter(username=_key(username), at__gte=since)
    oldest_blocking = None
    address = client_address(request)
    from_here = (
        failures.filter(ip=address)
        .order_by("-at")
        .values_list("at", flat=True)[per_address - 1 : per_address]
    )
    if from_here:
        oldest_blocking = from_here[0]
    anywhere = failures.order_by("-at").values_list("at", flat=True)[per_username - 1 : per_username]
    if anywhere and (oldest_blocking is None or anywhere[0] > oldest_blocking):
        oldest_blocking = anywhere[0]
    if oldest_blocking is None:
        return None
    # Allowed again once the failure that completed the count leaves the window.
    remaining = (oldest_blocking + timedelta(seconds=window_s) - timezone.now()).total_seconds()
    return Throttled(retry_after_s=max(1, int(remaining) + 1))


def record_failure(request: HttpRequest | None, username: str | None) -> None:
    window_s, _, _ = _settings()
    LoginFailure.objects.filter(at__lt=timezone.now() - timedelta(seconds=window_s)).delete()
    LoginFailure.objects.create(username=_key(username), ip=client_address(request))


def clear_failures(request: HttpRequest | None, username: str | None) -> None:
    LoginFailure.objects.filter(username=_key(username), ip=client_address(request)).delete()


def on_login_failed(sender, credentials: dict, request: HttpRequest | None = None, **kwargs) -> None:
    if request is not None:  # a sign-in over HTTP (the test client's login() has no request)
        record_failure(request, credentials.get("username"))


def on_logged_in(sender, request: HttpRequest | None, user, **kwargs) -> None:
    if request is not None:
        clear_failures(request, user.get_username())


class ThrottledModelBackend(ModelBackend):
    """Django's username/password backend, refusing a throttled attempt before checking the password."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is not None and throttled(request, username or kwargs.get("username")) is not None:
            raise PermissionDenied("Too many wrong passwords.")
        return super().authenticate(request, username=username, password=password, **kwargs)
