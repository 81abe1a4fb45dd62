"""Review through the JSON API: comments and tags on trajectories, preference queues, dataset snapshots
and their exports — what the review pages do, for scripts.

alice owns the project, bob researches, carol annotates, dave views, eve is an outsider.
"""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from tests.webapp.review_factories import make_group, make_trajectory
from webapp.accounts.services import api_token_create
from webapp.review import exports, services
from webapp.review.models import Activity, Comment, Notification, PreferenceSnapshot, Tag, TrajectoryTag


def review_activity():
    """The review's own activities (the fixtures' launches and new versions are recorded too)."""
    return Activity.objects.exclude(verb__regex=r"^(run|environment|rubric|reward_model)\.")


@pytest.fixture
def token_client(users):
    """A script of `name`, authenticated with a personal API token rather than a session."""

    def make(name: str) -> APIClient:
        _token, raw = api_token_create(user=users[name], name="script")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    return make


def send(client: APIClient, method: str, url: str, body=None):
    return client.generic(
        method, url, json.dumps(body) if body is not None else None, content_type="application/json"
    )


@pytest.fixture
def trajectory(run):
    return make_trajectory(run, reward=1.0)


def judge_all(queue, annotator, choose):
    while (assignment := services.next_pair(queue=queue, annotator=annotator)) is not None:
        services.judgement_submit(pair=assignment.pair, annotator=annotator, choice=choose(assignment.pair))


@pytest.fixture
def queue(run, users, project):
    """Two groups of siblings, two pairs, both judged by carol and bob (they agree on group 0 only)."""
    make_group(run, group=0, rewards=[1.0, 0.0])
    make_group(run, group=1, rewards=[0.2, 0.9])
    queue = services.queue_create(
        project=project,
        user=users["bob"],
        name="Which answer is better?",
        runs=[run],
        annotators=[users["carol"], users["bob"]],
        overlap=2,
        seed=3,
    )
    judge_all(queue, users["carol"], lambda pair: "a")
    judge_all(queue, users["bob"], lambda pair: "a" if pair.a.group_index == 0 else "b")
    return queue


# --- comments -----------------------------------------------------------------------------------------


def test_carol_comments_on_a_turn_and_the_mention_notifies_bob(signed_in, trajectory, users):
    url = f"/api/trajectories/{trajectory.pk}/comments/"
    created = send(
        signed_in("carol"), "POST", url, {"body": "@bob the reward looks off here", "turn_index": 2}
    )

    assert created.status_code == 201, created.content
    body = created.json()
    assert body["author"] == "carol" and body["turn_index"] == 2 and body["trajectory"] == trajectory.pk
    assert body["body"] == "@bob the reward looks off here"
    assert body["created_at"] and body["edited_at"] is None and body["deleted"] is False
    assert [n.recipient.username for n in Notification.objects.all()] == ["bob"]
    assert review_activity().filter(verb="comment.added", actor=users["carol"]).count() == 1

    listed = signed_in("dave").get(url).json()  # viewers read
    assert listed["count"] == 1
    assert [(c["author"], c["turn_index"], c["body"]) for c in listed["results"]] == [
        ("carol", 2, "@bob the reward looks off here")
    ]


def test_a_comment_on_the_whole_trajectory_has_no_turn(signed_in, trajectory):
    created = send(signed_in("bob"), "POST", f"/api/trajectories/{trajectory.pk}/comments/", {"body": "fine"})
    assert created.status_code == 201
    assert created.json()["turn_index"] is None


def test_viewers_read_comments_but_cannot_write_them(signed_in, trajectory):
    url = f"/api/trajectories/{trajectory.pk}/comments/"
    refused = send(signed_in("dave"), "POST", url, {"body": "me too"})
    assert refused.status_code == 403
    assert refused.json()["error"] == "forbidden"
    assert signed_in("dave").get(url).status_code == 200
    assert not Comment.objects.exists() and not review_activity().exists()


def test_outsiders_do_not_learn_the_trajectory_exists(signed_in, trajectory):
    eve = signed_in("eve")
    assert eve.get(f"/api/trajectories/{trajectory.pk}/comments/").status_code == 404
    assert (
        send(eve, "POST", f"/api/trajectories/{trajectory.pk}/comments/", {"body": "hi"}).status_code == 404
    )
    assert eve.get(f"/api/trajectories/{trajectory.pk}/tags/").status_code == 404
    assert signed_in("alice").get("/api/trajectories/999999/comments/").status_code == 404
    assert not Comment.objects.exists()


def test_anonymous_callers_are_401(trajectory):
    response = APIClient().get(f"/api/trajectories/{trajectory.pk}/comments/")
    assert response.status_code == 401
    assert response.json()["error"] == "not_authenticated"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"body": "   "}, "body"),
        ({}, "body"),
        ({"body": "x" * 10_001}, "body"),
        ({"body": ["a", "list"]}, "body"),
        ({"body": "odd", "turn_index": "two"}, "turn_index"),
        ({"body": "odd", "turn_index": -1}, "turn_index"),
        ({"body": "odd", "turn_index": 99}, "turn_index"),
        (["not", "an", "object"], "non_field_errors"),
    ],
)
def test_a_bad_comment_is_400_on_its_field_and_writes_nothing(signed_in, trajectory, body, field):
    response = send(signed_in("carol"), "POST", f"/api/trajectories/{trajectory.pk}/comments/", body)
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "validation_failed"
    assert list(response.json()["fields"]) == [field]
    assert (
        not Comment.objects.exists() and not review_activity().exists() and not Notification.objects.exists()
    )


def test_a_body_that_is_not_json_is_400(signed_in, trajectory):
    response = signed_in("carol").generic(
        "POST", f"/api/trajectories/{trajectory.pk}/comments/", "{body: ", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"] == "malformed_json"
    assert not Comment.objects.exists()


def test_markup_in_a_comment_comes_back_as_data(signed_in, trajectory):
    """JSON is not HTML: the body is returned exactly as written; pages escape it when they render it."""
    script = '<script>alert("hi")</script> & <b>bold</b>'
    created = send(
        signed_in("carol"), "POST", f"/api/trajectories/{trajectory.pk}/comments/", {"body": script}
    )
    assert created.status_code == 201
    assert created["Content-Type"].startswith("application/json")
    assert created.json()["body"] == script
    listed = signed_in("bob").get(f"/api/trajectories/{trajectory.pk}/comments/")
    assert listed["Content-Type"].startswith("application/json")
    assert listed.json()["results"][0]["body"] == script


def test_deleted_comments_keep_their_place_without_their_text(signed_in, trajectory, users):
    comment = services.comment_create(trajectory=trajectory, author=users["carol"], body="oops")
    services.comment_delete(comment=comment, user=users["carol"])
    [listed] = signed_in("bob").get(f"/api/trajectories/{trajectory.pk}/comments/").json()["results"]
    assert listed["deleted"] is True and listed["body"] == ""


# --- tags ---------------------------------------------------------------------------------------------


def test_carol_tags_a_trajectory_and_removes_the_tag(signed_in, trajectory, users):
    carol = signed_in("carol")
    url = f"/api/trajectories/{trajectory.pk}/tags/"

    created = send(carol, "POST", url, {"name": "Reward  Hack"})
    assert created.status_code == 201, created.content
    assert created.json()["name"] == "Reward Hack" and created.json()["added_by"] == "carol"
    again = send(carol, "POST", url, {"name": "reward hack"})  # the project's tag, whatever the case
    assert again.status_code == 201 and again.json()["name"] == "Reward Hack"
    assert send(carol, "POST", url, {"name": "needs/review"}).status_code == 201
    assert Tag.objects.count() == 2 and TrajectoryTag.objects.count() == 2

    listed = signed_in("dave").get(url).json()
    assert [t["name"] for t in listed["results"]] == ["Reward Hack", "needs/review"]

    assert carol.delete(f"{url}reward%20hack/").status_code == 204
    assert carol.delete(f"{url}needs/review/").status_code == 204
    assert not TrajectoryTag.objects.exists()
    assert Tag.objects.count() == 2  # the project keeps its tags
    gone = carol.delete(f"{url}reward%20hack/")
    assert gone.status_code == 404 and gone.json()["error"] == "not_found"
    assert list(review_activity().order_by("id").values_list("verb", flat=True)) == [
        "tag.added",
        "tag.added",
        "tag.removed",
        "tag.removed",
    ]


def test_viewers_cannot_tag_or_untag(signed_in, trajectory, users):
    services.tag_add(trajectory=trajectory, user=users["carol"], name="keep")
    dave = signed_in("dave")
    assert send(dave, "POST", f"/api/trajectories/{trajectory.pk}/tags/", {"name": "mine"}).status_code == 403
    assert dave.delete(f"/api/trajectories/{trajectory.pk}/tags/keep/").status_code == 403
    assert list(TrajectoryTag.objects.values_list("tag__name", flat=True)) == ["keep"]


@pytest.mark.parametrize("body", [{"name": "  "}, {"name": "x" * 51}, {}, {"name": None}])
def test_a_bad_tag_name_is_400_on_name_and_writes_nothing(signed_in, trajectory, body):
    response = send(signed_in("carol"), "POST", f"/api/trajectories/{trajectory.pk}/tags/", body)
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == ["name"]
    assert not Tag.objects.exists() and not TrajectoryTag.objects.exists() and not review_activity().exists()


# --- preference queues ----------------------------------------------------------------------------------


def test_queue_list_shows_researchers_every_queue_and_annotators_theirs(
    signed_in, queue, run, users, project
):
    services.queue_create(
        project=project, user=users["bob"], name="bob's own", runs=[run], annotators=[users["bob"]]
    )
    url = f"/api/projects/{project.slug}/preference-queues/"

    everything = signed_in("bob").get(url).json()
    assert sorted(q["name"] for q in everything["results"]) == ["Which answer is better?", "bob's own"]
    mine = signed_in("carol").get(url).json()["results"]
    assert [(q["id"], q["total_pairs"], q["done_pairs"], q["overlap"]) for q in mine] == [(queue.pk, 2, 2, 2)]
    assert signed_in("dave").get(url).status_code == 403  # as the queue pages: annotators and above
    assert signed_in("eve").get(url).status_code == 404


def test_queue_detail_gives_researchers_progress_and_agreement(signed_in, queue):
    body = signed_in("bob").get(f"/api/preference-queues/{queue.pk}/").json()

    assert body["name"] == "Which answer is better?" and body["annotators"] == ["bob", "carol"]
    assert body["may_annotate"] is True
    progress = body["progress"]
    assert (
        progress["total_pairs"],
        progress["done_pairs"],
        progress["judgements"],
        progress["wanted"],
        progress["percent"],
    ) == (2, 2, 4, 4, 100)
    assert {row["username"]: row["judged"] for row in progress["annotators"]} == {"bob": 2, "carol": 2}
    assert progress["choices"] == {"a": 3, "b": 1}
    agreement = body["agreement"]
    assert agreement["raters"] == ["bob", "carol"]
    assert agreement["cohen"]["items"] == 2 and agreement["cohen"]["percent"] == 0.5
    assert agreement["pairs"] == [agreement["cohen"]]
    assert agreement["fleiss_items"] == 2 and agreement["fleiss_raters"] == 2
    assert agreement["judge"] is None


def test_queue_detail_gives_an_llm_judges_agreement_and_everyones_position_bias(
    signed_in, queue, users, project
):
    from webapp.experiments.services import rubric_create

    spec = {"aggregation": "weighted_sum", "criteria": [{"name": "tone", "kind": "llm_judge", "weight": 1.0}]}
    version = rubric_create(project=project, name="style", spec=spec, user=users["alice"]).latest_version
    judge = services.queue_judge_start(
        queue=queue, user=users["bob"], rubric_version=version, criterion_name="tone", dispatch=False
    )
    services.queue_judge_claim(judge.pk, worker="w")
    # The judge prefers a in both orders on every pair.
    services.queue_judge_record(
        judge.pk, [(p.pk, first, "a", " 1") for p in queue.pairs.all() for first in (True, False)]
    )

    agreement = signed_in("bob").get(f"/api/preference-queues/{queue.pk}/").json()["agreement"]
    assert agreement["raters"] == ["bob", "carol", "judge: tone (style v1)"]
    assert agreement["judge_raters"] == ["judge: tone (style v1)"]
    assert agreement["cohen"]["first"] == "bob" and agreement["cohen"]["second"] == "carol"
    (versus,) = agreement["judges"]
    assert versus["criterion"] == "judge: tone (style v1)" and versus["items"] >= 1
    rows = {(row["rater"], row["order"]): row for row in agreement["position_bias"]}
    assert {("bob", ""), ("carol", "")} <= set(rows)
    a_first = rows[("judge: tone (style v1)", "A first")]
    assert (a_first["decisive"], a_first["left"], a_first["left_share"]) == (2, 2, 1.0)
    b_first = rows[("judge: tone (style v1)", "B first")]
    assert (b_first["left"], b_first["right"], b_first["left_share"]) == (0, 2, 0.0)
    assert agreement["order_consistency"] == [
        {"judge": "judge: tone (style v1)", "items": 2, "consistent": 2, "share": 1.0}
    ]


def test_annotators_see_progress_but_not_how_others_voted(signed_in, queue):
    body = signed_in("carol").get(f"/api/preference-queues/{queue.pk}/").json()
    assert body["progress"]["done_pairs"] == 2
    assert body["progress"]["choices"] is None and body["agreement"] is None


def test_a_queue_an_annotator_is_not_assigned_to_is_404(signed_in, run, users, project):
    make_group(run, group=5)
    theirs = services.queue_create(
        project=project, user=users["bob"], name="bob only", runs=[run], annotators=[users["bob"]]
    )
    assert signed_in("carol").get(f"/api/preference-queues/{theirs.pk}/").status_code == 404
    assert signed_in("dave").get(f"/api/preference-queues/{theirs.pk}/").status_code == 403
    assert signed_in("eve").get(f"/api/preference-queues/{theirs.pk}/").status_code == 404
    assert signed_in("alice").get(f"/api/preference-queues/{theirs.pk}/").status_code == 200


# --- snapshots and exports ------------------------------------------------------------------------------


def test_bob_snapshots_the_queue_and_lists_its_versions(signed_in, queue):
    bob = signed_in("bob")
    url = f"/api/preference-queues/{queue.pk}/snapshots/"

    first = send(bob, "POST", url, {"complete_only": True})
    assert first.status_code == 201, first.content
    body = first.json()
    assert (
        body["version"] == 1
        and body["rows"] == 1
        and body["queue"] == queue.pk
        and body["created_by"] == "bob"
    )
    assert body["provenance"]["complete_only"] is True
    assert body["provenance"]["counts"]["included"] == 1
    assert body["exports"]["dpo"] == f"/api/preference-snapshots/{body['id']}/export/?format=dpo"
    second = bob.post(url)  # the body is optional
    assert second.status_code == 201 and second.json()["version"] == 2

    listed = bob.get(url).json()
    assert [s["version"] for s in listed["results"]] == [2, 1]


def test_annotators_cannot_snapshot_or_list_datasets(signed_in, queue):
    carol = signed_in("carol")
    url = f"/api/preference-queues/{queue.pk}/snapshots/"
    assert send(carol, "POST", url, {}).status_code == 403
    assert carol.get(url).status_code == 403
    assert not PreferenceSnapshot.objects.exists()


@pytest.mark.parametrize("body", [{"complete_only": "maybe"}, {"complete_only": [True]}, ["complete_only"]])
def test_a_bad_snapshot_body_is_400_and_writes_nothing(signed_in, queue, body):
    before = review_activity().count()
    response = send(signed_in("bob"), "POST", f"/api/preference-queues/{queue.pk}/snapshots/", body)
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) in (["complete_only"], ["non_field_errors"])
    assert not PreferenceSnapshot.objects.exists() and review_activity().count() == before


def test_a_script_downloads_the_dpo_export_with_its_token(token_client, queue, users):
    snapshot = services.snapshot_create(queue, users["bob"])
    script = token_client("bob")

    response = script.get(f"/api/preference-snapshots/{snapshot.pk}/export/?format=dpo")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/x-ndjson")
    assert response["Content-Disposition"] == (
        f'attachment; filename="{exports.export_basename(snapshot)}.dpo.jsonl"'
    )
    assert exports.export_basename(snapshot) == "Which-answer-is-better-v1"
    rows = exports.read_dpo_jsonl(response.content)
    assert rows == exports.dpo_records(snapshot)
    assert len(rows) == 1
    assert rows[0]["chosen"] == [{"role": "assistant", "content": "<answer>answer 0.0</answer>"}]
    assert rows[0]["rejected"] == [{"role": "assistant", "content": "<answer>answer 0.1</answer>"}]
    assert rows[0]["provenance"]["snapshot_version"] == 1 and rows[0]["provenance"]["annotators"] == [
        "bob",
        "carol",
    ]


def test_the_parquet_export_reads_back_with_its_provenance(token_client, queue, users):
    snapshot = services.snapshot_create(queue, users["bob"])
    response = token_client("alice").get(
        f"/api/preference-snapshots/{snapshot.pk}/export/?format=parquet",
        HTTP_ACCEPT="application/vnd.apache.parquet",
    )
    assert response.status_code == 200, response.content[:200]
    assert response["Content-Type"] == "application/vnd.apache.parquet"
    assert response["Content-Disposition"].endswith('.parquet"')
    rows, provenance = exports.read_parquet(response.content)
    assert [row["chosen"] for row in rows] == ["assistant: <answer>answer 0.0</answer>"]  # the text variant
    assert provenance["version"] == 1 and provenance["queue"]["id"] == queue.pk


def test_the_export_defaults_to_dpo(token_client, queue, users):
    snapshot = services.snapshot_create(queue, users["bob"])
    response = token_client("bob").get(f"/api/preference-snapshots/{snapshot.pk}/export/")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/x-ndjson")


@pytest.mark.parametrize("fmt", ["csv", "DPO", "jsonl"])
def test_an_unknown_export_format_is_400_naming_the_formats(token_client, queue, users, fmt):
    snapshot = services.snapshot_create(queue, users["bob"])
    response = token_client("bob").get(f"/api/preference-snapshots/{snapshot.pk}/export/?format={fmt}")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/json")
    [message] = response.json()["fields"]["format"]
    assert "dpo" in message and "parquet" in message


def test_exports_follow_the_download_pages_roles(token_client, queue, users):
    snapshot = services.snapshot_create(queue, users["bob"])
    url = f"/api/preference-snapshots/{snapshot.pk}/export/?format=dpo"
    assert token_client("carol").get(url).status_code == 403
    assert token_client("dave").get(url).status_code == 403
    eve = token_client("eve").get(url)
    assert eve.status_code == 404 and eve["Content-Type"].startswith("application/json")
    assert APIClient().get(url).status_code == 401


# --- the OpenAPI document -------------------------------------------------------------------------------


def test_the_schema_documents_the_review_endpoints():
    document = APIClient().get("/api/schema/?format=json").json()
    operations = {(path, method) for path, item in document["paths"].items() for method in item}
    assert {
        ("/api/trajectories/{id}/comments/", "get"),
        ("/api/trajectories/{id}/comments/", "post"),
        ("/api/trajectories/{id}/tags/", "get"),
        ("/api/trajectories/{id}/tags/", "post"),
        ("/api/trajectories/{id}/tags/{name}/", "delete"),
        ("/api/projects/{slug}/preference-queues/", "get"),
        ("/api/preference-queues/{id}/", "get"),
        ("/api/preference-queues/{id}/snapshots/", "get"),
        ("/api/preference-queues/{id}/snapshots/", "post"),
        ("/api/preference-snapshots/{id}/export/", "get"),
    } <= operations
    export = document["paths"]["/api/preference-snapshots/{id}/export/"]["get"]
    assert set(export["responses"]["200"]["content"]) == {
        "application/x-ndjson",
        "application/vnd.apache.parquet",
    }


def test_a_reply_through_the_api_joins_the_thread_and_the_thread_resolves(signed_in, trajectory, users):
    url = f"/api/trajectories/{trajectory.pk}/comments/"
    root = send(signed_in("carol"), "POST", url, {"body": "odd", "turn_index": 2}).json()
    reply = send(signed_in("alice"), "POST", url, {"body": "agreed", "reply_to": root["id"]}).json()
    assert reply["parent"] == root["id"] and reply["turn_index"] == 2
    assert Notification.objects.get(comment_id=reply["id"]).recipient == users["carol"]
    resolve = f"/api/comments/{root['id']}/resolve/"
    assert send(signed_in("dave"), "POST", resolve, {}).status_code == 403  # a viewer
    resolved = send(signed_in("bob"), "POST", resolve, {"resolved": True})
    assert resolved.status_code == 200, resolved.content
    assert resolved.json()["resolved_by"] == "bob" and resolved.json()["resolved_at"]
    assert send(signed_in("carol"), "POST", resolve, {"resolved": False}).json()["resolved_at"] is None
    elsewhere = make_trajectory(trajectory.run, group=5)
    wrong = send(
        signed_in("bob"),
        "POST",
        f"/api/trajectories/{elsewhere.pk}/comments/",
        {"body": "x", "reply_to": root["id"]},
    )
    assert wrong.status_code == 400 and "another trajectory" in wrong.content.decode()
