"""The diff page and its entry points: best vs worst of a group (in test_group_view), one task at step A
vs step B of the evaluation set, run X vs run Y on a task; the reward breakdown difference, the
environment-state diff, and hostile text that stays text."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.webapp.factories import HOSTILE_TEXTS, make_trajectory, turn


def diff_url(project, a, b) -> str:
    return reverse("rollouts:diff", args=[project.slug]) + f"?a={a.pk}&b={b.pk}"


def steps_url(project, run, query: str) -> str:
    return reverse("rollouts:diff_task_steps", args=[project.slug, run.pk]) + query


def runs_url(project, query: str) -> str:
    return reverse("rollouts:diff_task_runs", args=[project.slug]) + query


def components(correct: float, fmt: float, weight: float = 0.2) -> list[dict]:
    return [
        {"name": "correct", "kind": "numeric_match", "raw": correct, "weight": 1.0, "weighted": correct},
        {"name": "format", "kind": "regex", "raw": fmt, "weight": weight, "weighted": fmt * weight},
    ]


@pytest.fixture
def before_after(run):
    before = make_trajectory(
        run,
        step=0,
        split="eval",
        task_id="add-12-30",
        reward=0.0,
        components=components(0.0, 0.0),
        env_state={"display": "12", "history": ["12"]},
        turns=[turn("user", "What is 12 + 30?"), turn("assistant", "I think it is 41.")],
    )
    after = make_trajectory(
        run,
        step=9,
        split="eval",
        task_id="add-12-30",
        reward=1.2,
        components=components(1.0, 1.0),
        env_state={"display": "42", "history": ["12", "42"]},
        turns=[
            turn("user", "What is 12 + 30?"),
            turn("assistant", "Let me compute.", tool_name="calculator", tool_args={"expression": "12 + 30"}),
            turn("tool", "", tool_name="calculator", tool_result="42"),
            turn("assistant", "I think it is <answer>42</answer>."),
        ],
    )
    return before, after


def row_sides(html: str) -> list[tuple[str, str]]:
    """For each aligned row: what the left and the right cell are ("gap" or the turn's role)."""
    cells = re.findall(
        r'<div class="diff-row-(left|right) [^"]*" data-row="\d+">\s*<div class="cell (gap|role-\w+)', html
    )
    pairs = []
    for k in range(0, len(cells), 2):
        assert cells[k][0] == "left" and cells[k + 1][0] == "right"
        pairs.append((cells[k][1].removeprefix("role-"), cells[k + 1][1].removeprefix("role-")))
    return pairs


def test_the_diff_aligns_turns_and_highlights_changed_words(client_for, project, before_after):
    before, after = before_after
    html = client_for("dave").get(diff_url(project, before, after)).content.decode()

    assert row_sides(html) == [
        ("user", "user"),
        ("gap", "assistant"),
        ("gap", "tool"),
        ("assistant", "assistant"),
    ]
    assert "I think it is <del>41</del>." in html
    assert "I think it is <ins>&lt;answer&gt;42&lt;/answer&gt;</ins>." in html
    assert "<span data-changed-rows>3</span> of 4" in html


def test_the_reward_breakdown_difference_is_per_criterion(client_for, project, run):
    a = make_trajectory(run, reward=0.2, components=components(0.0, 1.0, weight=0.2))
    b = make_trajectory(run, sample=1, reward=1.5, components=components(1.0, 1.0, weight=0.5))
    html = client_for("dave").get(diff_url(project, a, b)).content.decode()

    deltas = dict(re.findall(r'<tr data-criterion="(\w+)">.*?data-delta>([^<]+)<', html, re.S))
    assert deltas == {"correct": "1.0000", "format": "0.3000"}
    assert "weight changed" in html
    assert '<span class="pos" data-reward-delta>1.3000</span>' in html


def test_environment_states_are_diffed_when_both_sides_have_one(client_for, project, before_after, run):
    before, after = before_after
    html = client_for("dave").get(diff_url(project, before, after)).content.decode()
    assert (
        "<code>display</code></td><td>changed</td><td><code>&quot;12&quot;</code></td><td><code>&quot;42&quot;</code>"
        in html
    )
    assert "<code>history[1]</code></td><td>added</td>" in html

    stateless = make_trajectory(run, step=1, task_id="add-12-30")
    html = client_for("dave").get(diff_url(project, before, stateless)).content.decode()
    assert "Only one side reported an environment state." in html


def test_step_a_vs_step_b_picks_the_task_at_those_steps_of_the_evaluation_set(
    client_for, project, run, before_after
):
    before, after = before_after
    middle = make_trajectory(run, step=5, split="eval", task_id="add-12-30", reward=0.5)
    make_trajectory(
        run, step=5, split="eval", task_id="add-12-30", sample=1, reward=0.9
    )  # not the first sample
    make_trajectory(
        run, step=5, split="train", task_id="add-12-30", reward=0.9
    )  # training, not the fixed set
    make_trajectory(run, step=5, group=1, split="eval", task_id="other-task", reward=0.9)
    client = client_for("dave")

    assert client.get(steps_url(project, run, "?task=add-12-30")).url == diff_url(project, before, after)
    assert client.get(steps_url(project, run, "?task=add-12-30&a=5&b=9")).url == diff_url(
        project, middle, after
    )
    assert client.get(steps_url(project, run, "?task=add-12-30&b=5")).url == diff_url(project, before, middle)
    assert client.get(steps_url(project, run, "?task=add-12-30&a=3&b=9")).status_code == 404  # no step 3
    assert client.get(steps_url(project, run, "?task=nope")).status_code == 404
    assert client.get(steps_url(project, run, "?task=add-12-30&a=x")).status_code == 400


def test_run_x_vs_run_y_picks_each_runs_latest_step_preferring_the_evaluation_set(
    client_for, project, run, environment, rubric, users, before_after
):
    from webapp.experiments.services import run_create

    _, latest_eval = before_after
    make_trajectory(run, step=20, split="train", task_id="add-12-30")  # later, but training
    other, _ = run_create(
        project=project,
        name="other",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    make_trajectory(other, step=3, task_id="add-12-30")
    other_latest = make_trajectory(
        other, step=7, task_id="add-12-30"
    )  # no eval split there: training's latest
    make_trajectory(other, step=7, sample=1, task_id="add-12-30")
    client = client_for("dave")

    response = client.get(runs_url(project, f"?task=add-12-30&x={run.pk}&y={other.pk}"))

    assert response.status_code == 302 and response.url == diff_url(project, latest_eval, other_latest)
    assert client.get(runs_url(project, f"?task=missing&x={run.pk}&y={other.pk}")).status_code == 404
    assert client.get(runs_url(project, f"?task=add-12-30&x={run.pk}")).status_code == 400


def test_the_task_list_offers_first_vs_last_for_tasks_seen_at_several_steps(
    client_for, project, run, before_after
):
    make_trajectory(run, step=4, split="eval", task_id="once")
    html = client_for("dave").get(reverse("rollouts:task_list", args=[project.slug, run.pk])).content.decode()
    assert steps_url(project, run, "?task=add-12-30&amp;split=eval") in html
    assert "?task=once&amp;split=eval" not in html
    assert re.search(
        r"<code>add-12-30</code></span></td>\s*<td class=\"num\">2</td>\s*<td class=\"num\">0</td>\s*"
        r"<td class=\"num\">0.000</td>\s*<td class=\"num\">9</td>\s*<td class=\"num\">1.200</td>",
        html,
    )


def test_malformed_and_missing_ids(client_for, project, before_after):
    before, _ = before_after
    client = client_for("dave")
    base = reverse("rollouts:diff", args=[project.slug])
    assert client.get(base).status_code == 400
    assert client.get(f"{base}?a={before.pk}&b=abc").status_code == 400
    assert client.get(f"{base}?a={before.pk}&b=-3").status_code == 400
    assert client.get(f"{base}?a={before.pk}&b=999999").status_code == 404


@pytest.mark.parametrize("hostile", HOSTILE_TEXTS)
def test_hostile_text_is_inert_in_the_diff(client_for, project, run, hostile):
    a = make_trajectory(
        run,
        task_id=hostile,
        env_state={hostile: hostile},
        components=[{"name": hostile, "raw": 0, "weight": 1, "weighted": 0, "explanation": hostile}],
        turns=[
            turn("user", "hi"),
            turn(
                "assistant",
                f"plain {hostile}",
                tool_name="calc",
                tool_args={"q": hostile},
                tool_result=hostile,
            ),
        ],
    )
    b = make_trajectory(
        run,
        sample=1,
        task_id=hostile,
        env_state={hostile: "other"},
        components=[{"name": hostile, "raw": 1, "weight": 1, "weighted": 1, "explanation": hostile}],
        turns=[
            turn("user", hostile),
            turn(
                "assistant",
                f"{hostile} plain",
                tool_name="calc",
                tool_args={"q": f"{hostile}!"},
                tool_result=f"{hostile}?",
            ),
            turn("tool", hostile),
        ],
    )
    html = client_for("dave").get(diff_url(project, a, b)).content.decode()
    assert "<script>window.pwned" not in html
    assert "<img src=x" not in html
    assert 'href="javascript:' not in html
    assert "<ins>" in html or "<del>" in html


def test_task_flips_default_to_first_and_last_steps_without_checkpoints_and_refuse_bad_input(
    client_for, project, run
):
    for step, reward in ((0, 0.0), (3, 1.0)):
        make_trajectory(run, step=step, task_id="t1", split="eval", reward=reward)
    url = reverse("rollouts:task_flips", args=[project.slug, run.pk])
    html = client_for("dave").get(url).content.decode()
    assert "between step 0 and step 3" in html and 'data-flip-task="t1"' in html
    assert client_for("dave").get(url, {"pass": "nan"}).status_code == 400
    assert client_for("dave").get(url, {"a": "-1"}).status_code == 400
    assert client_for("eve").get(url).status_code == 404
    # A pass mark above every reward: nothing flips.
    assert "data-flip-task" not in client_for("dave").get(url, {"pass": "2"}).content.decode()


def test_compare_many_refuses_bad_lists_and_other_projects_trajectories(client_for, project, run):
    a, b = make_trajectory(run, sample=0), make_trajectory(run, sample=1)
    url = reverse("rollouts:compare_trajectories", args=[project.slug])
    ok = client_for("dave").get(url, {"ids": f"{a.pk},{b.pk}"})
    assert ok.status_code == 200 and ok.content.decode().count("data-compare-column=") == 2
    assert client_for("dave").get(url, {"ids": f"{a.pk}"}).status_code == 400
    assert client_for("dave").get(url, {"ids": ",".join(str(a.pk + i) for i in range(9))}).status_code == 400
    assert client_for("dave").get(url, {"ids": "1,x"}).status_code == 400
    assert client_for("dave").get(url, {"ids": f"{a.pk},999999"}).status_code == 404
    assert client_for("eve").get(url, {"ids": f"{a.pk},{b.pk}"}).status_code == 404
    assert client_for("dave").get(url, {"run": run.pk, "task": "nope"}).status_code == 404


def _compare_banner(html: str) -> str:
    """The compare page's task banner as a reader sees it: its text, tags dropped, entities kept escaped."""
    banner = re.search(r"<p[^>]*data-compare-task[^>]*>(.*?)</p>", html, re.S)
    assert banner, "the compare page has no task banner"
    return " ".join(re.sub(r"<[^>]+>", "", banner.group(1)).split())


def test_compare_many_names_the_task_and_says_when_the_ticked_rows_are_of_several(client_for, project, run):
    # Tasks are named by their prompt's text, as every page names a task (task_tags); the id is on hover.
    a = make_trajectory(run, sample=0, task_id="t1", prompt="What is 3 + 4?")
    b = make_trajectory(run, sample=1, task_id="t1", prompt="What is 3 + 4?")
    c = make_trajectory(run, sample=2, task_id="t2", prompt="<b>Bold</b> sum\nsecond line")
    url = reverse("rollouts:compare_trajectories", args=[project.slug])
    one = client_for("dave").get(url, {"ids": f"{a.pk},{b.pk}"}).content.decode()
    assert _compare_banner(one) == "Task What is 3 + 4?"
    assert 'title="What is 3 + 4?\n\ntask t1"' in one
    two = client_for("dave").get(url, {"ids": f"{a.pk},{b.pk},{c.pk}"}).content.decode()
    banner = _compare_banner(two)
    assert banner.startswith("2 different tasks (What is 3 + 4?; &lt;b&gt;Bold&lt;/b&gt; sum)")
    assert "<b>Bold</b>" not in two  # the model-side prompt is escaped, and only its first line names it
