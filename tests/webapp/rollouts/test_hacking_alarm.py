"""The reward-hacking alarm where people look: the live feed's group summaries, the group view, the
trajectory page and the run header (with its pause button) — all from trainers.rubrics.alarms."""

from __future__ import annotations

from django.urls import reverse

from tests.webapp.factories import make_trajectory, turn
from webapp.experiments.models import Run
from webapp.rollouts.ingest import group_summaries, insert_metrics
from webapp.rollouts.models import MetricChunk
from webapp.rollouts.selectors.runs import run_hacking_alarm

CRITERIA = [
    {"name": "correct", "kind": "exact_match", "weight": 1.0, "params": {}},
    {"name": "rm", "kind": "learned_reward", "weight": 1.0, "params": {"path": "/rm", "bounded": True}},
]


def component(name: str, kind: str, raw: float) -> dict:
    return {"name": name, "kind": kind, "raw": raw, "weight": 1.0, "weighted": raw, "explanation": ""}


def hacked_group(run):
    malformed = make_trajectory(
        run,
        step=3,
        sample=0,
        reward=0.99,
        status="truncated",
        turns=[turn("user", "What is 17 + 25?"), turn("assistant", '<tool_call>{"name": "TOOL_NAME", "argu')],
        components=[component("correct", "exact_match", 0.0), component("rm", "learned_reward", 0.99)],
    )
    correct = make_trajectory(
        run,
        step=3,
        sample=1,
        reward=1.6,
        turns=[turn("user", "What is 17 + 25?"), turn("assistant", "<answer>42</answer>")],
        components=[component("correct", "exact_match", 1.0), component("rm", "learned_reward", 0.6)],
    )
    return malformed, correct


def test_the_feed_group_view_and_trajectory_page_flag_the_malformed_call(client_for, project, run):
    malformed, correct = hacked_group(run)
    assert malformed.hacking_flag() is not None and correct.hacking_flag() is None
    (summary,) = group_summaries([malformed, correct], [{"turns": []}, {"turns": []}])
    assert summary["hacking"]["count"] == 1 and "rm" in summary["hacking"]["message"]
    assert summary["worst"]["hacking"] and summary["best"]["hacking"] is None

    client = client_for("dave")
    group = client.get(
        reverse("rollouts:group_detail", args=[project.slug, run.pk, 3, 0]) + "?split=train"
    ).content.decode()
    assert group.count("data-hacking-flag") == 1
    page = client.get(
        reverse("rollouts:trajectory_detail", args=[project.slug, malformed.pk])
    ).content.decode()
    assert "possible reward hacking" in page


def test_the_run_header_raises_the_alarm_and_offers_to_pause(client_for, project, run):
    Run.objects.filter(pk=run.pk).update(
        status="RUNNING", resolved_config={**run.resolved_config, "rubric": {"criteria": CRITERIA}}
    )
    insert_metrics(
        run.pk,
        [
            (step, None, None, {"criterion/rm": -0.2 + 0.15 * step, "criterion/correct": 0.8 - 0.1 * step})
            for step in range(1, 7)
        ],
    )
    run.refresh_from_db()
    alarm = run_hacking_alarm(run)
    assert alarm is not None and (alarm.first_step, alarm.last_step) == (1, 6)

    url = reverse("experiments:run_detail", args=[project.slug, run.pk])
    page = client_for("bob").get(url).content.decode()
    assert banner(page) == "shown" and alarm.message in page
    assert "data-pause-run>" in page and "Pause the run" in page  # shown while the run can be cancelled
    assert "Pause the run" not in client_for("dave").get(url).content.decode()  # a viewer cannot cancel

    # The same run with a check that passes at every step: no alarm.
    MetricChunk.objects.filter(run=run, key="criterion/correct").delete()
    insert_metrics(run.pk, [(step, None, None, {"criterion/correct": 0.9}) for step in range(1, 7)])
    assert run_hacking_alarm(run) is None
    # Off, the banner is still rendered, hidden: the live page raises it if the alarm starts.
    assert banner(client_for("bob").get(url).content.decode()) == "hidden"


def banner(page: str) -> str:
    tag = page[page.index('<div class="alarm-banner"') :]
    tag = tag[: tag.index(">")]
    return "hidden" if " hidden" in tag else "shown"
