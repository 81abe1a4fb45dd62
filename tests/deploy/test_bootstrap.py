"""`manage.py bootstrap`: the first account (a superuser, with a random password printed once) and its
project; a second call refuses; a weak password from stdin is refused in plain words."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from webapp.projects.models import Membership


def test_it_creates_the_first_owner_and_project_with_a_random_password(db):
    out = StringIO()
    call_command("bootstrap", username="alice", project="Agents", stdout=out)
    password = out.getvalue().split("password (shown once): ")[1].strip()
    alice = get_user_model().objects.get(username="alice")
    assert alice.is_superuser and alice.check_password(password) and len(password) >= 20
    assert Membership.objects.get(user=alice).project.slug == "agents"
    with pytest.raises(CommandError, match="already has users"):
        call_command("bootstrap", username="bob", project="Other", stdout=StringIO())


def test_a_weak_password_from_stdin_is_refused(db, monkeypatch):
    monkeypatch.setattr("sys.stdin", StringIO("123\n"))
    with pytest.raises(CommandError, match="password"):
        call_command("bootstrap", username="alice", project="Agents", password_stdin=True, stdout=StringIO())
    assert not get_user_model().objects.exists()
