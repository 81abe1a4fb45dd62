from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models


def hash_token(raw: str) -> str:
    """Tokens are stored as SHA-256 digests: a leaked database does not leak usable tokens."""
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A per-user token for scripts; the raw value is shown once at creation."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=80)
    prefix = models.CharField(max_length=12, help_text="first characters, to recognise a token in lists")
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class LoginFailure(models.Model):
    """One wrong password, kept for the sign-in throttle (`webapp.accounts.throttle`). Rows older than the
    throttle's window are deleted as new ones arrive."""

    username = models.CharField(max_length=150, help_text="as typed, lower-cased")
    ip = models.GenericIPAddressField(null=True, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["username", "at"])]

    def __str__(self) -> str:
        return f"{self.username} from {self.ip} at {self.at:%Y-%m-%d %H:%M:%S}"
