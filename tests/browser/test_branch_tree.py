"""A branched group on its group page, in real headless Chromium on a real daphne server: the trainer reports
the group through the real ingestion API (as `rollout_strategy: branching` sends it, each branch with its
parent, shared prefix and entropy); the open run page's feed marks the group branched, live, and links to the
group page, which draws it as a tree — branches under their parents, where and why each branched, reward,
advantage and own tool calls — with model text escaped."""

from __future__ import annotations

import json
import re

import pytest
import requests
from playwright.sync_api import expect

from tests.browser.conftest import sign_in, wait_until_following
from tests.conftest import PASSWORD
from tests.webapp.factories import make_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

HOSTILE = "<script>window.pwned = 1</script>Result: 19"


def turns(*texts: tuple[str, str]) -> list[dict]:
    out = [{"role": "system", "text": "Use the calculator."}, {"role": "user", "text": "What is 12 + 7?"}]
    for role, text in texts:
        turn = {"role": role, "text": text}
        if role == "assistant" and "<tool_call>" in text:
            turn["tool_name"] = "calculator"
        out.append(turn)
    return out


CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12 + 7"}}</tool_call>'


def sample(
    index: int, reward: float, advantage: float, conversation: list[dict], branch: dict | None
) -> dict:
    return {
        "group": 0,
        "sample": index,
        "task_id": "t-0",
        "prompt": "What is 12 + 7?",
        "reward": reward,
        "advantage": advantage,
        "turns": conversation,
        "branch": branch,
    }


def test_a_branched_group_is_drawn_as_a_tree(project, environment, rubric, users, server, page):
    run = make_run(
        project,
        environment,
        rubric,
        users["bob"],
        "branching",
        overrides={"rollout_strategy": "branching", "group_size": 4},
        status="RUNNING",
    )
    shared = [("assistant", CALL), ("tool", HOSTILE)]
    items = [
        sample(0, 1.0, 0.87, turns(*shared, ("assistant", "<answer>19</answer>")), None),
        sample(1, 0.0, -0.87, turns(("assistant", "<answer>20</answer>")), None),
        sample(
            2,
            1.0,
            0.87,
            turns(*shared, ("assistant", CALL), ("tool", "Result: 19"), ("assistant", "<answer>19</answer>")),
            {
                "parent": 0,
                "prefix_tokens": 40,
                "turn": 4,
                "entropy": 2.5,
                "initial_entropy": 1.25,
                "rise": 1.0,
            },
        ),
        sample(
            3,
            0.0,
            -0.87,
            turns(*shared, ("assistant", CALL), ("tool", "Result: 19"), ("assistant", "no idea")),
            {
                "parent": 2,
                "prefix_tokens": 60,
                "turn": 6,
                "entropy": 1.0,
                "initial_entropy": 1.25,
                "rise": -0.2,
            },
        ),
    ]
    sign_in(page, server, "bob", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    wait_until_following(page)
    response = requests.post(
        f"{server}/api/runs/{run.pk}/events",
        data=json.dumps({"events": [{"seq": 1, "type": "trajectories", "step": 1, "items": items}]}),
        headers={"Authorization": f"Bearer {run.ingest_token()}", "Content-Type": "application/json"},
        timeout=20,
    )
    assert response.status_code == 200, response.text
    # Live: the run page's feed marks the group as branched, without a reload, and links to its tree.
    badge = page.locator("[data-feed-branches]")
    expect(badge).to_have_text("⑂ 2 branches")
    badge.click()
    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/groups/1/0/\?split=train$"))
    tree = page.locator("[data-branch-tree]")
    nodes = tree.locator("[data-node]")
    expect(nodes).to_have_count(4)
    # Tree order: each branch right under its parent, one level deeper.
    assert [nodes.nth(i).get_attribute("data-node") for i in range(4)] == ["0", "2", "3", "1"]
    assert [nodes.nth(i).get_attribute("style") for i in range(4)] == [
        "--depth: 0",
        "--depth: 1",
        "--depth: 2",
        "--depth: 0",
    ]
    first_branch = tree.locator("[data-node='2']")
    expect(first_branch.locator("[data-branch-point]")).to_contain_text(
        "from #0 at turn 4 · 40 tokens shared"
    )
    expect(first_branch.locator("[data-entropy]")).to_have_text("entropy 2.50 vs 1.25 (+100%)")
    expect(first_branch.locator("[data-reward]")).to_have_text("reward 1.000")
    expect(first_branch.locator("[data-advantage]")).to_have_text("adv 0.870")
    expect(first_branch.locator("[data-tool-calls]")).to_have_text("1 tool call")  # its own, after turn 4
    expect(tree.locator("[data-node='0'] [data-tool-calls]")).to_have_text("1 tool call")
    expect(tree.locator("[data-node='3'] [data-entropy]")).to_contain_text("(-20%)")
    expect(tree.locator("[data-node='1'] .badge")).to_have_text("global sample")
    # The tool result the branch followed, as text: the model's (and the tool's) output is never markup.
    expect(first_branch.locator(".after-result code")).to_have_text(HOSTILE)
    assert page.evaluate("window.pwned") is None
    first_branch.locator("a").first.click()
    expect(page).to_have_url(re.compile(r"/trajectories/\d+/$"))
