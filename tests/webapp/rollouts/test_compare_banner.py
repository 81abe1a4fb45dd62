"""The trajectory-compare page names its task(s) as every page does — the prompt's first line, escaped —
not by the task's hash id (that stays on hover)."""

from __future__ import annotations

import re

from django.urls import reverse

from tests.webapp.factories import make_trajectory, turn

HASH = "5c1d0f9e2b7a4c3d"


def banner(html: str) -> str:
    found = re.search(r"<p class=\"small\" data-compare-task>(.*?)</p>", html, re.S).group(1)
    return re.sub(r"<[^>]+>", "", found)


def test_the_compare_banner_names_tasks_by_their_text(client_for, project, run):
    def of_task(step: int, task: str, prompt: str):
        return make_trajectory(
            run, step=step, task_id=task, prompt=prompt, turns=[turn("user", prompt), turn("assistant", "42")]
        )

    same = [of_task(step, HASH, "What is 6 × 7?\nAnswer with a number.") for step in (1, 2)]
    other = of_task(3, "a9b8c7d6e5f4", "<b>Name</b> a prime")
    client = client_for("dave")
    url = reverse("rollouts:compare_trajectories", args=[project.slug])

    one = client.get(url, {"id": [t.pk for t in same]}).content.decode()
    assert banner(one).strip() == "Task What is 6 × 7?"

    two = client.get(url, {"id": [same[0].pk, other.pk]}).content.decode()
    text = banner(two)
    assert "What is 6 × 7?" in text and "&lt;b&gt;Name&lt;/b&gt; a prime" in text
    assert HASH not in text and "<b>Name</b>" not in two
