"""Project list, project home and the members page. Writes go through webapp.projects.services."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.experiments import selectors as experiment_selectors
from webapp.experiments.models import Run
from webapp.experiments.services.deletion import DELETED_IN_BACKGROUND
from webapp.experiments.services.deletion import project_delete as project_deletion
from webapp.projects import selectors, services
from webapp.projects.access import Capability, ProjectAccess, access_project
from webapp.projects.forms import (
    InvitationForm,
    MemberAddForm,
    MemberRoleForm,
    ProjectForm,
    SecretForm,
    SignUpForm,
)
from webapp.projects.models import Role

# The link of an invitation just made waits in the session for the next view of the members page, which
# shows it once (as the API tokens page does): a reload does not make a second invitation.
NEW_INVITATION_SESSION_KEY = "new_invitation"


def project_context(access: ProjectAccess, **context: Any) -> dict[str, Any]:
    """What every project page's template needs: base.html reads `project` and `access`; `can.launch`
    (etc.) decides which buttons a member sees."""
    return {
        "project": access.project,
        "access": access,
        "can": access.capabilities(),
        "best_reward_meaning": Run.BEST_REWARD_MEANING,  # one definition, wherever a best reward is shown
        **context,
    }


def _show_errors(form, error: ValidationError) -> None:
    for field, field_messages in error.message_dict.items():
        form.add_error(field if field in form.fields else None, field_messages)


@login_required
@require_http_methods(["GET", "POST"])
def project_list(request: HttpRequest) -> HttpResponse:
    form = ProjectForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            project = services.project_create(owner=request.user, **form.cleaned_data)
        except ValidationError as error:
            _show_errors(form, error)
        else:
            messages.success(request, f"Project “{project.name}” created. You are its owner.")
            return redirect("projects:home", project.slug)
    projects = selectors.project_list_for_user(request.user)
    return render(request, "projects/project_list.html", {"projects": projects, "form": form})


@login_required
@require_GET
def project_home(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    project = access.project
    return render(
        request,
        "projects/project_home.html",
        project_context(
            access,
            counts=experiment_selectors.project_counts(project),
            recent_runs=experiment_selectors.recent_runs(project),
            best_per_environment=experiment_selectors.best_reward_per_environment(project),
        ),
    )


def _members_page(
    request: HttpRequest,
    access: ProjectAccess,
    add_form: MemberAddForm,
    invite_form: InvitationForm | None = None,
    status: int = 200,
):
    memberships = selectors.membership_list(access.project)
    rows = [(m, MemberRoleForm(initial={"role": m.role}, auto_id=f"id_member{m.pk}_%s")) for m in memberships]
    manage = access.can(Capability.MANAGE)
    new_invitation = request.session.pop(NEW_INVITATION_SESSION_KEY, None) if manage else None
    if new_invitation and new_invitation.get("project") != access.project.pk:
        new_invitation = None
    return render(
        request,
        "projects/members.html",
        project_context(
            access,
            rows=rows,
            add_form=add_form,
            roles=Role.choices,
            invite_form=invite_form or InvitationForm(auto_id="id_invite_%s"),
            invitations=selectors.invitation_list(access.project) if manage else [],
            new_invitation=new_invitation,
        ),
        status=status,
    )


@login_required
@require_http_methods(["GET", "POST"])
def members(request: HttpRequest, slug: str) -> HttpResponse:
    """Every member sees who is on the project (as GET /api/projects/<slug>/members/ shows them); owners
    add one by username (or change the role of an existing member) and change or remove roles."""
    access = access_project(
        request.user, slug, Capability.READ if request.method == "GET" else Capability.MANAGE
    )
    add_form = MemberAddForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and add_form.is_valid():
        try:
            membership = services.membership_set(
                project=access.project, by=request.user, **add_form.cleaned_data
            )
        except ValidationError as error:
            _show_errors(add_form, error)
        else:
            messages.success(
                request, f"{membership.user.username} is now {membership.get_role_display().lower()}."
            )
            return redirect("projects:members", slug)
    return _members_page(request, access, add_form)


@login_required
@require_POST
def project_delete(request: HttpRequest, slug: str) -> HttpResponse:
    """The owner deletes the project, after typing its name (members.html's last panel)."""
    access = access_project(request.user, slug, Capability.MANAGE, action="delete the project")
    if request.POST.get("confirm_name", "").strip() != access.project.name:
        messages.error(request, "Type the project's name exactly to delete it; nothing was deleted.")
        return redirect("projects:members", slug)
    try:
        project_deletion(project=access.project, user=request.user)
    except ValidationError as error:
        for message in error.messages:
            messages.error(request, message)
        return redirect("projects:members", slug)
    messages.success(request, f"Project “{access.project.name}”: {DELETED_IN_BACKGROUND}")
    return redirect("projects:list")


@login_required
@require_POST
def member_role(request: HttpRequest, slug: str, membership_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.MANAGE, action="change a member's role")
    membership = access.project.memberships.select_related("user").filter(pk=membership_id).first()
    form = MemberRoleForm(request.POST)
    if membership is None:
        messages.error(request, "No such member.")
    elif not form.is_valid():
        messages.error(request, "Choose one of the roles.")
    else:
        try:
            services.membership_set(
                project=access.project, username=membership.user.username, role=form.cleaned_data["role"]
            )
        except ValidationError as error:
            for message in error.messages:
                messages.error(request, message)
        else:
            messages.success(request, f"{membership.user.username} is now {form.cleaned_data['role']}.")
            if membership.pk == access.membership.pk and form.cleaned_data["role"] != Role.OWNER:
                return redirect("projects:home", slug)  # you gave up managing this project
    return redirect("projects:members", slug)


@login_required
@require_POST
def member_remove(request: HttpRequest, slug: str, membership_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.MANAGE, action="remove a member")
    try:
        services.membership_remove(project=access.project, membership_id=membership_id)
    except ValidationError as error:
        for message in error.messages:
            messages.error(request, message)
    else:
        if membership_id == access.membership.pk:
            messages.success(request, f"You left “{access.project.name}”.")
            return redirect("projects:list")
        messages.success(request, "Member removed.")
    return redirect("projects:members", slug)


@login_required
@require_POST
def invitation_create(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.MANAGE, action="invite a member")
    form = InvitationForm(request.POST, auto_id="id_invite_%s")
    if form.is_valid():
        try:
            invitation, raw = services.invitation_create(
                project=access.project, created_by=request.user, **form.cleaned_data
            )
        except ValidationError as error:
            _show_errors(form, error)
        else:
            request.session[NEW_INVITATION_SESSION_KEY] = {
                "project": access.project.pk,
                "id": invitation.pk,
                "role": invitation.get_role_display().lower(),
                "url": request.build_absolute_uri(reverse("projects:invitation", args=[raw])),
            }
            return redirect(reverse("projects:members", args=[slug]) + "#invitations")
    return _members_page(request, access, MemberAddForm(), invite_form=form, status=400)


@login_required
@require_POST
def invitation_revoke(request: HttpRequest, slug: str, invitation_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.MANAGE, action="revoke an invitation")
    try:
        services.invitation_revoke(project=access.project, invitation_id=invitation_id, by=request.user)
    except ValidationError as error:
        for message in error.messages:
            messages.error(request, message)
    else:
        messages.success(request, "Invitation revoked: its link no longer works.")
    return redirect(reverse("projects:members", args=[slug]) + "#invitations")


@never_cache
@require_http_methods(["GET", "POST"])
def invitation(request: HttpRequest, token: str) -> HttpResponse:
    """The invitation link. Someone without an account signs up here (the only way to sign up); someone
    signed in joins with one click. A link that is used, revoked, expired or unknown says so (410 / 404)."""
    invitation = services.invitation_by_token(token)
    if invitation is None:
        return render(request, "projects/invitation.html", {"state": "invalid"}, status=404)
    if not invitation.is_usable():
        return render(
            request,
            "projects/invitation.html",
            {"state": invitation.state().value, "invitation": invitation},
            status=410,
        )
    form = SignUpForm(
        request.POST if request.method == "POST" and not request.user.is_authenticated else None
    )
    if request.method == "POST":
        try:
            if request.user.is_authenticated:
                membership = services.invitation_accept(raw=token, user=request.user)
            elif form.is_valid():
                user, membership = services.invitation_sign_up(
                    raw=token, username=form.cleaned_data["username"], password=form.cleaned_data["password"]
                )
                login(request, user, backend="webapp.accounts.throttle.ThrottledModelBackend")
            else:
                membership = None
        except ValidationError as error:
            if "token" in error.message_dict:
                return render(
                    request,
                    "projects/invitation.html",
                    {"state": "gone", "errors": error.messages},
                    status=410,
                )
            _show_errors(form, error)
            membership = None
        if membership is not None:
            messages.success(
                request,
                f"Welcome to “{membership.project.name}”: you are {membership.get_role_display().lower()}.",
            )
            return redirect("projects:home", membership.project.slug)
    return render(
        request,
        "projects/invitation.html",
        {"state": "pending", "invitation": invitation, "form": form},
        status=400 if form.is_bound and form.errors else 200,
    )


# --- secrets ------------------------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def secrets(request: HttpRequest, slug: str) -> HttpResponse:
    """Researchers and owners store values the project's runs need and nobody reads back (an LLM judge
    endpoint's API key): names are listed, values never."""
    access = access_project(request.user, slug, Capability.LAUNCH, action="manage the project's secrets")
    form = SecretForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            secret = services.secret_set(project=access.project, user=request.user, **form.cleaned_data)
        except ValidationError as error:
            _show_errors(form, error)
        else:
            messages.success(request, f"Secret {secret.name} saved.")
            return redirect("projects:secrets", slug)
    return render(
        request,
        "projects/secrets.html",
        project_context(access, form=form, secrets=selectors.secret_list(access.project)),
        status=400 if form.errors else 200,
    )


@login_required
@require_POST
def secret_delete(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="delete a secret")
    try:
        services.secret_delete(project=access.project, name=name)
    except ValidationError as error:
        messages.error(request, " ".join(m for msgs in error.message_dict.values() for m in msgs))
    else:
        messages.success(request, f"Secret {name} deleted.")
    return redirect("projects:secrets", slug)
