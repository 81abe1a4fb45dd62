from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.text import slugify

from webapp.core.limits import DESCRIPTION_MAX_CHARS
from webapp.projects.models import Membership, Project, Role


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
def membership_set(*, project: Project, username: str, role: str) -> Membership:
    """Add a user to the project or change their role. The last owner cannot be demoted."""
    if role not in Role.values:
        raise ValidationError({"role": [f"Unknown role {role!r}; choose one of {', '.join(Role.values)}."]})
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise ValidationError({"username": [f"No user named {username!r}."]})
    membership = Membership.objects.select_for_update().filter(project=project, user=user).first()
    if membership and membership.role == Role.OWNER and role != Role.OWNER:
        _ensure_another_owner(project, membership)
    if membership is None:
        return Membership.objects.create(project=project, user=user, role=role)
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
