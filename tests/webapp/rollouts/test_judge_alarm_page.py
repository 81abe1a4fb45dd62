"""A judge reward that stays at its maximum while held-out accuracy falls (the collapse bench/learning.py
--judge measured), reported as the trainer reports it: the run page raises the alarm at that evaluation,
links the trajectories the judge liked that the environment's verifier says are wrong, and the
trajectory page shows the verdict."""

from __future__ import annotations

import json

from django.urls import reverse

from webapp.experiments.models import Run
from webapp.rollouts.models import Trajectory

JUDGE_RUBRIC = [
    {"name": "judge", "kind": "llm_judge", "weight": 1.0, "params": {"model": "smollm2-135m"}},
    {"name": "format", "kind": "format", "weight": 0.1, "params": {}},
]


def answer(sample: int, *, said: str, correct: bool) -> dict:
    return {
        "group": sample,
        "sample": 0,
        "task_id": f"sum-{sample}",
        "split": "eval",
        "prompt": "What is 3 + 5?",
        "reward": 1.1,
        "correct": correct,
        "answer": "8",
        "components": [
            {"name": "judge", "kind": "llm_judge", "raw": 1.0, "weight": 1.0, "weighted": 1.0},
            {"name": "format", "kind": "format", "raw": 1.0, "weight": 0.1, "weighted": 0.1},
        ],
        "turns": [
            {"role": "user", "text": "What is 3 + 5?"},
            {"role": "assistant", "text": f"<answer>{said}</answer>"},
        ],
    }


def post(client, run, token, events):
    response = client.post(
        f"/api/runs/{run.pk}/events",
        data=json.dumps({"events": events}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.content


def test_the_run_page_raises_the_alarm_with_the_trajectories_that_show_it(
    client, client_for, project, environment, rubric, users
):
    from webapp.experiments.services import run_create

    run, token = run_create(
        project=project,
        name="judged",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    Run.objects.filter(pk=run.pk).update(
        status="RUNNING", resolved_config={**run.resolved_config, "rubric": {"criteria": JUDGE_RUBRIC}}
    )
    url = reverse("experiments:run_detail", args=[project.slug, run.pk])
    events = [{"seq": 1, "type": "metrics", "step": 0, "split": "eval", "values": {"eval/accuracy": 0.51}}]
    events += [
        {
            "seq": 1 + step,
            "type": "metrics",
            "step": step,
            "values": {"reward/mean": 1.1, "criterion/judge": 1.0, "criterion/format": 1.0, "accuracy": 0.5},
        }
        for step in range(1, 11)
    ]
    post(client, run, token, events)
    assert "Possible reward hacking" in client_for("bob").get(url).content.decode()  # rendered, hidden
    assert banner(client_for("bob").get(url).content.decode()) == "hidden"  # one evaluation: nothing yet

    # The evaluation at step 10: the judge still scores 10, the verifier says most answers are wrong.
    post(
        client,
        run,
        token,
        [
            {
                "seq": 12,
                "type": "trajectories",
                "step": 10,
                "items": [answer(0, said="8", correct=True), answer(1, said="35", correct=False)],
            },
            {"seq": 13, "type": "metrics", "step": 10, "split": "eval", "values": {"eval/accuracy": 0.25}},
        ],
    )
    wrong = Trajectory.objects.get(run=run, correct=False)
    assert Trajectory.objects.get(run=run, correct=True).hacking_flag() is None
    page = client_for("bob").get(url).content.decode()
    assert banner(page) == "shown"
    assert (
        "the judge&#x27;s reward (judge) stayed high (1.00) while held-out accuracy fell from 51% to 25%"
        in page
    )
    links = page[page.index("data-alarm-example-links") :].split("</span>", 1)[0]
    assert links.count("data-alarm-example>") == 1
    assert reverse("rollouts:trajectory_detail", args=[project.slug, wrong.pk]) in links

    trajectory_page = (
        client_for("bob")
        .get(reverse("rollouts:trajectory_detail", args=[project.slug, wrong.pk]))
        .content.decode()
    )
    assert "data-verifier-verdict" in trajectory_page and "<strong>wrong</strong>" in trajectory_page
    assert "possible reward hacking" in trajectory_page


def banner(page: str) -> str:
    tag = page[page.index('<div class="alarm-banner"') :]
    tag = tag[: tag.index(">")]
    return "hidden" if " hidden" in tag else "shown"
