"""`manage.py api_token USERNAME [--name NAME]`: create a personal API token on the server and print it
(for an operator bootstrapping a script or a CI job without a browser; a user with a password can also
use POST /api/auth/token/)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from webapp.accounts.services import api_token_create


class Command(BaseCommand):
    help = "Create a personal API token (rsu_…) for a user and print it; it is shown only this once."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--name", default="created with manage.py api_token", help="what the token is for"
        )

    def handle(self, *args, username: str, name: str, **options) -> None:
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"No active user named {username!r}.")
        try:
            _token, raw = api_token_create(user=user, name=name)
        except ValidationError as error:
            raise CommandError("; ".join(error.messages)) from None
        self.stdout.write(raw)
