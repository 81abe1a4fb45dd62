"""Project list, project home and the members page. Writes go through webapp.projects.services."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.experiments import selectors as experiment_selectors
from webapp.projects import selectors, services
from webapp.projects.access import Capability, ProjectAccess, access_project
from webapp.projects.forms import MemberAddForm, MemberRoleForm, ProjectForm
from webapp.projects.models import Role


def project_context(access: ProjectAccess, **context: Any) -> dict[str, Any]:
    """What every project page's template needs: base.html reads `project` and `access`; `can.launch`
    (etc.) decides which buttons a member sees."""
    return {"project": access.project, "access": access, "can": access.capabilities(), **context}


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


def _members_page(request: HttpRequest, access: ProjectAccess, add_form: MemberAddForm, status: int = 200):
    memberships = selectors.membership_list(access.project)
    rows = [(m, MemberRoleForm(initial={"role": m.role}, auto_id=f"id_member{m.pk}_%s")) for m in memberships]
    return render(
        request,
        "projects/members.html",
        project_context(access, rows=rows, add_form=add_form, roles=Role.choices),
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
            membership = services.membership_set(project=access.project, **add_form.cleaned_data)
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
def member_role(request: HttpRequest, slug: str, membership_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.MANAGE)
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
    access = access_project(request.user, slug, Capability.MANAGE)
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
