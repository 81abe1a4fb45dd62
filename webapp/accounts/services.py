from __future__ import annotations

import secrets

from django.core.exceptions import ValidationError
from django.utils import timezone

from webapp.accounts.authentication import USER_TOKEN_PREFIX
from webapp.accounts.models import ApiToken, hash_token


def api_token_create(*, user, name: str) -> tuple[ApiToken, str]:
    """Create a token; the raw value is returned once and never stored."""
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": ["Give the token a name, e.g. 'laptop script'."]})
    longest = ApiToken._meta.get_field("name").max_length or 0
    if len(name) > longest:
        raise ValidationError({"name": [f"At most {longest} characters (this one has {len(name)})."]})
    raw = USER_TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=raw[:10], token_hash=hash_token(raw))
    return token, raw


def api_token_revoke(*, user, token_id: int) -> None:
    updated = ApiToken.objects.filter(pk=token_id, user=user, revoked_at=None).update(
        revoked_at=timezone.now()
    )
    if not updated:
        raise ValidationError({"token": ["No such active token."]})
