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


def user_create(*, username: str, password: str):
    """A new account, with Django's username rules and the password validators of the settings. Sign-up
    is open only through an invitation (`webapp.projects.services.invitation_sign_up`)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.password_validation import validate_password

    User = get_user_model()
    username = (username or "").strip()
    errors: dict[str, list[str]] = {}
    field = User._meta.get_field("username")
    longest = field.max_length or 150
    if not username:
        errors["username"] = ["Choose a username."]
    else:
        try:
            field.run_validators(username)
        except ValidationError as error:
            errors["username"] = list(error.messages)
        if len(username) > longest:
            errors["username"] = [f"At most {longest} characters."]
        elif User.objects.filter(username__iexact=username).exists():
            errors["username"] = [f"The username {username!r} is taken; choose another."]
    try:
        validate_password(password or "", User(username=username))
    except ValidationError as error:
        errors["password"] = list(error.messages)
    if errors:
        raise ValidationError(errors)
    return User.objects.create_user(username=username, password=password)
