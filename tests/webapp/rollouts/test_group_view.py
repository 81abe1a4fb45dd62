"""The group view: all samples of one task at one step with reward, advantage, rank, the group's mean
and std, and a flag on groups whose samples all scored the same (they teach GRPO nothing)."""

from __future__ import annotations

import math
import re

import pytest
from django.urls import reverse

from tests.webapp.factories import HOSTILE_TEXTS, make_trajectory, turn
from trainers.learn.algorithms import grpo_advantages
from webapp.rollouts.selectors import trajectories as trajectory_selectors


def group_url(project, run, step, group, split="train") -> str:
    return reverse("rollouts:group_detail", args=[project.slug, run.pk, step, group]) + f"?split={split}"


def cells(html: str, name: str) -> list[str]:
    return re.findall(rf"data-{name}>([^<]*)<", html)


def make_group(run, rewards, *, step=4, group=2, split="train", advantages=None, task_id="add-5-9"):
    advantages = advantages if advantages is not None else grpo_advantages([rewards])[0]
    return [
        make_trajectory(
            run,
            step=step,
            group=group,
            sample=i,
            split=split,
            task_id=task_id,
            reward=reward,
            advantage=advantage,
            components=[
                {"name": "correct", "kind": "numeric_match", "raw": reward, "weight": 1.0, "weighted": reward}
            ],
            turns=[
                turn("user", "What is 5 + 9?"),
                turn("assistant", f"sample {i} says <answer>{reward}</answer>"),
            ],
        )
        for i, (reward, advantage) in enumerate(zip(rewards, advantages, strict=True))
    ]


def test_samples_show_reward_stored_advantage_and_rank_with_the_groups_mean_and_std(client_for, project, run):
    rewards = [0.2, 1.0, 0.2, 0.0]
    stored = grpo_advantages([rewards])[0]
    make_group(run, rewards)
    make_trajectory(run, step=4, group=3, reward=5.0)  # another group at the same step stays out

    html = client_for("dave").get(group_url(project, run, 4, 2)).content.decode()

    assert cells(html, "reward") == ["0.2000", "1.0000", "0.2000", "0.0000"]
    assert cells(html, "advantage") == [f"{a:.4f}" for a in stored]
    assert cells(html, "rank") == ["2", "1", "2", "4"]  # ties share a rank; the next one skips
    mean = sum(rewards) / 4
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / 3)
    assert cells(html, "group-mean") == [f"{mean:.4f}"]
    assert cells(html, "group-std") == [f"{std:.4f}"]
    assert "data-zero-variance" not in html
    assert "sample 1 says &lt;answer&gt;1.0&lt;/answer&gt;" in html  # final answers side by side


def test_the_stored_advantage_is_shown_as_stored_even_when_it_differs_from_a_recomputation(
    client_for, project, run
):
    make_group(run, [1.0, 0.0], advantages=[0.5, None])
    html = client_for("dave").get(group_url(project, run, 4, 2)).content.decode()
    assert cells(html, "advantage") == ["0.5000", ""]  # "—" for one that was not reported
    assert '<span class="muted">—</span></td>' in html


def test_a_training_group_whose_samples_all_scored_the_same_is_flagged(client_for, project, run):
    make_group(run, [0.0, 0.0, 0.0, 0.0])
    make_group(run, [1.0, 1.0 + 1e-12], group=5)  # within float noise: still nothing to learn
    make_group(run, [1.0, 1.0 + 1e-6], group=6)  # a real (small) difference

    client = client_for("dave")
    assert "data-zero-variance" in client.get(group_url(project, run, 4, 2)).content.decode()
    assert "data-zero-variance" in client.get(group_url(project, run, 4, 5)).content.decode()
    assert "data-zero-variance" not in client.get(group_url(project, run, 4, 6)).content.decode()


def test_an_evaluation_group_is_not_flagged_because_it_trains_nothing(client_for, project, run):
    make_group(run, [0.0, 0.0], split="eval")
    html = client_for("dave").get(group_url(project, run, 4, 2, split="eval")).content.decode()
    assert "data-zero-variance" not in html and "evaluation" in html


def test_group_selector_ranks_and_picks_best_and_worst(run):
    make_group(run, [0.5, 0.9, 0.1, 0.9, 0.1])
    group = trajectory_selectors.group_detail(run=run, step=4, group_index=2)

    assert [m.rank for m in group.members] == [3, 1, 4, 1, 4]
    best, worst = group.best_and_worst()
    assert (best.sample_index, worst.sample_index) == (1, 2)  # first by sample index on ties
    assert not group.zero_variance
    assert trajectory_selectors.group_detail(run=run, step=4, group_index=9) is None


def test_best_vs_worst_redirects_to_the_diff_of_that_pair(client_for, project, run):
    samples = make_group(run, [0.3, 0.0, 1.0])
    response = client_for("dave").get(
        reverse("rollouts:diff_best_worst", args=[project.slug, run.pk, 4, 2]) + "?split=train"
    )
    assert response.status_code == 302
    assert (
        response.url
        == reverse("rollouts:diff", args=[project.slug]) + f"?a={samples[2].pk}&b={samples[1].pk}"
    )


def test_best_vs_worst_of_a_single_sample_goes_back_to_the_group(client_for, project, run):
    make_group(run, [1.0])
    response = client_for("dave").get(reverse("rollouts:diff_best_worst", args=[project.slug, run.pk, 4, 2]))
    assert response.status_code == 302 and response.url == group_url(project, run, 4, 2)


def test_a_missing_group_is_not_found(client_for, project, run):
    make_group(run, [1.0, 0.0])
    client = client_for("dave")
    assert client.get(group_url(project, run, 4, 7)).status_code == 404
    assert client.get(group_url(project, run, 4, 2, split="eval")).status_code == 404


def test_previous_and_next_groups_are_linked(client_for, project, run):
    make_group(run, [1.0, 0.0], step=3, group=7)
    make_group(run, [1.0, 0.0], step=4, group=2)
    make_group(run, [1.0, 0.0], step=4, group=3)
    html = client_for("dave").get(group_url(project, run, 4, 2)).content.decode()
    assert f'href="{group_url(project, run, 3, 7)}" rel="prev"'.replace("&", "&amp;") in html
    assert f'href="{group_url(project, run, 4, 3)}" rel="next"' in html


def test_the_group_list_shows_each_group_newest_first_with_its_spread_and_flag(client_for, project, run):
    make_group(run, [1.0, 0.0, 0.5], step=1, group=0)
    make_group(run, [0.0, 0.0], step=2, group=0)
    make_group(run, [0.7], step=2, group=1, split="eval")

    html = (
        client_for("dave").get(reverse("rollouts:group_list", args=[project.slug, run.pk])).content.decode()
    )

    rows = re.findall(r'<tr( class="zero-variance")?>\s*<td class="num">(\d+)</td>', html)
    assert [(int(step), bool(flag)) for flag, step in rows] == [
        (2, False),
        (2, True),
        (1, False),
    ]  # eval first at step 2
    assert "0.500" in html and "1.000" in html  # mean and std of step 1's group are 0.5 and 0.5
    train_only = client_for("dave").get(
        reverse("rollouts:group_list", args=[project.slug, run.pk]) + "?split=train"
    )
    assert (
        len(re.findall(r'<td class="num">\d+</td>\s*<td>(?:train|<span)', train_only.content.decode())) == 2
    )


def test_the_group_list_pages_by_step(run):
    for step in range(25):
        make_trajectory(run, step=step, reward=step)
    first = trajectory_selectors.group_summaries(run=run, steps_per_page=10)
    assert [row["step"] for row in first.rows] == list(range(24, 14, -1))
    second = trajectory_selectors.group_summaries(run=run, steps_per_page=10, before_step=first.next_before)
    assert [row["step"] for row in second.rows] == list(range(14, 4, -1))
    last = trajectory_selectors.group_summaries(run=run, steps_per_page=10, before_step=second.next_before)
    assert [row["step"] for row in last.rows] == list(range(4, -1, -1)) and last.next_before is None


@pytest.mark.parametrize("hostile", HOSTILE_TEXTS)
def test_hostile_answers_and_task_ids_are_inert_in_the_group_pages(client_for, project, run, hostile):
    for sample in range(2):
        make_trajectory(
            run,
            step=1,
            sample=sample,
            task_id=hostile,
            reward=sample,
            components=[{"name": hostile, "raw": 1, "weight": 1, "weighted": 1}],
            turns=[turn("user", hostile), turn("assistant", hostile)],
        )
    client = client_for("dave")
    for url in (
        group_url(project, run, 1, 0),
        reverse("rollouts:group_list", args=[project.slug, run.pk]),
        reverse("rollouts:task_list", args=[project.slug, run.pk]) + "?split=train",
    ):
        html = client.get(url).content.decode()
        assert (
            "<script>window.pwned" not in html
            and "<img src=x" not in html
            and 'href="javascript:' not in html
        )


def test_a_task_is_named_by_its_prompt_with_its_answer_wherever_it_appears(client_for, project, run):
    """Not by its hash: the first line of its prompt (the whole prompt and its id on hover) and the
    expected answer, in the groups list, the group page, the evaluation tasks, the trajectory and the
    explorer; the group page's criterion columns say they hold weighted values."""
    prompt = "What is 5 + 9?\nAnswer inside <answer></answer>."
    for step in (1, 2):
        stored = make_trajectory(
            run, step=step, split="eval", task_id="add-5-9-3f2a", prompt=prompt, answer="14"
        )
    make_group(run, [0.0, 1.0], step=3, group=0)
    Trajectory = type(stored)
    Trajectory.objects.filter(step=3).update(prompt=prompt, answer="14")
    dave = client_for("dave")
    pages = {
        "groups": reverse("rollouts:group_list", args=[project.slug, run.pk]),
        "group": group_url(project, run, 3, 0),
        "tasks": reverse("rollouts:task_list", args=[project.slug, run.pk]),
        "trajectory": reverse("rollouts:trajectory_detail", args=[project.slug, stored.pk]),
        "explorer": reverse("review:explorer", args=[project.slug]) + f"?run={run.pk}",
    }
    for name, page in pages.items():
        html = dave.get(page, HTTP_HX_REQUEST="true" if name == "explorer" else "").content.decode()
        assert re.search(
            r'<span class="task-text" data-task title="What is 5 \+ 9\?\nAnswer inside &lt;answer&gt;&lt;/answer&gt;\.'
            r'\n\ntask add-5-9(-3f2a)?">What is 5 \+ 9\?</span> <span class="task-answer muted small" data-task-answer>'
            r"expected <strong>14</strong></span>",
            html,
        ), name
    group = dave.get(pages["group"]).content.decode()
    assert 'correct <span class="muted small">weighted</span></th>' in group
