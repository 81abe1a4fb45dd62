"""`manage.py bootstrap --username alice --project "Agents"`: the first account of a fresh deployment and
its first project (the account owns it), from the command line. No default password exists: one is drawn
at random and printed once, or read from stdin with `--password-stdin`. The account is a superuser (the
team admin); everyone else joins through the project's invitations."""

from __future__ import annotations

import secrets
import sys

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from webapp.accounts.services import user_create
from webapp.projects.services import project_create


class Command(BaseCommand):
    help = "Create the first user (a superuser) and a project they own; prints a random password once."

    def add_arguments(self, parser):
        parser.add_argument("--username", required=True)
        parser.add_argument("--project", required=True, help="the first project's name")
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--password-stdin",
            action="store_true",
            help="read the password from stdin instead of drawing one",
        )

    def handle(self, *args, username: str, project: str, email: str, password_stdin: bool, **options):
        if get_user_model().objects.exists():
            raise CommandError("This deployment already has users: invite people from a project instead.")
        password = sys.stdin.readline().rstrip("\n") if password_stdin else secrets.token_urlsafe(18)
        try:
            with transaction.atomic():
                user = user_create(username=username, password=password)
                user.email = email
                user.is_staff = user.is_superuser = True
                user.save(update_fields=["email", "is_staff", "is_superuser"])
                made = project_create(name=project, owner=user)
        except ValidationError as error:
            raise CommandError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in error.message_dict.items())
            ) from None
        self.stdout.write(f"user {user.username} owns project /p/{made.slug}/")
        if not password_stdin:
            self.stdout.write(f"password (shown once): {password}")
