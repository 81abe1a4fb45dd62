"""Every page is served with a Content-Security-Policy that allows scripts from our own origin only, and
the pages still work under it in real Chromium: htmx loads, the run page draws its charts and follows
the run over its websocket, compare draws, Swagger UI and Redoc render. Meanwhile a corpus of XSS
payloads written into every field a user, a trainer or a model controls — names, descriptions, configs,
metric keys, prompts, turns, tool calls, logs, comments, tags — stays inert on every page."""

from __future__ import annotations

import json
import time

import pytest
import requests
from django.contrib.auth import get_user_model

from tests.browser.conftest import FOLLOWING_RUN, sign_in

PASSWORD = "correct-horse-battery"
# Each payload, if it ran, would set window.pwned (or open a dialog).
XSS = [
    "<script>window.pwned=1</script>",
    '<img src=x onerror="window.pwned=2">',
    '<svg onload="window.pwned=3">',
    '"><script>window.pwned=4</script>',
    "'><img src=x onerror=window.pwned=5>",
    '<iframe src="javascript:parent.pwned=6"></iframe>',
    '<a href="javascript:window.pwned=7">x</a>',
    '<details open ontoggle="window.pwned=8">',
    '<math><style><img src=x onerror="window.pwned=9"></style></math>',
    '<input autofocus onfocus="window.pwned=10">',
    '<object data="javascript:window.pwned=11"></object>',
    '</textarea></title><video><source onerror="window.pwned=12">',
    "<b onmouseover=alert(13)>hover</b>",
]


@pytest.fixture
def hostile(transactional_db):
    """A project where everything anyone can name carries a payload."""
    from webapp.experiments.services import environment_create, rubric_create, run_create
    from webapp.projects.models import Membership
    from webapp.projects.services import project_create
    from webapp.review import services as review_services

    User = get_user_model()
    alice = User.objects.create_user("alice", "alice@example.com", PASSWORD)
    dave = User.objects.create_user("dave", "dave@example.com", PASSWORD)
    project = project_create(name=XSS[0], owner=alice, description=" ".join(XSS))
    Membership.objects.create(project=project, user=dave, role="viewer")
    environment = environment_create(
        project=project,
        name=XSS[1],
        kind="from_dataset",
        config={"path": XSS[2], "system_prompt": XSS[2]},
        user=alice,
        description=XSS[3],
    )
    rubric = rubric_create(
        project=project,
        name=XSS[4],
        user=alice,
        description=XSS[5],
        spec={
            "aggregation": "weighted_sum",
            "criteria": [{"name": XSS[6], "kind": "numeric_match", "weight": 1.0, "params": {}}],
        },
    )
    runs = [
        run_create(
            project=project,
            name=payload,
            environment=environment,
            rubric=rubric,
            preset="grpo",
            overrides={"max_steps": 5},
            user=alice,
            dispatch=False,
        )
        for payload in XSS[7:9]
    ]
    return project, runs, review_services


def report(server, run, token, events):
    response = requests.post(
        f"{server}/api/runs/{run.pk}/events",
        data=json.dumps({"events": events}),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 200, response.text


def trajectories(step: int) -> dict:
    items = []
    for sample, payload in enumerate(XSS):
        turns = [
            {"role": "user", "text": payload},
            {"role": "assistant", "text": payload, "tool_name": "calc", "tool_args": {payload: payload}},
            {"role": "tool", "tool_name": "calc", "tool_result": payload},
        ]
        items.append(
            {
                "group": 0,
                "sample": sample,
                "task_id": payload[:200],
                "prompt": payload,
                "reward": sample / 10,
                "components": [
                    {"name": payload, "raw": 1.0, "weight": 1.0, "weighted": 1.0, "explanation": payload}
                ],
                "env_state": {payload: payload},
                "turns": turns,
            }
        )
    return {"seq": 100 + step, "type": "trajectories", "step": step, "items": items}


@pytest.fixture
def reported(hostile, server):
    project, runs, review_services = hostile
    from webapp.rollouts.models import Trajectory

    for run, token in runs:
        events = [{"seq": 1, "type": "status", "status": "RUNNING"}]
        for step in (1, 2, 3):
            events.append(
                {
                    "seq": 1 + step,
                    "type": "metrics",
                    "step": step,
                    "values": {"reward/mean": 0.1 * step, **{payload: 0.2 * step for payload in XSS}},
                }
            )
        events += [
            trajectories(1),
            {"seq": 200, "type": "log", "level": "info", "message": " ".join(XSS)},
            {"seq": 201, "type": "checkpoint", "step": 1, "path": XSS[10], "metrics": {XSS[11]: 1.0}},
        ]
        report(server, run, token, events)
    trajectory = Trajectory.objects.filter(run=runs[0][0]).order_by("pk").first()
    from django.contrib.auth import get_user_model

    alice = get_user_model().objects.get(username="alice")
    review_services.comment_create(trajectory=trajectory, author=alice, body=" ".join(XSS))
    review_services.tag_add(trajectory=trajectory, user=alice, name=XSS[1][:50])
    return project, [run for run, _ in runs], trajectory


def wait_until(page, expression: str, timeout_s: float = 20) -> None:
    """Poll with page.evaluate (Playwright's wait_for_function evaluates its predicate with eval, which the
    page's own policy refuses)."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"not true within {timeout_s} s: {expression}"
        time.sleep(0.1)


def test_every_page_carries_the_policy_and_works_under_it_with_the_payloads_inert(
    reported, server, enforced_page
):
    page = enforced_page
    project, runs, trajectory = reported
    p = f"/p/{project.slug}"
    dialogs, refusals = [], []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.on(
        "console",
        lambda message: refusals.append(message.text) if "Content Security Policy" in message.text else None,
    )
    sign_in(page, server, "alice", PASSWORD)

    def visit(path: str, ready: str = "typeof htmx !== 'undefined'") -> None:
        response = page.goto(f"{server}{path}")
        assert response.status == 200, path
        policy = response.headers["content-security-policy"]
        assert "script-src 'self';" in policy and "unsafe-eval" not in policy, policy
        wait_until(page, ready)
        page.mouse.move(200, 300)  # hover over whatever is there (the corpus has an onmouseover)
        assert page.evaluate("window.pwned") is None, path

    for path in [
        "/",
        f"{p}/",
        f"{p}/environments/",
        f"{p}/rubrics/",
        f"{p}/runs/",
        f"{p}/trajectories/",
        f"{p}/trajectories/{trajectory.pk}/",
        f"{p}/runs/{runs[0].pk}/groups/",
        f"{p}/members/",
        f"{p}/activity/",
        "/accounts/tokens/",
        "/workers/",
    ]:
        visit(path)
    for environment_path in [
        f"{p}/environments/{pk}/" for pk in project.environments.values_list("pk", flat=True)
    ]:
        visit(environment_path)
    for rubric_path in [f"{p}/rubrics/{pk}/" for pk in project.rubrics.values_list("pk", flat=True)]:
        visit(rubric_path)
    # The live pages: plotly draws from our own static files, the websocket connects to our origin.
    visit(f"{p}/runs/{runs[0].pk}/", FOLLOWING_RUN)
    assert page.evaluate("document.getElementById('chart-reward').data[0].x.length") == 3
    visit(
        f"{p}/compare/?runs={runs[0].pk}&runs={runs[1].pk}",
        "document.querySelectorAll('.js-plotly-plot').length > 0",
    )
    # The API's readers, from drf-spectacular-sidecar, with their start-up script as a file.
    visit("/api/docs/", "document.querySelector('.swagger-ui .info') !== null")
    visit("/api/docs/redoc/", "document.querySelector('redoc h1, [role=navigation]') !== null")

    assert dialogs == []
    # What the policy refused: payloads' inline code, Redoc's logo from its CDN — never a file of ours, and no
    # library of ours needed eval.
    assert not [r for r in refusals if server in r or "unsafe-eval" in r], refusals
