"""Encryption of values stored for later use and never shown again (project secrets).

Fernet (AES-128-CBC with HMAC-SHA256, from `cryptography`) under a key derived from `SECRETS_KEY` when
set, else from the server's `SECRET_KEY`: changing that key makes stored secrets unreadable (they must
then be entered again), which is why a deployment may pin `SECRETS_KEY` apart from `SECRET_KEY`.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class SecretUnreadable(ValueError):
    """A stored secret no longer decrypts (the key it was written with changed)."""


def _fernet() -> Fernet:
    root = getattr(settings, "SECRETS_KEY", "") or settings.SECRET_KEY
    key = hashlib.sha256(b"rollout-studio project secrets\0" + root.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def encrypt(value: str) -> str:
    return _fernet().encrypt(value.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise SecretUnreadable(
            "this secret was stored under another server key (SECRETS_KEY / SECRET_KEY changed): enter it again"
        ) from exc
