"""The one place that decides who may see and do what.

Every view, API endpoint and websocket consumer resolves what it touches through these helpers, one per
object (`access_run`, `access_queue`, …), so there is one place to get each right:
- an outsider (not a member, or anonymous) gets NotFound — we do not reveal that a project exists;
- a member whose role lacks the capability gets Forbidden.

Each object helper takes either the user (the object's project is found from the object, as the API's
`/runs/<id>/` does) or a `ProjectAccess` already resolved from a page's `/p/<slug>/` (then the object must
belong to that project, and the role is not looked up twice).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404

from webapp.projects.models import CAPABILITY_ACTIONS, Capability, Membership, Project

M = TypeVar("M", bound=Model)


class NotFound(Http404):
    pass


class Forbidden(PermissionDenied):
    pass


@dataclass(frozen=True)
class ProjectAccess:
    project: Project
    membership: Membership

    @property
    def role(self) -> str:
        return self.membership.role

    def can(self, capability: Capability | str) -> bool:
        return self.membership.can(capability)

    def capabilities(self) -> dict[str, bool]:
        """{capability: allowed} for templates (`can.launch`) and API clients."""
        allowed = self.membership.capabilities()
        return {capability.value: capability in allowed for capability in Capability}


Who = Any  # a user, or a ProjectAccess resolved from the page's project


def _membership(user: Any, project: Project) -> Membership:
    if user is None or not user.is_authenticated:
        raise NotFound("No such project.")
    membership = Membership.objects.filter(project=project, user=user).first()
    if membership is None:
        raise NotFound("No such project.")
    return membership


def refusal(role: str, need: Capability | str, action: str | None = None) -> str:
    """The 403's words: the role and the action refused ("create a preference queue"), or what the missing
    capability covers when the caller names no action."""
    return f"Your role ({role}) may not {action or CAPABILITY_ACTIONS[Capability(need)]}."


def _require(access: ProjectAccess, need: Capability | str, action: str | None = None) -> None:
    if not access.can(need):
        raise Forbidden(refusal(access.role, need, action))


def can(user: Any, project: Project, capability: Capability | str) -> bool:
    """Whether `user` may do `capability` in `project` (False for outsiders), for services that decide
    between two behaviours rather than refuse."""
    try:
        return ProjectAccess(project, _membership(user, project)).can(capability)
    except NotFound:
        return False


WORKERS_ACTION = "see the workers page (every machine's CPU, memory, GPUs and queued runs)"


def may_see_workers(user: Any) -> bool:
    """The Workers page is for the people who decide where runs go: staff, and members who may launch in
    some project. An annotator or a viewer judges and reads runs; the machines' load and other teams'
    queue positions are none of their work, so the page and its link are not theirs."""
    if user is None or not user.is_authenticated:
        return False
    if user.is_staff:
        return True
    roles = Membership.objects.filter(user=user).values_list("role", flat=True)
    return any(Membership(role=role).can(Capability.LAUNCH) for role in roles)


def access_workers(user: Any) -> None:
    """Refuse the Workers page (Forbidden) to whoever may_see_workers says may not see it."""
    if not may_see_workers(user):
        roles = sorted(set(Membership.objects.filter(user=user).values_list("role", flat=True)))
        raise Forbidden(
            f"Your role ({', '.join(roles) or 'no project'}) may not {WORKERS_ACTION}: "
            "it is for the members who launch runs."
        )


def access_project(
    user: Any, slug: str, need: Capability | str = Capability.READ, *, action: str | None = None
) -> ProjectAccess:
    """The member's access to the project `slug`; `action` names what a refusal refuses ("create a
    preference queue")."""
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        raise NotFound("No such project.")
    access = ProjectAccess(project, _membership(user, project))
    _require(access, need, action)
    return access


def access_project_by_id(
    user: Any, project_id: int, need: Capability | str = Capability.READ
) -> ProjectAccess:
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        raise NotFound("No such project.")
    access = ProjectAccess(project, _membership(user, project))
    _require(access, need)
    return access


def _access(
    who: Who,
    queryset: QuerySet[M],
    project_path: str,
    need: Capability | str,
    noun: str,
    pk: Any,
    visible: Callable[[M, Membership], bool] | None = None,
    action: str | None = None,
) -> M:
    """The object `pk` of `queryset`, if `who` may do `need` in its project (and, with `visible`, may
    know that the object exists at all: an object a member may not see is NotFound, like an outsider's)."""
    if not isinstance(pk, int) and not (isinstance(pk, str) and pk.isdigit()):
        raise NotFound(f"No such {noun}.")
    if isinstance(who, ProjectAccess):
        access = who
        obj = queryset.filter(**{project_path: who.project}, pk=pk).first()
        if obj is None:
            raise NotFound(f"No such {noun}.")
    else:
        obj = queryset.filter(pk=pk).first()
        if obj is None:
            raise NotFound(f"No such {noun}.")
        project = obj
        for attr in project_path.split("__"):
            project = getattr(project, attr)
        access = ProjectAccess(project, _membership(who, project))
    _require(access, need, action)
    if visible is not None and not visible(obj, access.membership):
        raise NotFound(f"No such {noun}.")
    return obj


def _default(queryset: QuerySet[M] | None, model_path: str) -> QuerySet[M]:
    if queryset is not None:
        return queryset
    from django.apps import apps

    return apps.get_model(model_path).objects.all()


def access_run(
    who: Who, run_id: Any, need: Capability | str = Capability.READ, *, queryset: QuerySet | None = None
):
    return _access(
        who, _default(queryset, "experiments.Run").select_related("project"), "project", need, "run", run_id
    )


RUN_DELETE_ACTION = "delete a run someone else launched (the project's owner may)"


def may_delete_run(access: ProjectAccess, run: Any) -> bool:
    """Who may delete a run: the project's owner any of its runs, a member who may launch the runs they
    launched. The run page's button and the delete endpoints ask here."""
    return access.can(Capability.MANAGE) or (
        access.can(Capability.LAUNCH) and run.created_by_id == access.membership.user_id
    )


def access_run_to_delete(who: Who, run_id: Any, *, queryset: QuerySet | None = None):
    """The run `who` may delete (`may_delete_run`); NotFound for an outsider, Forbidden otherwise. The run
    page's button and `DELETE /api/runs/<id>/` both resolve the run here."""
    run = access_run(who, run_id, Capability.READ, queryset=queryset)
    access = (
        who if isinstance(who, ProjectAccess) else ProjectAccess(run.project, _membership(who, run.project))
    )
    if not may_delete_run(access, run):
        need = Capability.LAUNCH if not access.can(Capability.LAUNCH) else Capability.MANAGE
        raise Forbidden(
            refusal(access.role, need, RUN_DELETE_ACTION if need == Capability.MANAGE else "delete runs")
        )
    return run


def access_checkpoint(
    who: Who,
    checkpoint_id: Any,
    need: Capability | str = Capability.READ,
    *,
    queryset: QuerySet | None = None,
):
    queryset = _default(queryset, "experiments.Checkpoint").select_related("run__project")
    return _access(who, queryset, "run__project", need, "checkpoint", checkpoint_id)


def access_environment(
    who: Who,
    environment_id: Any,
    need: Capability | str = Capability.READ,
    *,
    queryset: QuerySet | None = None,
):
    queryset = _default(queryset, "experiments.Environment").select_related("project")
    return _access(who, queryset, "project", need, "environment", environment_id)


def access_rubric(
    who: Who, rubric_id: Any, need: Capability | str = Capability.READ, *, queryset: QuerySet | None = None
):
    return _access(
        who,
        _default(queryset, "experiments.Rubric").select_related("project"),
        "project",
        need,
        "rubric",
        rubric_id,
    )


def access_trajectory(
    who: Who,
    trajectory_id: Any,
    need: Capability | str = Capability.READ,
    *,
    queryset: QuerySet | None = None,
):
    # A deleted run's trajectories wait for the purge: not found from the moment it was deleted.
    queryset = _default(queryset, "rollouts.Trajectory").filter(run__deleting_at__isnull=True)
    return _access(
        who, queryset.select_related("run__project"), "run__project", need, "trajectory", trajectory_id
    )


def access_queue(
    who: Who,
    queue_id: Any,
    need: Capability | str = Capability.READ,
    *,
    queryset: QuerySet | None = None,
    action: str | None = None,
):
    queryset = _default(queryset, "review.PreferenceQueue").select_related("project")
    # Annotators do not learn that queues they are not assigned to exist.
    return _access(
        who,
        queryset,
        "project",
        need,
        "preference queue",
        queue_id,
        visible=lambda queue, membership: queue.visible_to(membership),
        action=action,
    )


def access_snapshot(
    who: Who, snapshot_id: Any, need: Capability | str = Capability.READ, *, queryset: QuerySet | None = None
):
    queryset = _default(queryset, "review.PreferenceSnapshot").select_related("project")
    return _access(who, queryset, "project", need, "preference snapshot", snapshot_id)


def access_comment(
    who: Who, comment_id: Any, need: Capability | str = Capability.READ, *, queryset: QuerySet | None = None
):
    queryset = _default(queryset, "review.Comment").select_related("project", "trajectory__run")
    return _access(who, queryset, "project", need, "comment", comment_id)


def access_tag(
    who: Who, tag_id: Any, need: Capability | str = Capability.READ, *, queryset: QuerySet | None = None
):
    return _access(
        who, _default(queryset, "review.Tag").select_related("project"), "project", need, "tag", tag_id
    )


def access_flag(
    who: Who, flag_id: Any, need: Capability | str = Capability.READ, *, queryset: QuerySet | None = None
):
    queryset = _default(queryset, "review.Flag").select_related("project", "trajectory__run")
    return _access(who, queryset, "project", need, "flag", flag_id)


def access_reward_model(
    who: Who,
    reward_model_id: Any,
    need: Capability | str = Capability.READ,
    *,
    queryset: QuerySet | None = None,
):
    queryset = _default(queryset, "rewards.RewardModel").select_related("project")
    return _access(who, queryset, "project", need, "reward model", reward_model_id)
