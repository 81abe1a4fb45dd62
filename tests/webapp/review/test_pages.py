"""Review pages through HTTP: who may open and post what, the collaboration panel, queues, annotation,
downloads, and model output rendered inert everywhere.

alice owns the project, bob researches, carol annotates, dave views, eve is an outsider.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from django.urls import URLPattern, reverse

from tests.webapp.html_forms import flat, form_data
from tests.webapp.review_factories import make_group, make_trajectory
from webapp.experiments.services import rubric_create
from webapp.projects.models import ROLE_CAPABILITIES
from webapp.review import exports, services
from webapp.review.models import (
    Activity,
    Adjudication,
    Comment,
    Flag,
    Judgement,
    Notification,
    PreferenceQueue,
    PreferenceSnapshot,
    QueueJudge,
    TrajectoryTag,
    TurnJudgement,
)

JUDGE_RUBRIC = {
    "aggregation": "weighted_sum",
    "criteria": [{"name": "tone", "kind": "llm_judge", "weight": 1.0, "params": {"model": "smollm2-135m"}}],
}

PEOPLE = [None, "alice", "bob", "carol", "dave", "eve"]
ROLE_OF = {"alice": "owner", "bob": "researcher", "carol": "annotator", "dave": "viewer"}


@dataclass(frozen=True)
class Page:
    label: str
    method: str
    needs: str  # "signed_in" or a project capability
    route: str
    args: tuple[str, ...] = ()
    data: Callable[[dict], dict] = lambda w: {}
    ok: int = 200

    def url(self, world: dict) -> str:
        args = [world[name].pk for name in self.args]
        if self.route.startswith("review:"):
            args.insert(0, world["project"].slug)
        return reverse(self.route, args=args)


def new_queue(w: dict) -> dict:
    return {
        "name": "fresh",
        "runs": [w["run"].pk],
        "source": "group",
        "pairing": "all",
        "split": "train",
        "max_pairs": "100",
        "annotators": [w["carol"].pk],
        "overlap": "1",
        "lock_minutes": "10",
    }


PAGES = [
    Page("collaboration panel", "get", "read", "review:collaboration_panel", ("trajectory",)),
    Page(
        "add comment",
        "post",
        "annotate",
        "review:comment_create",
        ("trajectory",),
        data=lambda w: {"body": "hi @bob"},
        ok=302,
    ),
    Page(
        "edit comment",
        "post",
        "annotate",
        "review:comment_edit",
        ("comment",),
        data=lambda w: {"body": "edited"},
        ok=302,
    ),
    Page("delete comment", "post", "annotate", "review:comment_delete", ("comment",), ok=302),
    Page(
        "reply to a comment",
        "post",
        "annotate",
        "review:comment_create",
        ("trajectory",),
        data=lambda w: {"body": "agreed", "reply_to": w["comment"].pk},
        ok=302,
    ),
    Page("resolve a thread", "post", "annotate", "review:thread_resolve", ("comment",), ok=302),
    Page("thread beside a turn", "get", "read", "review:turn_discussion", ("trajectory", "turn")),
    Page(
        "add tag",
        "post",
        "annotate",
        "review:tag_add",
        ("trajectory",),
        data=lambda w: {"name": "odd"},
        ok=302,
    ),
    Page("remove tag", "post", "annotate", "review:tag_remove", ("trajectory", "tag"), ok=302),
    Page(
        "raise flag",
        "post",
        "annotate",
        "review:flag_raise",
        ("trajectory",),
        data=lambda w: {"reason": "env_bug"},
        ok=302,
    ),
    Page("resolve flag", "post", "annotate", "review:flag_resolve", ("flag",), ok=302),
    Page(
        "mark a turn",
        "post",
        "annotate",
        "review:turn_judge",
        ("trajectory",),
        data=lambda w: {"verdict": "wrong", "turn_index": "2"},
        ok=302,
    ),
    Page("activity", "get", "read", "review:activity"),
    Page("notifications", "get", "signed_in", "notifications:list"),
    Page("mark notifications read", "post", "signed_in", "notifications:list", ok=302),
    Page("open notification", "get", "own_notification", "notifications:open", ("notification",), ok=302),
    Page("queue list", "get", "annotate", "review:queue_list"),
    Page("new queue form", "get", "launch", "review:queue_create"),
    Page("create queue", "post", "launch", "review:queue_create", data=new_queue, ok=302),
    Page("queue detail", "get", "annotate", "review:queue_detail", ("queue",)),
    Page(
        "change annotators",
        "post",
        "launch",
        "review:queue_annotators",
        ("queue",),
        data=lambda w: {"annotators": [w["carol"].pk]},
        ok=302,
    ),
    Page("judges panel", "get", "launch", "review:queue_judges", ("queue",)),
    Page(
        "ask a judge",
        "post",
        "launch",
        "review:queue_judge_start",
        ("queue",),
        data=lambda w: {"criterion": w["criterion_key"], "worker_queue": "cpu"},
        ok=302,
    ),
    Page(
        "judge votes in snapshots",
        "post",
        "launch",
        "review:queue_judge_snapshots",
        ("queue", "judge"),
        data=lambda w: {"in_snapshots": "on"},
        ok=302,
    ),
    Page("cancel a judge", "post", "launch", "review:queue_judge_cancel", ("queue", "judge"), ok=302),
    # Only the queue's assigned annotators (carol) judge: the owner and the researcher are refused too.
    Page("annotate", "get", "assigned", "review:annotate", ("queue",)),
    Page(
        "pair", "get", "assigned", "review:pair", ("queue", "pair"), ok=302
    ),  # nobody here holds it: sent to annotate
    Page(
        "judge",
        "post",
        "assigned",
        "review:judge",
        ("queue", "pair"),
        data=lambda w: {"choice": "left"},
        ok=302,
    ),
    Page("disagreements", "get", "adjudicate", "review:disagreements", ("queue",)),
    Page(
        "settle a disagreement",
        "post",
        "adjudicate",
        "review:adjudicate",
        ("queue", "pair"),
        data=lambda w: {"choice": "a"},
        ok=302,
    ),
    Page("create snapshot", "post", "launch", "review:snapshot_create", ("queue",), ok=302),
    Page("download DPO JSONL", "get", "launch", "review:snapshot_dpo", ("snapshot",)),
    Page("download parquet", "get", "launch", "review:snapshot_parquet", ("snapshot",)),
    Page("download dpo text", "get", "launch", "review:snapshot_dpo_text", ("snapshot",)),
    Page("train with dpo", "post", "launch", "review:snapshot_dpo_run", ("snapshot",), ok=302),
]


def expected_status(page: Page, person: str | None) -> int | str:
    if person is None:
        return "sign-in redirect"
    if page.needs == "signed_in":
        return page.ok
    if page.needs == "own_notification":
        return page.ok if person == "bob" else 404
    if person not in ROLE_OF:
        return 404
    if page.needs == "assigned":
        return page.ok if person == "carol" else 403
    return page.ok if page.needs in ROLE_CAPABILITIES[ROLE_OF[person]] else 403


def everything_stored() -> dict[str, Any]:
    return {
        "comments": sorted(Comment.objects.values_list("pk", "body", "deleted_at")),
        "tags": sorted(TrajectoryTag.objects.values_list("trajectory_id", "tag__name")),
        "flags": sorted(Flag.objects.values_list("pk", "resolved_at")),
        "queues": PreferenceQueue.objects.count(),
        "judgements": Judgement.objects.count(),
        "snapshots": PreferenceSnapshot.objects.count(),
        "notifications": sorted(Notification.objects.values_list("pk", "read_at")),
        "activity": Activity.objects.count(),
        "turn_judgements": TurnJudgement.objects.count(),
        "judges": sorted(QueueJudge.objects.values_list("pk", "status", "in_snapshots")),
        "adjudications": sorted(Adjudication.objects.values_list("pair_id", "choice")),
    }


@pytest.fixture
def world(project, run, users):
    trajectory = make_trajectory(run, reward=1.0)
    make_group(run, group=1, rewards=[1.0, 0.0])
    comment = services.comment_create(trajectory=trajectory, author=users["carol"], body="look @bob")
    link = services.tag_add(trajectory=trajectory, user=users["carol"], name="suspicious")
    flag = services.flag_raise(trajectory=trajectory, user=users["carol"], reason="reward_wrong")
    queue = services.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]]
    )
    judged = rubric_create(project=project, name="judged", spec=JUDGE_RUBRIC, user=users["alice"])
    version = judged.latest_version
    judge = services.queue_judge_start(
        queue=queue, user=users["bob"], rubric_version=version, criterion_name="tone", dispatch=False
    )
    services.queue_judge_fail(judge.pk, error="the model is gone")  # so asking it again is allowed
    return {
        "judge": judge,
        "criterion_key": f"{version.pk}:tone",
        "project": project,
        "run": run,
        "trajectory": trajectory,
        "comment": comment,
        "turn": SimpleNamespace(pk=2),  # the url names a turn by its index
        "tag": link.tag,
        "flag": flag,
        "queue": queue,
        "pair": queue.pairs.first(),
        "snapshot": services.snapshot_create(queue, users["bob"]),
        "notification": Notification.objects.get(recipient=users["bob"]),
        "carol": users["carol"],
    }


@pytest.mark.parametrize("person", PEOPLE, ids=lambda p: p or "anonymous")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.label.replace(" ", "-"))
def test_each_person_sees_and_does_only_what_their_role_allows(client, users, world, page, person):
    if person is not None:
        client.force_login(users[person])
    before = everything_stored()
    response = getattr(client, page.method)(page.url(world), page.data(world))
    expected = expected_status(page, person)
    if expected == "sign-in redirect":
        assert response.status_code == 302 and response.url.startswith(reverse("accounts:login"))
    else:
        assert response.status_code == expected, response.content[:500]
    if expected in (403, 404, "sign-in redirect") and page.method == "post":
        assert everything_stored() == before


def test_the_table_covers_every_review_page():
    from webapp.review import urls, urls_notifications

    # The explorer's pages (included from urls_explorer) have their own role tests: test_explorer_pages.py.
    routes = {
        f"{module.app_name}:{p.name}"
        for module in (urls, urls_notifications)
        for p in module.urlpatterns
        if isinstance(p, URLPattern)
    }
    assert {page.route for page in PAGES} == routes


# --- collaboration ---------------------------------------------------------------------------------


def test_the_trajectory_page_shows_the_panel_and_htmx_writes_return_it(client_for, users, run, project):
    trajectory = make_trajectory(run)
    services.comment_create(trajectory=trajectory, author=users["bob"], body="an earlier remark")
    page = (
        client_for("carol")
        .get(reverse("rollouts:trajectory_detail", args=[project.slug, trajectory.pk]))
        .content.decode()
    )
    assert 'id="collaboration"' in page and 'id="comment-form"' in page and "an earlier remark" in page
    client = client_for("carol")
    url = reverse("review:comment_create", args=[project.slug, trajectory.pk])
    response = client.post(url, {"body": "@bob is this right?", "turn_index": "2"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    assert "is this right?" in html and "on turn #2" in html and 'id="comment-form"' in html
    assert Notification.objects.get().recipient == users["bob"]
    empty = client.post(url, {"body": ""}, HTTP_HX_REQUEST="true")
    assert empty.status_code == 200 and "errorlist" in empty.content.decode()
    tagged = client.post(
        reverse("review:tag_add", args=[project.slug, trajectory.pk]),
        {"name": "x" * 60},
        HTTP_HX_REQUEST="true",
    )
    assert 'role="alert"' in tagged.content.decode() and not TrajectoryTag.objects.exists()


def test_viewers_read_the_discussion_but_get_no_forms(client_for, users, run, project):
    trajectory = make_trajectory(run)
    services.comment_create(trajectory=trajectory, author=users["carol"], body="visible to all members")
    html = (
        client_for("dave")
        .get(reverse("review:collaboration_panel", args=[project.slug, trajectory.pk]))
        .content.decode()
    )
    assert "visible to all members" in html and 'id="comment-form"' not in html and "Viewers read" in html


def test_mentions_show_in_the_header_and_open_the_comment(client_for, users, run, project):
    trajectory = make_trajectory(run)
    comment = services.comment_create(trajectory=trajectory, author=users["carol"], body="@bob please check")
    client = client_for("bob")
    home = client.get(reverse("projects:home", args=[project.slug])).content.decode()
    assert 'data-unread="1"' in home
    assert "Recent activity" in home and "commented on" in home
    listing = client.get(reverse("notifications:list")).content.decode()
    assert "carol" in listing and "please check" in listing
    opened = client.get(reverse("notifications:open", args=[Notification.objects.get().pk]))
    assert opened.url.endswith(f"/trajectories/{trajectory.pk}/#comment-{comment.pk}")
    assert 'data-unread="0"' in client.get(reverse("projects:home", args=[project.slug])).content.decode()


# --- queues and annotation ---------------------------------------------------------------------------


def test_a_researcher_builds_a_queue_with_the_form(client_for, users, run, project):
    make_group(run, group=0, rewards=[1.0, 0.0, 0.5])
    make_trajectory(run, step=3, split="eval", task_id="e1")
    client = client_for("bob")
    form = flat(
        form_data(client.get(reverse("review:queue_create", args=[project.slug])).content, "queue-form")
    )
    form.update(
        {
            "name": "siblings",
            "runs": str(run.pk),
            "annotators": [str(users["carol"].pk), str(users["bob"].pk)],
            "pairing": "best_worst",
            "overlap": "2",
            "rationale_required": "on",
            "instructions": "Prefer correct sums.",
        }
    )
    response = client.post(reverse("review:queue_create", args=[project.slug]), form)
    assert response.status_code == 302, response.content.decode()[:3000]
    queue = PreferenceQueue.objects.get()
    assert (queue.pairs.count(), queue.overlap, queue.rationale_required, queue.lock_seconds) == (
        1,
        2,
        True,
        600,
    )
    detail = client.get(response.url).content.decode()
    assert "Prefer correct sums." in detail and "Agreement" in detail and "Create dataset snapshot" in detail


def test_the_queue_form_shows_service_errors_next_to_fields(client_for, users, run, project):
    make_trajectory(run)  # a group of one: no pairs
    client = client_for("bob")
    form = flat(
        form_data(client.get(reverse("review:queue_create", args=[project.slug])).content, "queue-form")
    )
    form.update({"name": "lonely", "runs": str(run.pk), "annotators": str(users["carol"].pk), "steps": "1-x"})
    html = client.post(reverse("review:queue_create", args=[project.slug]), form).content.decode()
    assert "is not a step or a range" in html
    form["steps"] = ""
    html = client.post(reverse("review:queue_create", args=[project.slug]), form).content.decode()
    assert "give no pairs" in html and not PreferenceQueue.objects.exists()


def test_annotators_see_only_their_queues_and_no_agreement_or_exports(client_for, users, run, project):
    make_group(run, rewards=[1.0, 0.0])
    theirs = services.queue_create(
        project=project, user=users["bob"], name="for bob", runs=[run], annotators=[users["bob"]]
    )
    mine = services.queue_create(
        project=project, user=users["bob"], name="for carol", runs=[run], annotators=[users["carol"]]
    )
    client = client_for("carol")
    listing = client.get(reverse("review:queue_list", args=[project.slug])).content.decode()
    assert "for carol" in listing and "for bob" not in listing
    assert client.get(reverse("review:queue_detail", args=[project.slug, theirs.pk])).status_code == 404
    assert client.get(reverse("review:annotate", args=[project.slug, theirs.pk])).status_code == 404
    detail = client.get(reverse("review:queue_detail", args=[project.slug, mine.pk])).content.decode()
    assert "Progress" in detail and "Agreement" not in detail and "snapshot" not in detail


def test_annotating_through_http_resumes_and_records_canonical_choices(client_for, users, run, project):
    for group in range(3):
        make_group(run, group=group, rewards=[1.0, 0.0])
    queue = services.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]]
    )
    client = client_for("carol")
    annotate_url = reverse("review:annotate", args=[project.slug, queue.pk])
    first = client.get(annotate_url).content.decode()
    again = client.get(annotate_url).content.decode()
    action = form_action(first)
    assert form_action(again) == action  # resume: the same pair, the same layout
    left_answer = section_text(first, "left")
    assert section_text(again, "left") == left_answer
    response = client.post(action, {"choice": "left", "rationale": "the left sum is right"})
    assert response.status_code == 302 and response.url == annotate_url
    judgement = Judgement.objects.get()
    chosen = judgement.pair.a if judgement.choice == "a" else judgement.pair.b
    assert f"<answer>{chosen.turns.last().text[8:-9]}</answer>" in left_answer.replace("&lt;", "<").replace(
        "&gt;", ">"
    )
    # ← leads back to the judged pair, shown with its choice, which can be changed
    second = client.get(annotate_url).content.decode()
    pair_url = reverse("review:pair", args=[project.slug, queue.pk, judgement.pair_id])
    assert f'data-prev-url="{pair_url}"' in second
    revisit = client.get(pair_url).content.decode()
    assert 'value="left" checked' in revisit and "the left sum is right" in revisit
    client.post(form_action(revisit), {"choice": "tie", "rationale": "on second thought"})
    assert Judgement.objects.get().choice == "tie"


def test_researchers_reassign_a_queue(client_for, users, run, project):
    make_group(run, rewards=[1.0, 0.0])
    queue = services.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]]
    )
    client = client_for("bob")
    url = reverse("review:queue_annotators", args=[project.slug, queue.pk])
    client.post(url, {"annotators": [users["bob"].pk, users["alice"].pk]})
    assert sorted(queue.annotators.values_list("username", flat=True)) == ["alice", "bob"]
    assert (
        client_for("carol").get(reverse("review:queue_detail", args=[project.slug, queue.pk])).status_code
        == 404
    )
    client = client_for("bob")
    client.post(url, {"annotators": [users["dave"].pk]})  # a viewer is not offered, so not accepted
    assert sorted(queue.annotators.values_list("username", flat=True)) == ["alice", "bob"]


def test_the_queue_page_compares_humans_with_the_llm_judge(client_for, users, run, project):
    def judged(group, sample, score):
        component = {"name": "helpful", "kind": "llm_judge", "raw": score, "weight": 1.0, "weighted": score}
        return make_trajectory(
            run, group=group, sample=sample, reward=score, components=[component], answer=f"{group}.{sample}"
        )

    for group, (left, right) in enumerate([(0.9, 0.1), (0.2, 0.8), (0.3, 0.6)]):
        judged(group, 0, left)
        judged(group, 1, right)
    queue = services.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]]
    )
    while (assignment := services.next_pair(queue=queue, annotator=users["carol"])) is not None:
        services.judgement_submit(
            pair=assignment.pair, annotator=users["carol"], choice="a"
        )  # agrees on group 0 only
    html = (
        client_for("bob").get(reverse("review:queue_detail", args=[project.slug, queue.pk])).content.decode()
    )
    assert "human vs LLM judge" in html
    assert "<strong>33%</strong>" in html and "3 pairs, helpful" in html


def test_the_queue_page_makes_as_many_queries_for_many_judgements(client_for, users, run, project):
    """The agreement section reads judgements and the pairs' components as columns, a fixed number of
    queries: a year's queue of a thousand pairs had loaded both whole trajectories of each as models
    (docs/scale.md, "A team's year")."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for group in range(6):
        for sample, score in enumerate((0.9, 0.1)):
            judged = {"name": "helpful", "kind": "llm_judge", "raw": score, "weight": 1.0, "weighted": score}
            answer = f"{group}.{sample}"
            make_trajectory(run, group=group, sample=sample, reward=score, components=[judged], answer=answer)
    annotators = [users["carol"], users["alice"]]
    queue = services.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=annotators, overlap=2
    )
    client = client_for("bob")
    url = reverse("review:queue_detail", args=[project.slug, queue.pk])

    def judge(annotator, count: int) -> None:
        for _ in range(count):
            assignment = services.next_pair(queue=queue, annotator=annotator)
            services.judgement_submit(pair=assignment.pair, annotator=annotator, choice="a")

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url).status_code == 200
        # The pairs' trajectories are read for their components only, never as whole rows.
        assert not [q for q in captured.captured_queries if '"rollouts_trajectory"."prompt"' in q["sql"]]
        return len(captured)

    judge(users["carol"], 1)
    few = queries()
    judge(users["carol"], 5)
    judge(users["alice"], 6)
    assert Judgement.objects.filter(pair__queue=queue).count() == 12
    assert queries() == few


def test_a_missing_rationale_is_refused_with_the_form_kept(client_for, users, run, project):
    make_group(run, rewards=[1.0, 0.0])
    queue = services.queue_create(
        project=project,
        user=users["bob"],
        name="q",
        runs=[run],
        annotators=[users["carol"]],
        rationale_required=True,
    )
    client = client_for("carol")
    action = form_action(
        client.get(reverse("review:annotate", args=[project.slug, queue.pk])).content.decode()
    )
    response = client.post(action, {"choice": "right", "rationale": ""})
    assert response.status_code == 422
    assert 'value="right" checked' in response.content.decode() and not Judgement.objects.exists()


def test_downloads_round_trip(client_for, users, run, project):
    make_group(run, rewards=[1.0, 0.0])
    queue = services.queue_create(
        project=project, user=users["bob"], name="arith prefs", runs=[run], annotators=[users["carol"]]
    )
    assignment = services.next_pair(queue=queue, annotator=users["carol"])
    services.judgement_submit(pair=assignment.pair, annotator=users["carol"], choice="b")
    client = client_for("bob")
    response = client.post(reverse("review:snapshot_create", args=[project.slug, queue.pk]))
    snapshot = PreferenceSnapshot.objects.get()
    assert response.status_code == 302
    jsonl = client.get(reverse("review:snapshot_dpo", args=[project.slug, snapshot.pk]))
    assert jsonl["Content-Disposition"] == 'attachment; filename="arith-prefs-v1.dpo.jsonl"'
    records = exports.read_dpo_jsonl(jsonl.content)
    assert [(r["prompt"], r["chosen"], r["rejected"]) for r in records] == [
        (p["prompt_messages"], p["chosen_messages"], p["rejected_messages"])
        for p in services.snapshot_pairs(snapshot)
    ]
    text = client.get(reverse("review:snapshot_dpo_text", args=[project.slug, snapshot.pk]))
    assert text["Content-Disposition"] == 'attachment; filename="arith-prefs-v1.dpo-text.jsonl"'
    texts = exports.read_dpo_jsonl(text.content)
    parquet = client.get(reverse("review:snapshot_parquet", args=[project.slug, snapshot.pk]))
    rows, provenance = exports.read_parquet(parquet.content)
    assert rows[0]["chosen"] == texts[0]["chosen"] and provenance["version"] == 1


def test_each_snapshot_links_to_training_a_reward_model_on_it(client_for, users, run, project):
    make_group(run, rewards=[1.0, 0.0])
    queue = services.queue_create(
        project=project, user=users["bob"], name="arith prefs", runs=[run], annotators=[users["carol"]]
    )
    snapshot = services.snapshot_create(queue, users["bob"])
    client = client_for("bob")
    detail = client.get(reverse("review:queue_detail", args=[project.slug, queue.pk])).content.decode()
    train_url = f"{reverse('rewards:reward_model_create', args=[project.slug])}?snapshot={snapshot.pk}"
    assert f'href="{train_url}"' in detail
    form = client.get(train_url).content.decode()
    assert f'<option value="{snapshot.pk}" selected>' in form


# --- model output is inert everywhere ----------------------------------------------------------------

EVIL = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[x](javascript:alert(1))"]


def test_model_output_and_comments_render_inert(client_for, users, run, project):
    evil = " ".join(EVIL)
    trajectories = [
        make_trajectory(run, group=0, sample=i, reward=float(i), answer=f"{evil} {i}", prompt=evil)
        for i in range(2)
    ]
    services.comment_create(trajectory=trajectories[0], author=users["carol"], body=f"@bob {evil}")
    services.tag_add(trajectory=trajectories[0], user=users["carol"], name="<img src=x onerror=alert(1)>")
    services.flag_raise(trajectory=trajectories[0], user=users["carol"], reason="unsafe", note=evil)
    queue = services.queue_create(
        project=project,
        user=users["bob"],
        name="<script>alert(1)</script>",
        runs=[run],
        annotators=[users["carol"], users["bob"]],
        instructions=evil,
    )
    pages = {
        "panel": ("carol", reverse("review:collaboration_panel", args=[project.slug, trajectories[0].pk])),
        "activity": ("dave", reverse("review:activity", args=[project.slug])),
        "home": ("dave", reverse("projects:home", args=[project.slug])),
        "notifications": ("bob", reverse("notifications:list")),
        "queues": ("bob", reverse("review:queue_list", args=[project.slug])),
        "queue": ("bob", reverse("review:queue_detail", args=[project.slug, queue.pk])),
        "annotate": ("carol", reverse("review:annotate", args=[project.slug, queue.pk])),
    }
    for name, (person, url) in pages.items():
        html = client_for(person).get(url).content.decode()
        assert "<script>alert(1)" not in html, name
        assert "<img src=x" not in html, name
        assert 'href="javascript:' not in html, name
    annotate_html = client_for("carol").get(pages["annotate"][1]).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in annotate_html
    assert "[x](javascript:alert(1))" in annotate_html  # shown as text, never turned into a link


def form_action(html: str) -> str:
    start = html.index('id="judgement-form" action="') + len('id="judgement-form" action="')
    return html[start : html.index('"', start)]


def section_text(html: str, side: str) -> str:
    start = html.index(f'data-side="{side}"')
    return html[start : html.index("</section>", start)]


def test_the_queue_form_skips_equal_rewards_unless_unticked(client_for, project):
    html = client_for("bob").get(reverse("review:queue_create", args=[project.slug])).content.decode()
    box = (
        html.split('name="distinct_rewards"')[0].rsplit("<input", 1)[1]
        + html.split('name="distinct_rewards"')[1].split(">")[0]
    )
    assert "checked" in box and "identical are never offered" in html
