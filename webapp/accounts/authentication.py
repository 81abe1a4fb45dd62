from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions

from webapp.accounts.models import ApiToken, hash_token

USER_TOKEN_PREFIX = "rsu_"
RUN_TOKEN_PREFIX = "rsr_"


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer rsu_…` — a per-user token for scripts. Run tokens (rsr_…) are only for
    the ingestion endpoint and are checked there: here they, like any other bearer value, are refused
    (`authentication_failed`), not mistaken for no credentials at all."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace")
        if not header.startswith(f"{self.keyword} "):
            return None
        raw = header[len(self.keyword) + 1 :].strip()
        if raw.startswith(RUN_TOKEN_PREFIX):
            raise exceptions.AuthenticationFailed(
                "A run token (rsr_…) is accepted only by POST /api/runs/<id>/events; "
                "use a personal token (rsu_…) here."
            )
        if not raw.startswith(USER_TOKEN_PREFIX):
            raise exceptions.AuthenticationFailed("Not an API token: personal tokens start with rsu_.")
        token = (
            ApiToken.objects.select_related("user")
            .filter(token_hash=hash_token(raw), revoked_at=None)
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        now = timezone.now()
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword
