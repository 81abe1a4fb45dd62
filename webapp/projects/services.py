from __future__ import annotations

import re
import secrets
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from webapp.accounts.models import hash_token
from webapp.accounts.services import user_create
from webapp.core.crypto import decrypt, encrypt
from webapp.core.limits import DESCRIPTION_MAX_CHARS
from webapp.projects import signals
from webapp.projects.models import (
    INVITATION_DAYS,
    Invitation,
    Membership,
    Project,
    ProjectSecret,
    Role,
    UntrustedJudge,
)

INVITATION_TOKEN_PREFIX = "rsi_"
INVITATION_MAX_DAYS = 30


@transaction.atomic
def project_create(*, name: str, owner, description: str = "", slug: str = "") -> Project:
    name = name.strip()
    if not name:
        raise ValidationError({"name": ["A project needs a name."]})
    longest = Project._meta.get_field("name").max_length or 0
    if len(name) > longest:
        raise ValidationError({"name": [f"At most {longest} characters."]})
    if len(description) > DESCRIPTION_MAX_CHARS:
        raise ValidationError({"description": [f"At most {DESCRIPTION_MAX_CHARS} characters."]})
    base = slugify(slug or name)[:70] or "project"
    candidate, n = base, 1
    while Project.objects.filter(slug=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    project = Project.objects.create(name=name, slug=candidate, description=description, created_by=owner)
    Membership.objects.create(project=project, user=owner, role=Role.OWNER)
    return project


@transaction.atomic
def membership_set(*, project: Project, username: str, role: str, by=None) -> Membership:
    """Add a user to the project (`by` whom, for the activity log) or change their role. The last owner
    cannot be demoted."""
    if role not in Role.values:
        raise ValidationError({"role": [f"Unknown role {role!r}; choose one of {', '.join(Role.values)}."]})
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise ValidationError({"username": [f"No user named {username!r}."]})
    membership = Membership.objects.select_for_update().filter(project=project, user=user).first()
    if membership and membership.role == Role.OWNER and role != Role.OWNER:
        _ensure_another_owner(project, membership)
    if membership is None:
        membership = Membership.objects.create(project=project, user=user, role=role)
        signals.member_joined.send(sender=Membership, membership=membership, added_by=by, invitation=None)
        return membership
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def membership_remove(*, project: Project, membership_id: int) -> None:
    membership = Membership.objects.select_for_update().filter(project=project, pk=membership_id).first()
    if membership is None:
        raise ValidationError({"membership": ["No such member."]})
    if membership.role == Role.OWNER:
        _ensure_another_owner(project, membership)
    membership.delete()


def _ensure_another_owner(project: Project, membership: Membership) -> None:
    others = Membership.objects.filter(project=project, role=Role.OWNER).exclude(pk=membership.pk)
    if not others.exists():
        raise ValidationError({"role": ["A project keeps at least one owner."]})


# --- invitations --------------------------------------------------------------------------------------


def invitation_create(
    *, project: Project, created_by, role: str, note: str = "", days: int = INVITATION_DAYS
) -> tuple[Invitation, str]:
    """A one-time link for `role`; the raw token is returned once and never stored."""
    errors: dict[str, list[str]] = {}
    if role not in Role.values:
        errors["role"] = [f"Unknown role {role!r}; choose one of {', '.join(Role.values)}."]
    note = (note or "").strip()
    longest = Invitation._meta.get_field("note").max_length or 120
    if len(note) > longest:
        errors["note"] = [f"At most {longest} characters (this one has {len(note)})."]
    if not isinstance(days, int) or not 1 <= days <= INVITATION_MAX_DAYS:
        errors["days"] = [f"Between 1 and {INVITATION_MAX_DAYS} days."]
    if errors:
        raise ValidationError(errors)
    raw = INVITATION_TOKEN_PREFIX + secrets.token_urlsafe(24)
    invitation = Invitation.objects.create(
        project=project,
        role=role,
        note=note,
        token_hash=hash_token(raw),
        created_by=created_by,
        expires_at=timezone.now() + timedelta(days=days),
    )
    signals.invitation_created.send(sender=Invitation, invitation=invitation, user=created_by)
    return invitation, raw


@transaction.atomic
def invitation_revoke(*, project: Project, invitation_id: int, by=None) -> None:
    """Claimed atomically: a link being used at this moment is either used or revoked, never both."""
    revoked = Invitation.objects.filter(
        project=project, pk=invitation_id, used_at=None, revoked_at=None, expires_at__gt=timezone.now()
    ).update(revoked_at=timezone.now())
    if not revoked:
        raise ValidationError({"invitation": ["No such pending invitation (used, revoked or expired)."]})
    invitation = Invitation.objects.get(pk=invitation_id)
    signals.invitation_revoked.send(sender=Invitation, invitation=invitation, user=by)


def invitation_by_token(raw: str) -> Invitation | None:
    """The invitation a link names, whatever its state (None for a token that was never issued)."""
    if not raw or not raw.startswith(INVITATION_TOKEN_PREFIX):
        return None
    return Invitation.objects.select_related("project").filter(token_hash=hash_token(raw)).first()


def _unusable(invitation: Invitation | None) -> ValidationError:
    if invitation is None:
        return ValidationError({"token": ["This invitation link is not valid."]})
    state = invitation.state()
    return ValidationError(
        {"token": [f"This invitation link was {state.label.lower()}; ask the project's owner for a new one."]}
    )


@transaction.atomic
def invitation_accept(*, raw: str, user) -> Membership:
    """Use the link once: `user` joins the project with the invitation's role (a member already there keeps
    a higher role; the owner's choice of role wins over a lower one)."""
    invitation = invitation_by_token(raw)
    now = timezone.now()
    claimed = (
        invitation is not None
        and Invitation.objects.filter(
            pk=invitation.pk, used_at=None, revoked_at=None, expires_at__gt=now
        ).update(used_at=now, used_by=user)
        == 1
    )
    if not claimed:
        raise _unusable(invitation)
    assert invitation is not None
    membership = Membership.objects.select_for_update().filter(project=invitation.project, user=user).first()
    if membership is None:
        membership = Membership.objects.create(project=invitation.project, user=user, role=invitation.role)
        signals.member_joined.send(
            sender=Membership, membership=membership, added_by=None, invitation=invitation
        )
        return membership
    ranks = list(Role.values)  # owner, researcher, annotator, viewer: most capable first
    if ranks.index(invitation.role) < ranks.index(membership.role):
        membership.role = invitation.role
        membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def invitation_sign_up(*, raw: str, username: str, password: str):
    """Create an account through an invitation and join its project; nothing is created when the link is
    not usable. Returns (user, membership)."""
    invitation = invitation_by_token(raw)
    if invitation is None or not invitation.is_usable():
        raise _unusable(invitation)
    user = user_create(username=username, password=password)
    return user, invitation_accept(raw=raw, user=user)


# --- secrets ------------------------------------------------------------------------------------------

SECRET_VALUE_MAX_CHARS = 10_000


@transaction.atomic
def secret_set(*, project: Project, name: str, value: str, user) -> ProjectSecret:
    """Store (or replace) a project secret, encrypted. The value is never returned by any page or API."""
    from trainers.rubrics.kinds import SECRET_NAME_PATTERN

    name = (name or "").strip()
    errors: dict[str, list[str]] = {}
    if not re.match(SECRET_NAME_PATTERN, name):
        errors["name"] = [
            "A secret's name is letters, digits and _ (not starting with a digit), at most 64 characters, "
            "e.g. JUDGE_API_KEY."
        ]
    if not isinstance(value, str) or not value.strip():
        errors["value"] = ["Enter the secret's value."]
    elif len(value) > SECRET_VALUE_MAX_CHARS:
        errors["value"] = [f"At most {SECRET_VALUE_MAX_CHARS} characters."]
    if errors:
        raise ValidationError(errors)
    secret = ProjectSecret.objects.select_for_update().filter(project=project, name=name).first()
    if secret is None:
        secret = ProjectSecret(project=project, name=name, created_by=user)
    secret.ciphertext = encrypt(value.strip())
    secret.save()
    return secret


@transaction.atomic
def secret_delete(*, project: Project, name: str) -> None:
    deleted, _ = ProjectSecret.objects.filter(project=project, name=name).delete()
    if not deleted:
        raise ValidationError({"name": [f"This project has no secret named {name!r}."]})


def secret_values(*, project: Project, names: list[str]) -> dict[str, str]:
    """The decrypted values of `names` (those the project has): for the worker that runs a judge, only."""
    return {
        secret.name: decrypt(secret.ciphertext)
        for secret in ProjectSecret.objects.filter(project=project, name__in=names)
    }


def project_set_untrusted_judge(*, project: Project, value: str) -> None:
    """Whether the run form warns about or refuses a judge that failed its check (`UntrustedJudge`)."""
    if value not in UntrustedJudge.values:
        raise ValidationError({"untrusted_judge": [f"Choose one of: {', '.join(UntrustedJudge.values)}."]})
    Project.objects.filter(pk=project.pk).update(untrusted_judge=value)
    project.untrusted_judge = value
