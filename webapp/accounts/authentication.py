from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions

from webapp.accounts.models import ApiToken, hash_token

USER_TOKEN_PREFIX = "rsu_"


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer rsu_…` — a per-user token for scripts. Run tokens (rsr_…) are only for
    the ingestion endpoint and are checked there."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace")
        if not header.startswith(f"{self.keyword} {USER_TOKEN_PREFIX}"):
            return None
        raw = header[len(self.keyword) + 1 :].strip()
        token = ApiToken.objects.select_related("user").filter(token_hash=hash_token(raw), revoked_at=None).first()
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        now = timezone.now()
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword
