"""Reward-model and lineage pages: who may see and do what, what the pages show, and that text from
users and models stays inert in every one of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.urls import reverse

from tests.webapp.html_forms import form_data
from tests.webapp.rewards_factories import annotated_snapshot, direct_snapshot, preference_texts, ready
from webapp.experiments.models import Checkpoint, RubricVersion, Run
from webapp.experiments.services import run_create, run_create_dpo, run_create_from_checkpoint, run_resume
from webapp.projects.models import ROLE_CAPABILITIES
from webapp.rewards import services
from webapp.rewards.models import RewardModel

PEOPLE = [None, "alice", "bob", "carol", "dave", "eve"]
ROLE_OF = {"alice": "owner", "bob": "researcher", "carol": "annotator", "dave": "viewer"}
HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>[x](javascript:alert(3))"


@dataclass(frozen=True)
class Page:
    label: str
    method: str
    needs: str
    route: str
    args: tuple[str, ...] = ()
    data: Callable[[dict], dict] = lambda w: {}
    ok: int = 200

    def url(self, world: dict) -> str:
        return reverse(self.route, args=[world["project"].slug, *[world[name].pk for name in self.args]])


PAGES = [
    Page("model list", "get", "read", "rewards:reward_model_list"),
    Page("train form", "get", "launch", "rewards:reward_model_create"),
    Page(
        "train",
        "post",
        "launch",
        "rewards:reward_model_create",
        data=lambda w: {
            "snapshot": w["snapshot"].pk,
            "name": "new",
            "head": "linear",
            "epochs": 50,
            "held_out_fraction": 0.2,
            "seed": 0,
            "queue": "cpu",
        },
        ok=302,
    ),
    Page("model detail", "get", "read", "rewards:reward_model_detail", ("reward_model",)),
    Page("model status", "get", "read", "rewards:reward_model_status", ("reward_model",)),
    Page(
        "add to rubric",
        "post",
        "launch",
        "rewards:reward_model_register",
        ("reward_model",),
        data=lambda w: {"rubric": w["rubric"].pk, "weight": 0.5},
        ok=302,
    ),
    Page("train again", "post", "launch", "rewards:reward_model_retrain", ("reward_model",), ok=302),
    Page("cancel training", "post", "launch", "rewards:reward_model_cancel", ("reward_model",), ok=302),
    Page("lineage", "get", "read", "rewards:lineage_index"),
    Page("model lineage", "get", "read", "rewards:lineage_detail", ("reward_model",)),
    Page("dpo lineage", "get", "read", "rewards:dpo_lineage", ("dpo_run",)),
]


@pytest.fixture
def world(project, rubric, run, users):
    snapshot = direct_snapshot(project=project, rows=preference_texts(6), user=users["bob"])
    reward_model = ready(
        services.reward_model_train(snapshot=snapshot, user=users["bob"], name="style", dispatch=False)
    )
    dpo_run, _ = run_create_dpo(
        project=project, snapshot=snapshot, name="dpo", params={}, user=users["bob"], dispatch=False
    )
    return {
        "project": project,
        "rubric": rubric,
        "run": run,
        "snapshot": snapshot,
        "reward_model": reward_model,
        "dpo_run": dpo_run,
    }


def stored() -> dict[str, Any]:
    return {
        "reward models": sorted(RewardModel.objects.values_list("pk", "status")),
        "rubric versions": RubricVersion.objects.count(),
    }


def expected_status(page: Page, person: str | None) -> int | str:
    if person is None:
        return "sign-in redirect"
    if person not in ROLE_OF:
        return 404
    return page.ok if page.needs in ROLE_CAPABILITIES[ROLE_OF[person]] else 403


@pytest.mark.parametrize("person", PEOPLE, ids=lambda p: p or "anonymous")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.label.replace(" ", "-"))
def test_each_person_sees_and_does_only_what_their_role_allows(
    client, users, world, page, person, django_capture_on_commit_callbacks
):
    if person is not None:
        client.force_login(users[person])
    before = stored()
    with django_capture_on_commit_callbacks(execute=False):  # queue nothing on the broker
        response = getattr(client, page.method)(page.url(world), page.data(world))
    expected = expected_status(page, person)
    if expected == "sign-in redirect":
        assert response.status_code == 302 and response.url.startswith(reverse("accounts:login"))
    else:
        assert response.status_code == expected, response.content[:500]
    if expected != page.ok:
        assert stored() == before


def test_the_table_covers_every_page_of_the_app():
    from webapp.rewards import urls

    assert {page.route for page in PAGES} == {
        f"{urls.app_name}:{pattern.name}" for pattern in urls.urlpatterns
    }


def test_a_researcher_trains_from_a_snapshot_through_the_form(
    client_for, world, django_capture_on_commit_callbacks
):
    client = client_for("bob")
    url = reverse("rewards:reward_model_create", args=[world["project"].slug])
    page = client.get(url + f"?snapshot={world['snapshot'].pk}").content.decode()
    data = form_data(page, "train-form")
    assert data["snapshot"] == [str(world["snapshot"].pk)] and "6 pairs" in page
    data.update(name="tone", head="mlp", epochs="40")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(url, data)
    created = RewardModel.objects.get(name="tone")
    assert response.status_code == 302 and response.url.endswith(f"/reward-models/{created.pk}/")
    assert len(callbacks) == 1 and created.params["head"] == "mlp" and created.params["epochs"] == 40
    detail = client.get(response.url).content.decode()
    assert "Queued" in detail and 'hx-trigger="every 3s"' in detail and "Add to rubric" not in detail


def test_a_reward_model_embeds_with_a_chosen_checkpoints_policy_and_says_so(
    client_for, world, django_capture_on_commit_callbacks
):
    """Every checkpoint is a model (issue 35.1): the form offers the project's kept checkpoints as the frozen
    base beside the bundled model; the worker gets the checkpoint's directory, the page names its run and
    step, and "Train again" keeps the base."""
    run = world["run"]
    policy = Checkpoint.objects.create(run=run, step=10, path="/ckpt/grpo-10", kind="adapter")
    Checkpoint.objects.create(run=run, step=5, path="/ckpt/grpo-5", deleted=True)
    client = client_for("bob")
    url = reverse("rewards:reward_model_create", args=[world["project"].slug])
    page = client.get(url).content.decode()
    assert '<option value="" selected>the bundled model</option>' in page
    assert f'<option value="{policy.pk}">{run.name} · step 10</option>' in page and "step 5" not in page
    data = form_data(page, "train-form")
    data.update(name="on policy", base_checkpoint=str(policy.pk))
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(url, data)
    created = RewardModel.objects.get(name="on policy")
    assert created.base_checkpoint == policy and created.params["model"] == "/ckpt/grpo-10"
    detail = client.get(response.url).content.decode()
    assert f"{run.name}</a> · step 10" in detail[detail.index("data-base-model") :]
    with django_capture_on_commit_callbacks(execute=False):
        client.post(reverse("rewards:reward_model_retrain", args=[world["project"].slug, created.pk]))
    again = RewardModel.objects.get(name="on policy", version=2)
    assert again.base_checkpoint == policy and again.params["model"] == "/ckpt/grpo-10"
    bundled = client.get(
        reverse("rewards:reward_model_detail", args=[world["project"].slug, world["reward_model"].pk])
    )
    assert "the bundled model" in bundled.content.decode()


def test_form_errors_are_shown_next_to_their_fields(client_for, world):
    url = reverse("rewards:reward_model_create", args=[world["project"].slug])
    data = form_data(client_for("bob").get(url).content.decode(), "train-form")
    data.update(name="x", held_out_fraction="0.9")
    response = client_for("bob").post(url, data)
    assert (
        response.status_code == 400
        and "Held-out fraction must be 0.5 or less (got 0.9)." in response.content.decode()
    )
    assert not RewardModel.objects.filter(name="x").exists()


def test_a_ready_model_shows_its_accuracy_and_is_added_to_a_rubric(client_for, world):
    client = client_for("bob")
    reward_model = world["reward_model"]
    url = reverse("rewards:reward_model_detail", args=[world["project"].slug, reward_model.pk])
    page = client.get(url).content.decode()
    assert "88%" in page and "of 40" in page and "<polyline" in page and "every 3s" not in page
    data = form_data(page, "register-form")
    assert data["only_when_checks_pass"] == ["on"]  # ticked unless the user says otherwise
    data.update(rubric=str(world["rubric"].pk), weight="0.25")
    response = client.post(url + "register/", data)
    assert response.status_code == 302
    latest = world["rubric"].versions.order_by("-number").first()
    assert latest.number == 2 and latest.spec["criteria"][-1]["kind"] == "learned_reward"
    assert latest.spec["criteria"][-1]["params"]["only_when_checks_pass"] is True
    assert "correctness v2" in client.get(url).content.decode()
    again = client.post(url + "register/", data)
    assert again.status_code == 400 and "already scores with style v1" in again.content.decode()


def test_an_unreliable_model_says_why_and_joins_a_rubric_only_with_the_box_ticked(client_for, world):
    reward_model = world["reward_model"]
    RewardModel.objects.filter(pk=reward_model.pk).update(metrics={"held_out_accuracy": 0.0, "n_eval": 2})
    client = client_for("bob")
    url = reverse("rewards:reward_model_detail", args=[world["project"].slug, reward_model.pk])
    page = client.get(url).content.decode()
    assert "Not reliable" in page and "includes 50 %" in page and 'name="allow_unreliable"' in page
    data = form_data(page, "register-form")
    data.update(rubric=str(world["rubric"].pk), weight="1")
    data.pop("allow_unreliable", None)
    refused = client.post(url + "register/", data)
    assert refused.status_code == 400 and "explicit override" in refused.content.decode()
    assert world["rubric"].versions.count() == 1
    assert client.post(url + "register/", {**data, "allow_unreliable": "on"}).status_code == 302
    assert world["rubric"].versions.count() == 2


def test_the_api_refuses_an_unreliable_model_without_allow_unreliable(world, users):
    from rest_framework.test import APIClient

    reward_model = world["reward_model"]
    RewardModel.objects.filter(pk=reward_model.pk).update(metrics={"held_out_accuracy": 0.5, "n_eval": 4})
    api = APIClient()
    api.force_login(users["bob"])
    detail = api.get(f"/api/reward-models/{reward_model.pk}/").json()
    assert detail["reliability"]["reliable"] is False and detail["reliability"]["n"] == 4
    url = f"/api/reward-models/{reward_model.pk}/register/"
    refused = api.post(url, {"rubric": world["rubric"].pk}, format="json")
    assert refused.status_code == 400 and "allow_unreliable" in refused.json()["fields"]
    accepted = api.post(url, {"rubric": world["rubric"].pk, "allow_unreliable": True}, format="json")
    assert accepted.status_code == 201 and accepted.json()["version"] == 2


def test_the_status_fragment_reloads_the_page_once_training_ends(client_for, world):
    url = reverse("rewards:reward_model_status", args=[world["project"].slug, world["reward_model"].pk])
    response = client_for("dave").get(url, headers={"HX-Request": "true"})
    assert response["HX-Refresh"] == "true" and "Ready" in response.content.decode()


def test_viewers_and_annotators_see_no_training_or_registration_controls(client_for, world):
    for person in ("carol", "dave"):
        client = client_for(person)
        listing = client.get(
            reverse("rewards:reward_model_list", args=[world["project"].slug])
        ).content.decode()
        detail = client.get(
            reverse("rewards:reward_model_detail", args=[world["project"].slug, world["reward_model"].pk])
        ).content.decode()
        assert "Train from a snapshot" not in listing and "style v1" in listing
        assert "register-form" not in detail and "Train again" not in detail


def test_the_lineage_links_queue_snapshot_model_rubric_runs_and_checkpoints(
    client_for, project, environment, rubric, run, users
):
    snapshot = annotated_snapshot(
        project=project,
        run=run,
        researcher=users["bob"],
        annotator=users["carol"],
        rows=preference_texts(4),
        queue_name="tone queue",
    )
    reward_model = ready(
        services.reward_model_train(snapshot=snapshot, user=users["bob"], name="tone", dispatch=False)
    )
    version = services.reward_model_register(
        reward_model=reward_model, rubric=rubric, weight=1.0, user=users["bob"]
    )
    downstream, _ = run_create(
        project=project,
        name="closing the loop",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    for step in (2, 4):
        Checkpoint.objects.create(run=downstream, step=step, path=f"/ckpt/{step}")

    page = (
        client_for("bob")
        .get(reverse("rewards:lineage_detail", args=[project.slug, reward_model.pk]))
        .content.decode()
    )
    slug = project.slug
    for link in (
        f"/p/{slug}/runs/{run.pk}/",
        f"/p/{slug}/review/queues/{snapshot.queue_id}/",
        f"/p/{slug}/review/queues/{snapshot.queue_id}/#datasets",
        f"/p/{slug}/reward-models/{reward_model.pk}/",
        f"/p/{slug}/rubrics/{rubric.pk}/#v{version.number}",
        f"/p/{slug}/runs/{downstream.pk}/",
    ):
        assert f'href="{link}"' in page, link
    assert "tone queue" in page and "4 pairs" in page and "step 2" in page and "step 4" in page
    boxes = page[page.index('class="lineage"') :]
    assert (
        boxes.index("tone queue")
        < boxes.index("tone v1")
        < boxes.index("correctness v2")
        < boxes.index("closing the loop")
    )
    assert f"/runs/{run.pk}/" not in boxes.split("Runs</h3>")[1]  # the first run pinned v1: upstream only

    index = client_for("dave").get(reverse("rewards:lineage_index", args=[slug])).content.decode()
    assert "closing the loop" in index and "tone queue" not in index  # viewers do not see preference queues
    assert "a queue you are not assigned to" in index


def test_the_dpo_lineage_links_snapshot_dpo_run_checkpoints_and_the_runs_started_from_them(
    client_for, project, environment, rubric, run, users
):
    snapshot = annotated_snapshot(
        project=project,
        run=run,
        researcher=users["bob"],
        annotator=users["carol"],
        rows=preference_texts(3),
        queue_name="tone queue",
    )
    dpo, _ = run_create_dpo(
        project=project,
        snapshot=snapshot,
        name="dpo on tone",
        params={"max_steps": 4},
        user=users["bob"],
        dispatch=False,
    )
    Run.objects.filter(pk=dpo.pk).update(status="SUCCEEDED", current_step=4)
    Checkpoint.objects.create(run=dpo, step=2, path="/ckpt/2")
    last = Checkpoint.objects.create(run=dpo, step=4, path="/ckpt/4")
    grpo, _ = run_create_from_checkpoint(
        checkpoint=last,
        name="grpo after dpo",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )

    slug = project.slug
    run_page = client_for("bob").get(reverse("experiments:run_detail", args=[slug, dpo.pk])).content.decode()
    lineage_url = reverse("rewards:dpo_lineage", args=[slug, dpo.pk])
    assert f'href="{lineage_url}"' in run_page
    page = client_for("bob").get(lineage_url).content.decode()
    for link in (
        f"/p/{slug}/runs/{run.pk}/",
        f"/p/{slug}/review/queues/{snapshot.queue_id}/",
        f"/p/{slug}/review/queues/{snapshot.queue_id}/#datasets",
        f"/p/{slug}/runs/{dpo.pk}/",
        f"/p/{slug}/runs/{grpo.pk}/",
    ):
        assert f'href="{link}"' in page, link
    boxes = page[page.index('class="lineage"') :]
    assert (
        boxes.index("tone queue")
        < boxes.index("3 pairs")
        < boxes.index("dpo on tone")
        < boxes.index("step 2")
        < boxes.index("step 4")
        < boxes.index("grpo after dpo")
    )
    assert "grpo, from step 4" in boxes and "/ckpt/" not in page  # no server paths

    index = client_for("dave").get(reverse("rewards:lineage_index", args=[slug])).content.decode()
    assert "dpo on tone" in index and "grpo after dpo" in index and "tone queue" not in index
    # A GRPO run has no preference lineage of its own; outsiders see nothing.
    assert client_for("bob").get(reverse("rewards:dpo_lineage", args=[slug, grpo.pk])).status_code == 404
    assert client_for("eve").get(lineage_url).status_code == 404


def test_text_from_users_and_models_renders_inert_in_every_page(
    client_for, project, environment, rubric, users
):
    snapshot = direct_snapshot(
        project=project, rows=[(HOSTILE, HOSTILE + " good", HOSTILE)] * 4, user=users["bob"]
    )
    failed = services.reward_model_train(snapshot=snapshot, user=users["bob"], name=HOSTILE, dispatch=False)
    services.reward_model_claim(failed.pk, worker=HOSTILE)
    services.reward_model_fail(failed.pk, error=HOSTILE)
    reward_model = ready(
        services.reward_model_train(snapshot=snapshot, user=users["bob"], name=HOSTILE, dispatch=False),
        path="/srv/" + HOSTILE,
    )
    rubric.name = HOSTILE
    rubric.save()
    services.reward_model_register(reward_model=reward_model, rubric=rubric, weight=1.0, user=users["bob"])
    downstream, _ = run_create(
        project=project,
        name=HOSTILE,
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    Checkpoint.objects.create(run=downstream, step=1, path="/ckpt/" + HOSTILE)
    dpo, _ = run_create_dpo(
        project=project, snapshot=snapshot, name=HOSTILE, params={}, user=users["bob"], dispatch=False
    )

    slug = project.slug
    urls = [
        reverse("rewards:reward_model_list", args=[slug]),
        reverse("rewards:reward_model_create", args=[slug]),
        reverse("rewards:lineage_index", args=[slug]),
        reverse("rewards:dpo_lineage", args=[slug, dpo.pk]),
    ]
    for model in (failed, reward_model):
        urls += [
            reverse("rewards:reward_model_detail", args=[slug, model.pk]),
            reverse("rewards:reward_model_status", args=[slug, model.pk]),
            reverse("rewards:lineage_detail", args=[slug, model.pk]),
        ]
    for url in urls:
        page = client_for("bob").get(url).content.decode()
        assert "<script>alert" not in page and "<img src=x" not in page, url
        assert 'href="javascript' not in page, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page or url.endswith("/new/"), url


def test_one_click_dpo_starts_from_a_chosen_checkpoint_and_its_page_shows_dpo_only(
    client_for, project, run, users
):
    """The queue's DPO button offers the judged runs' checkpoints (the GRPO policy) beside the base model;
    the DPO run starts from the chosen one's weights, linked under it. Its page has DPO's charts and
    lineage, none of GRPO's rollout panels, and no Resume once it succeeded."""
    snapshot = annotated_snapshot(
        project=project,
        run=run,
        researcher=users["bob"],
        annotator=users["carol"],
        rows=preference_texts(3),
        queue_name="tone queue",
    )
    policy = Checkpoint.objects.create(run=run, step=3, path="/ckpt/grpo-3")
    bob = client_for("bob")
    queue_page = bob.get(
        reverse("review:queue_detail", args=[project.slug, snapshot.queue_id])
    ).content.decode()
    assert f'<option value="{policy.pk}">{run.name} · step 3</option>' in queue_page
    url = reverse("review:snapshot_dpo_run", args=[project.slug, snapshot.pk])

    refused = bob.post(url, {"max_steps": "2", "from_checkpoint": "999999"}, follow=True).content.decode()
    assert "Choose a kept checkpoint of this project to start from." in refused
    assert not Run.objects.filter(kind="dpo").exists()

    bob.post(url, {"max_steps": "2", "from_checkpoint": str(policy.pk)})
    dpo = Run.objects.get(kind="dpo")
    assert dpo.resolved_config["model"] == "/ckpt/grpo-3"
    assert (dpo.parent_id, dpo.parent_checkpoint_id, dpo.lineage) == (run.pk, policy.pk, "init")

    Run.objects.filter(pk=dpo.pk).update(status="SUCCEEDED", current_step=2)
    metrics = {"eval/dpo/accuracy": 0.75, "eval/dpo/margin": 0.0312, "dpo/accuracy": 1.0, "loss": 0.61}
    Checkpoint.objects.create(run=dpo, step=2, path="/ckpt/dpo-2", metrics=metrics)
    page = bob.get(reverse("experiments:run_detail", args=[project.slug, dpo.pk])).content.decode()
    assert 'data-kind="dpo"' in page and reverse("rewards:dpo_lineage", args=[project.slug, dpo.pk]) in page
    # DPO things, not GRPO's: the checkpoints' held-out preference accuracy and margin, no reward columns.
    table = page[
        page.index("data-run-checkpoints") : page.index("</table>", page.index("data-run-checkpoints"))
    ]
    assert ">held-out preference accuracy</th>" in table and ">held-out margin</th>" in table
    assert "eval/reward/mean</th>" not in table and ">reward/mean</th>" not in table
    assert '<td class="num metric">0.75</td><td class="num metric">0.0312</td>' in table
    assert "loss=0.61" in table
    best = page[page.index("data-live-best-label") - 200 : page.index("data-live-best-label") + 40]
    assert "data-live-best-label hidden" in best
    assert "the checkpoint at step 3 of <a href=" in page and "Started from" in page
    lineage = bob.get(reverse("rewards:dpo_lineage", args=[project.slug, dpo.pk])).content.decode()
    start = lineage[lineage.index("<h3>Starts from</h3>") :]
    assert start.index(run.name) < start.index("its checkpoint at step 3") < start.index("<h3>DPO run</h3>")
    assert "<div data-live-rollout-panels hidden>" in page
    assert reverse("rollouts:group_list", args=[project.slug, dpo.pk]) not in page
    resume = page[page.index('data-run-action="resume"') :].split(">")[0]
    assert "hidden" in resume  # finished: start a new run from its checkpoint instead


def test_one_click_dpo_trains_the_model_the_judged_runs_started_from_and_names_it(
    client_for, project, environment, rubric, run, users
):
    """Judging a Qwen policy's rollouts and then training the bundled model on them would be a silent
    mistake: without a chosen checkpoint, the one-click DPO run trains the judged runs' own model, and the
    queue page says which. Runs of different models leave it to the DPO default, named as well."""
    Run.objects.filter(pk=run.pk).update(resolved_config={**run.resolved_config, "model": "Qwen/Qwen3-0.6B"})
    snapshot = annotated_snapshot(
        project=project,
        run=run,
        researcher=users["bob"],
        annotator=users["carol"],
        rows=preference_texts(2),
        queue_name="qwen queue",
    )
    bob = client_for("bob")
    queue_url = reverse("review:queue_detail", args=[project.slug, snapshot.queue_id])
    assert "the base model: Qwen/Qwen3-0.6B</option>" in bob.get(queue_url).content.decode()
    bob.post(reverse("review:snapshot_dpo_run", args=[project.slug, snapshot.pk]), {"max_steps": "2"})
    dpo = Run.objects.get(kind="dpo")
    assert dpo.resolved_config["model"] == "Qwen/Qwen3-0.6B"

    # A resume keeps the parent's policy, whatever the queue's runs say by then.
    checkpoint = Checkpoint.objects.create(run=dpo, step=1, path="/ckpt/dpo-1")
    other = run_create(
        project=project,
        name="another model",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={"model": "smollm2-135m"},
        user=users["bob"],
        dispatch=False,
    )[0]
    snapshot.queue.runs.add(other)
    Run.objects.filter(pk=dpo.pk).update(status="FAILED")
    dpo.refresh_from_db()
    resumed, _ = run_resume(run=dpo, checkpoint=checkpoint, user=users["bob"], dispatch=False)
    assert resumed.resolved_config["model"] == "Qwen/Qwen3-0.6B"
    assert "the base model: smollm2-135m</option>" in bob.get(queue_url).content.decode()


def test_the_api_trains_dpo_from_a_chosen_checkpoint_as_the_snapshot_page_does(
    signed_in, project, run, users
):
    """POST …/dpo-runs/ takes the checkpoint to start from (issue 35's "by the API"): the same run as the
    snapshot page's choice, linked under the checkpoint; one of another project is refused by name."""
    snapshot = annotated_snapshot(
        project=project, run=run, researcher=users["bob"], annotator=users["carol"], rows=preference_texts(3)
    )
    policy = Checkpoint.objects.create(run=run, step=10, path="/ckpt/grpo-10")
    url = f"/api/preference-snapshots/{snapshot.pk}/dpo-runs/"
    bob = signed_in("bob")

    refused = bob.post(url, {"name": "dpo", "from_checkpoint": 999_999}, format="json")
    assert refused.status_code == 400
    assert refused.json()["fields"] == {
        "from_checkpoint": ["Choose a kept checkpoint of this project to start from."]
    }
    assert not Run.objects.filter(kind="dpo").exists()

    created = bob.post(
        url, {"name": "dpo", "config": {"max_steps": 2}, "from_checkpoint": policy.pk}, format="json"
    )
    assert created.status_code == 201, created.content
    dpo = Run.objects.get(pk=created.json()["id"])
    assert dpo.resolved_config["model"] == "/ckpt/grpo-10"
    assert (dpo.parent_id, dpo.parent_checkpoint_id, dpo.lineage) == (run.pk, policy.pk, "init")


def test_the_api_trains_a_reward_model_from_the_bundled_model_or_a_checkpoints_policy(
    signed_in, world, users
):
    """POST /api/preference-snapshots/<id>/reward-models/ (issue 35.1: reward-model training from a checkpoint
    by the API): the knobs of the form, the base a kept checkpoint of the project or the bundled model."""
    project, run, snapshot = world["project"], world["run"], world["snapshot"]
    policy = Checkpoint.objects.create(run=run, step=10, path="/ckpt/grpo-10", kind="adapter")
    url = f"/api/preference-snapshots/{snapshot.pk}/reward-models/"
    bob = signed_in("bob")

    created = bob.post(
        url, {"name": "on policy", "params": {"epochs": 7}, "base_checkpoint": policy.pk}, format="json"
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["base_checkpoint"], body["params"]["model"], body["params"]["epochs"]) == (
        policy.pk,
        "/ckpt/grpo-10",
        7,
    )
    assert body["status"] == "queued" and body["version"] == 1
    plain = bob.post(url, {"name": "on policy"}, format="json").json()
    assert plain["version"] == 2 and plain["base_checkpoint"] is None and "model" not in plain["params"]

    for body, field in (
        ({"name": "x", "base_checkpoint": 999_999}, "base_checkpoint"),
        ({"name": "x", "params": {"model": "/etc"}}, "base_checkpoint"),  # a base is a checkpoint, not a path
        ({"name": "x", "params": {"epochs": 0}}, "params.epochs"),
    ):
        refused = bob.post(url, body, format="json")
        assert refused.status_code == 400 and field in refused.json()["fields"], refused.content
    assert not RewardModel.objects.filter(name="x").exists()
    assert signed_in("carol").post(url, {"name": "y"}, format="json").status_code == 403
    assert project.pk == snapshot.project_id
