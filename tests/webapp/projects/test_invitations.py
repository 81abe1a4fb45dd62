"""Teammates join through one-time invitation links: alice (owner) invites, a newcomer signs up through
the link (the only way to sign up), an existing user joins with it; links expire, work once and can be
revoked."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from webapp.projects import services
from webapp.projects.models import Invitation, InvitationState, Membership

NEW_PASSWORD = "a-long-unusual-passphrase-42"


def token_of(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


@pytest.fixture
def invite(project, users):
    def make(role="annotator", **kwargs):
        invitation, raw = services.invitation_create(
            project=project, created_by=users["alice"], role=role, **kwargs
        )
        return invitation, raw

    return make


def test_it_shows_a_newcomer_the_sign_up_form_and_makes_them_a_member(client, invite, project):
    invitation, raw = invite("annotator", note="Frank")
    url = reverse("projects:invitation", args=[raw])

    page = client.get(url)
    assert page.status_code == 200
    assert b"Create account and join" in page.content and b"annotator" in page.content

    response = client.post(
        url, {"username": "frank", "password": NEW_PASSWORD, "password_again": NEW_PASSWORD}
    )

    assert response.status_code == 302 and response.url == reverse("projects:home", args=[project.slug])
    frank = get_user_model().objects.get(username="frank")
    assert Membership.objects.get(project=project, user=frank).role == "annotator"
    invitation.refresh_from_db()
    assert invitation.state() == InvitationState.USED and invitation.used_by == frank
    assert client.get(reverse("projects:home", args=[project.slug])).status_code == 200  # signed in


def test_a_link_works_once(client, invite):
    _invitation, raw = invite()
    url = reverse("projects:invitation", args=[raw])
    client.post(url, {"username": "frank", "password": NEW_PASSWORD, "password_again": NEW_PASSWORD})
    client.logout()

    again = client.post(url, {"username": "grace", "password": NEW_PASSWORD, "password_again": NEW_PASSWORD})

    assert again.status_code == 410 and b"used already" in again.content
    assert not get_user_model().objects.filter(username="grace").exists()


def test_an_expired_or_revoked_link_creates_nobody(client, invite, project):
    expired, expired_raw = invite()
    Invitation.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    revoked, revoked_raw = invite()
    services.invitation_revoke(project=project, invitation_id=revoked.pk)

    for raw, words in ((expired_raw, b"expired"), (revoked_raw, b"revoked")):
        url = reverse("projects:invitation", args=[raw])
        assert client.get(url).status_code == 410
        response = client.post(
            url, {"username": "mallory", "password": NEW_PASSWORD, "password_again": NEW_PASSWORD}
        )
        assert response.status_code == 410 and words in response.content
    assert not get_user_model().objects.filter(username="mallory").exists()


def test_sign_up_is_closed_without_an_invitation(client, db):
    made_up = reverse("projects:invitation", args=["rsi_not-a-real-token"])

    assert client.get(made_up).status_code == 404
    response = client.post(
        made_up, {"username": "x", "password": NEW_PASSWORD, "password_again": NEW_PASSWORD}
    )

    assert response.status_code == 404
    assert not get_user_model().objects.filter(username="x").exists()
    assert client.get("/accounts/signup/").status_code == 404


def test_sign_up_errors_are_shown_in_plain_words_and_the_link_stays_usable(client, invite):
    invitation, raw = invite()
    url = reverse("projects:invitation", args=[raw])

    taken = client.post(url, {"username": "bob", "password": "short", "password_again": "other"})

    assert taken.status_code == 400
    assert b"The two passwords differ." in taken.content
    taken = client.post(url, {"username": "bob", "password": NEW_PASSWORD, "password_again": NEW_PASSWORD})
    assert taken.status_code == 400 and b"is taken" in taken.content
    invitation.refresh_from_db()
    assert invitation.is_usable()


def test_a_signed_in_user_joins_with_one_click_and_keeps_a_higher_role(client, invite, users, project):
    _inv, raw = invite("viewer")
    client.force_login(users["eve"])

    response = client.post(reverse("projects:invitation", args=[raw]))

    assert response.status_code == 302
    assert Membership.objects.get(project=project, user=users["eve"]).role == "viewer"
    _inv, raw = invite("viewer")
    client.force_login(users["bob"])  # a researcher already
    client.post(reverse("projects:invitation", args=[raw]))
    assert Membership.objects.get(project=project, user=users["bob"]).role == "researcher"


def test_the_owner_makes_and_revokes_links_on_the_members_page(client, users, project):
    client.force_login(users["alice"])
    members = reverse("projects:members", args=[project.slug])

    response = client.post(
        reverse("projects:invitation_create", args=[project.slug]),
        {"role": "annotator", "note": "Frank", "days": "3"},
    )

    assert response.status_code == 302
    page = client.get(members).content.decode()
    assert "data-new-invitation" in page and "/invite/rsi_" in page
    assert "data-new-invitation" not in client.get(members).content.decode()  # shown once
    invitation = Invitation.objects.get()
    assert invitation.note == "Frank" and invitation.role == "annotator"
    assert timedelta(days=2, hours=23) < invitation.expires_at - timezone.now() <= timedelta(days=3)
    assert 'data-confirm="Revoke this invitation?' in page

    client.post(reverse("projects:invitation_revoke", args=[project.slug, invitation.pk]))

    invitation.refresh_from_db()
    assert invitation.state() == InvitationState.REVOKED
    bad = client.post(
        reverse("projects:invitation_create", args=[project.slug]), {"role": "annotator", "days": "90"}
    )
    assert bad.status_code == 400 and Invitation.objects.count() == 1


def test_only_owners_see_invitations(client, users, project, invite):
    invite(note="secret note")
    client.force_login(users["bob"])

    page = client.get(reverse("projects:members", args=[project.slug])).content.decode()

    assert "secret note" not in page and "invite-form" not in page


def test_the_api_creates_lists_and_revokes_invitations(users, project):
    api = APIClient()
    api.force_login(users["alice"])
    base = f"/api/projects/{project.slug}/invitations/"

    created = api.post(base, {"role": "researcher", "note": "Heidi", "days": 2}, format="json")

    assert created.status_code == 201, created.content
    body = created.json()
    assert body["state"] == "pending" and body["role"] == "researcher" and "/invite/rsi_" in body["url"]
    assert "no-cache" in created["Cache-Control"] or "no-store" in created["Cache-Control"]
    listed = api.get(base).json()["results"]
    assert [row["note"] for row in listed] == ["Heidi"] and "url" not in listed[0]
    assert api.delete(f"{base}{body['id']}/").status_code == 204
    again = api.delete(f"{base}{body['id']}/")
    assert again.status_code == 400 and again.json()["error"] == "validation_failed"
    assert api.post(base, {"role": "king"}, format="json").status_code == 400
    assert api.get(f"/invite/{token_of(body['url'])}/").status_code == 410


def test_two_people_racing_for_one_link_make_one_member(invite, users, project):
    _inv, raw = invite()
    services.invitation_accept(raw=raw, user=users["eve"])

    with pytest.raises(ValidationError):
        services.invitation_accept(raw=raw, user=users["dave"])
    assert Membership.objects.get(project=project, user=users["dave"]).role == "viewer"
