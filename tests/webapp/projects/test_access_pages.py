"""Who may open which page and post which action, for every page of the dashboard's forms.

alice owns the project, bob researches, carol annotates, dave views, eve is an outsider, and
`None` is someone who has not signed in. The table says which capability each page needs; the test
checks every person against every row: anonymous → sign-in redirect, outsider → 404, a member whose
role lacks the capability → 403 (and nothing written), everyone else → the page or the action.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.urls import reverse

from webapp.accounts.models import ApiToken
from webapp.experiments.models import Environment, EnvironmentVersion, Rubric, RubricVersion, Run
from webapp.projects.models import ROLE_CAPABILITIES, Invitation, Membership, Project, ProjectSecret

PEOPLE = [None, "alice", "bob", "carol", "dave", "eve"]
ROLE_OF = {"alice": "owner", "bob": "researcher", "carol": "annotator", "dave": "viewer"}


@dataclass(frozen=True)
class Page:
    label: str
    method: str
    needs: str  # "public" | "anyone" | "signed_in" | a project capability (read / annotate / launch / manage)
    route: str  # URL name; project pages take the project's slug, then the objects named in `args`
    args: tuple[str, ...] = ()
    query: str = ""
    data: Callable[[dict], dict] = lambda w: {}
    ok: int = 200  # what an allowed person gets

    def url(self, world: dict) -> str:
        args = [
            world[name] if name in ("invitation_token", "secret_name") else world[name].pk
            for name in self.args
        ]
        if self.route.startswith(("projects:", "experiments:")) and self.route not in (
            "projects:list",
            "projects:invitation",
        ):
            args.insert(0, world["project"].slug)
        return reverse(self.route, args=args) + self.query


def new_environment(w: dict) -> dict:
    return {"name": "new env", "kind": "countdown"}


def edited_environment(w: dict) -> dict:
    return {
        "name": "arith",
        "kind": "arithmetic_calculator",
        "config-operations": ["+", "-"],
        "config-max_turns": "6",
    }


def rubric_spec_fields(w: dict) -> dict:
    return {
        "aggregation": "weighted_sum",
        "criteria-0-name": "exact",
        "criteria-0-kind": "exact_match",
        "criteria-0-weight": "1",
    }


def new_rubric(w: dict) -> dict:
    return {"name": "new rubric", **rubric_spec_fields(w)}


def edited_rubric(w: dict) -> dict:
    return {"name": "correctness", **rubric_spec_fields(w)}


def preview(w: dict) -> dict:
    return {**rubric_spec_fields(w), "preview-transcript": "user: 2+2?\nassistant: 4", "preview-answer": "4"}


def new_run(w: dict) -> dict:
    return {
        "name": "run 2",
        "environment": w["environment"].pk,
        "rubric": w["rubric"].pk,
        "preset": "grpo",
        "queue": "cpu",
    }


PAGES = [
    Page("sign in", "get", "public", "accounts:login"),
    Page("sign out", "post", "signed_in", "accounts:logout", ok=302),
    Page("project list", "get", "signed_in", "projects:list"),
    Page("create project", "post", "signed_in", "projects:list", data=lambda w: {"name": "Mine"}, ok=302),
    Page("api tokens", "get", "signed_in", "accounts:tokens"),
    Page("create api token", "post", "signed_in", "accounts:tokens", data=lambda w: {"name": "ci"}, ok=302),
    Page("revoke api token", "post", "signed_in", "accounts:token_revoke", ("own_token",), ok=302),
    Page("project home", "get", "read", "projects:home"),
    Page(
        "members", "get", "read", "projects:members"
    ),  # as GET /api/projects/<slug>/members/; managing needs "manage"
    Page(
        "delete project",
        "post",
        "manage",
        "projects:delete",
        data=lambda w: {"confirm_name": w["project"].name},
        ok=302,
    ),  # refused while the world's run is queued: the owner is sent back with the reason
    Page(
        "add member",
        "post",
        "manage",
        "projects:members",
        data=lambda w: {"username": "eve", "role": "viewer"},
        ok=302,
    ),
    Page(
        "change role",
        "post",
        "manage",
        "projects:member_role",
        ("dave_membership",),
        data=lambda w: {"role": "annotator"},
        ok=302,
    ),
    Page("remove member", "post", "manage", "projects:member_remove", ("dave_membership",), ok=302),
    Page(
        "create invitation",
        "post",
        "manage",
        "projects:invitation_create",
        data=lambda w: {"role": "annotator", "days": "7"},
        ok=302,
    ),
    Page("revoke invitation", "post", "manage", "projects:invitation_revoke", ("invitation",), ok=302),
    # Secrets: names listed, values never shown back.
    Page("secrets", "get", "launch", "projects:secrets"),
    Page(
        "store secret",
        "post",
        "launch",
        "projects:secrets",
        data=lambda w: {"name": "OTHER_KEY", "value": "v"},
        ok=302,
    ),
    Page("delete secret", "post", "launch", "projects:secret_delete", ("secret_name",), ok=302),
    # The link itself: a newcomer signs up through it, a signed-in person joins with it.
    Page("invitation link", "get", "anyone", "projects:invitation", ("invitation_token",)),
    Page(
        "use invitation link",
        "post",
        "anyone",
        "projects:invitation",
        ("invitation_token",),
        data=lambda w: {
            "username": "newcomer",
            "password": "a-long-passphrase-9",
            "password_again": "a-long-passphrase-9",
        },
        ok=302,
    ),
    Page("environment list", "get", "read", "experiments:environment_list"),
    Page("environment detail", "get", "read", "experiments:environment_detail", ("environment",)),
    Page("new environment form", "get", "launch", "experiments:environment_create"),
    Page(
        "create environment", "post", "launch", "experiments:environment_create", data=new_environment, ok=302
    ),
    Page("edit environment form", "get", "launch", "experiments:environment_edit", ("environment",)),
    Page(
        "edit environment",
        "post",
        "launch",
        "experiments:environment_edit",
        ("environment",),
        data=edited_environment,
        ok=302,
    ),
    Page(
        "environment config fields",
        "get",
        "launch",
        "experiments:environment_config_fields",
        query="?kind=countdown",
    ),
    Page(
        "environment preview",
        "post",
        "launch",
        "experiments:environment_preview",
        data=lambda w: {"kind": "countdown"},
    ),
    Page("rubric list", "get", "read", "experiments:rubric_list"),
    Page("rubric detail", "get", "read", "experiments:rubric_detail", ("rubric",)),
    Page("new rubric form", "get", "launch", "experiments:rubric_create"),
    Page("create rubric", "post", "launch", "experiments:rubric_create", data=new_rubric, ok=302),
    Page("edit rubric form", "get", "launch", "experiments:rubric_edit", ("rubric",)),
    Page("edit rubric", "post", "launch", "experiments:rubric_edit", ("rubric",), data=edited_rubric, ok=302),
    Page(
        "criterion params",
        "get",
        "launch",
        "experiments:criterion_params",
        query="?kind=regex&prefix=criteria-0-params",
    ),
    Page("rubric preview", "post", "launch", "experiments:rubric_preview", data=preview),
    Page("rubric preview picker", "get", "launch", "experiments:rubric_preview_trajectories", query="?q=2"),
    Page("judge check", "get", "read", "experiments:rubric_judge_check", ("rubric",)),
    Page(
        "untrusted judge setting",
        "post",
        "manage",
        "experiments:project_untrusted_judge",
        ("rubric",),
        data=lambda w: {"untrusted_judge": "warn"},
        ok=302,
    ),
    Page("run list", "get", "read", "experiments:run_list"),
    Page("run detail", "get", "read", "experiments:run_detail", ("run",)),
    Page("new run form", "get", "launch", "experiments:run_create"),
    Page(
        "recommended knobs",
        "get",
        "launch",
        "experiments:run_recommended_knobs",
        query="?model=smollm2-135m",
    ),
    Page("create run", "post", "launch", "experiments:run_create", data=new_run, ok=302),
    Page("cancel run", "post", "launch", "experiments:run_cancel", ("run",), ok=302),
    # bob launched the world's run (queued: allowed people are sent back with the reason); only he and
    # the owner may delete it (tests/webapp/experiments/test_deletion.py)
    Page("delete run", "post", "launch", "experiments:run_delete", ("run",), ok=302),
    Page(
        "run tags and note",
        "post",
        "launch",
        "experiments:run_notes",
        ("run",),
        data=lambda w: {"tags": "baseline", "note": "first try"},
        ok=302,
    ),
    Page("resume run", "post", "launch", "experiments:run_resume", ("run",), ok=302),
    Page("fork form", "get", "launch", "experiments:run_fork", ("run",)),
]


def expected_status(page: Page, person: str | None) -> int | str:
    if page.needs == "anyone":
        return page.ok
    if page.needs == "public":
        return page.ok if person is None else 302  # signed-in people are sent on to their projects
    if person is None:
        return "sign-in redirect"
    if page.needs == "signed_in":
        return page.ok
    if person not in ROLE_OF:
        return 404
    return page.ok if page.needs in ROLE_CAPABILITIES[ROLE_OF[person]] else 403


def everything_stored() -> dict[str, Any]:
    return {
        "projects": Project.objects.count(),
        "memberships": sorted(Membership.objects.values_list("user__username", "role")),
        "environments": Environment.objects.count(),
        "environment versions": EnvironmentVersion.objects.count(),
        "rubrics": Rubric.objects.count(),
        "rubric versions": RubricVersion.objects.count(),
        "runs": sorted(Run.objects.values_list("pk", "status", "cancel_requested")),
        "tokens": sorted(ApiToken.objects.values_list("pk", "revoked_at")),
        "invitations": sorted(Invitation.objects.values_list("pk", "revoked_at", "used_at")),
        "secrets": sorted(ProjectSecret.objects.values_list("name", "updated_at")),
    }


@pytest.fixture
def world(project, environment, rubric, run, users):
    from webapp.accounts.services import api_token_create
    from webapp.projects.services import invitation_create, secret_set

    tokens = {name: api_token_create(user=user, name=f"{name}'s script")[0] for name, user in users.items()}
    invitation, invitation_token = invitation_create(
        project=project, created_by=users["alice"], role="annotator"
    )
    secret_set(project=project, name="JUDGE_KEY", value="sk-test", user=users["alice"])
    return {
        "secret_name": "JUDGE_KEY",
        "project": project,
        "environment": environment,
        "rubric": rubric,
        "run": run,
        "dave_membership": Membership.objects.get(project=project, user=users["dave"]),
        "tokens": tokens,
        "invitation": invitation,
        "invitation_token": invitation_token,
    }


@pytest.mark.parametrize("person", PEOPLE, ids=lambda p: p or "anonymous")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.label.replace(" ", "-"))
def test_it_lets_each_person_see_and_do_only_what_their_role_allows(client, users, world, page, person):
    if person is not None:
        client.force_login(users[person])
    world = {**world, "own_token": world["tokens"].get(person or "alice")}
    url = page.url(world)
    before = everything_stored()

    response = getattr(client, page.method)(url, page.data(world))

    expected = expected_status(page, person)
    if expected == "sign-in redirect":
        assert response.status_code == 302
        assert response.url.startswith(reverse("accounts:login"))
    else:
        assert response.status_code == expected, response.content[:500]
    if expected in (403, 404, "sign-in redirect") and page.method == "post":
        assert everything_stored() == before


def test_the_table_covers_every_page_of_these_apps():
    from webapp.accounts import urls as account_urls
    from webapp.experiments import urls as experiment_urls
    from webapp.projects import urls as project_urls

    routes = {
        f"{module.app_name}:{pattern.name}"
        for module in (account_urls, experiment_urls, project_urls)
        for pattern in module.urlpatterns
    }
    assert {page.route for page in PAGES} == routes


@pytest.mark.parametrize(
    "person, route, args, words",
    [
        ("carol", "experiments:run_create", ("project",), "Your role (annotator) may not launch a run."),
        ("dave", "experiments:rubric_create", ("project",), "Your role (viewer) may not create a rubric."),
        (
            "bob",
            "projects:invitation_create",
            ("project",),
            "Your role (researcher) may not invite a member.",
        ),
    ],
)
def test_a_refusal_names_the_refused_action(client, users, world, person, route, args, words):
    """Not "(launch)" for everything: the 403 says which action the role may not take."""
    client.force_login(users[person])
    url = reverse(route, args=[world[name].slug for name in args])
    response = client.post(url, {})
    assert response.status_code == 403
    assert words in response.content.decode().replace("&#x27;", "'")
