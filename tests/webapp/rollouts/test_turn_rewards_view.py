"""Per-turn rewards where people read trajectories: the trajectory page and the diff print the reported
per-turn reward and the one turn judgements attribute, beside each turn; the diff offers the turn
preference at the point where two samples part ways."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.webapp.factories import HOSTILE_TEXTS, make_trajectory, turn
from webapp.review import services


def sample(run, index: int, call: str, answer: str, *, reward: float | None = None):
    return make_trajectory(
        run,
        sample=index,
        task_id="add-2-2",
        turns=[
            turn("system", "You add numbers."),
            turn("user", "What is 2 + 2?"),
            turn("assistant", call, tool_name="add", reward=reward),
            turn("tool", "", tool_name="add", tool_result="4"),
            turn("assistant", answer),
        ],
    )


@pytest.fixture
def siblings(run):
    return (
        sample(run, 0, '<tool>{"name": "add"}</tool>', "<answer>4</answer>", reward=0.5),
        sample(run, 1, HOSTILE_TEXTS[0], "<answer>5</answer>"),
    )


def test_the_trajectory_page_prints_reported_and_judged_per_turn_rewards(
    client_for, project, siblings, users
):
    good, _bad = siblings
    services.turn_mark_wrong(trajectory=good, annotator=users["carol"], turn_index=4)
    html = (
        client_for("dave")
        .get(reverse("rollouts:trajectory_detail", args=[project.slug, good.pk]))
        .content.decode()
    )
    head = re.search(r'id="turn-2".*?</div>', html, re.S).group(0)
    assert "reward <strong>0.5000</strong>" in head and "judged <strong>1.00</strong>" in head
    last = re.search(r'id="turn-4".*?</div>', html, re.S).group(0)
    assert 'class="turn-reward judged neg"' in last and "marked wrong by 1" in last


def test_the_diff_prints_judged_rewards_and_takes_a_turn_preference_at_the_divergence(
    client_for, project, siblings
):
    good, bad = siblings
    url = reverse("rollouts:diff", args=[project.slug]) + f"?a={good.pk}&b={bad.pk}"
    client = client_for("carol")
    html = client.get(url).content.decode()
    assert "They part ways at turn #2" in html and "data-judged-reward" not in html
    assert HOSTILE_TEXTS[0] not in html  # the model's text stays escaped in the cells
    form = re.search(r'<form[^>]*action="([^"]+)"[^>]*>((?:(?!</form>).)*data-prefer="A")', html, re.S)
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', form.group(2)))
    assert fields["other"] == str(bad.pk) and fields["turn_index"] == "2"
    response = client.post(form.group(1), {**fields, "next": fields["next"].replace("&amp;", "&")})
    assert response.status_code == 302 and response["Location"] == url

    html = client.get(url).content.decode()
    # A's turn #2 preferred, B's turn #2 not (cells come left, right, row by row)
    assert re.findall(r'data-judged-reward="([-\d.]+)"', html) == ["1.0", "-1.0"]
    # dave reads the judged rewards but is offered no preference buttons.
    html = client_for("dave").get(url).content.decode()
    assert "data-judged-reward" in html and "data-prefer" not in html
