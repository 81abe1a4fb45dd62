"""The runs list as a home (sort, search, tags, pick runs to compare), tags and notes on a run, "New run
like this", and the run's artifacts (checkpoint weights, event log) through the pages and the API."""

from __future__ import annotations

import json
import re

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from tests.webapp.factories import make_run
from tests.webapp.html_forms import flat, form_data
from webapp.experiments.models import Run, RunStatus
from webapp.experiments.services import run_annotate
from webapp.rollouts.models import RunEvent


def url(name: str, project, *args) -> str:
    return reverse(f"experiments:{name}", args=[project.slug, *args])


def names_in(html: str) -> list[str]:
    """The run names of the list's rows, in order."""
    body = html.split("<tbody>")[1].split("</tbody>")[0]
    return re.findall(r'<a href="/p/[^/]+/runs/\d+/">([^<]*)</a>', body)


@pytest.fixture
def three_runs(project, environment, rubric, users):
    bob = users["bob"]
    a = make_run(project, environment, rubric, bob, "alpha", best_reward=0.2, status=RunStatus.SUCCEEDED)
    b = make_run(project, environment, rubric, bob, "Bravo", best_reward=0.9, status=RunStatus.FAILED)
    c = make_run(project, environment, rubric, bob, "charlie")  # queued, no reward yet
    run_annotate(run=a, tags=["baseline", "lr-sweep"], note="the first try at lr 2e-5")
    run_annotate(run=b, tags="LR-sweep, long", note="")
    return a, b, c


# --- sorting, searching, tags ------------------------------------------------------------------------


def test_the_list_sorts_by_created_reward_status_and_name(client_for, project, three_runs):
    dave = client_for("dave")
    page = lambda sort: names_in(dave.get(url("run_list", project), {"sort": sort}).content.decode())  # noqa: E731
    assert page("-created") == ["charlie", "Bravo", "alpha"]
    assert page("created") == ["alpha", "Bravo", "charlie"]
    assert page("-reward") == ["Bravo", "alpha", "charlie"]  # no reward yet: last
    assert page("reward") == ["alpha", "Bravo", "charlie"]
    assert page("name") == ["alpha", "Bravo", "charlie"]  # case aside
    assert page("status") == ["Bravo", "charlie", "alpha"]  # FAILED, QUEUED, SUCCEEDED
    assert page("nonsense") == ["charlie", "Bravo", "alpha"]


def test_the_list_searches_names_notes_and_tags_and_filters_by_one_tag(client_for, project, three_runs):
    dave = client_for("dave")
    find = lambda **q: names_in(dave.get(url("run_list", project), q).content.decode())  # noqa: E731
    assert find(q="brav") == ["Bravo"]
    assert find(q="2e-5") == ["alpha"]  # in the note
    assert find(q="long") == ["Bravo"]  # a tag
    assert find(tag="lr-sweep") == ["Bravo", "alpha"]  # one whole tag, case aside
    assert find(tag="lr") == []
    assert find(tag="baseline", q="alpha") == ["alpha"]
    html = dave.get(url("run_list", project), {"tag": "baseline"}).content.decode()
    assert "No runs match" not in html and 'class="tag current"' in html
    assert "No runs match these filters." in dave.get(url("run_list", project), {"q": "zzz"}).content.decode()


def test_the_list_offers_its_runs_for_comparison_and_the_compare_page_links_back(
    client_for, project, three_runs
):
    a, b, _c = three_runs
    dave = client_for("dave")
    html = dave.get(url("run_list", project)).content.decode()
    compare = reverse("live:compare", args=[project.slug])
    assert f'action="{compare}" id="compare-form"' in html
    assert f'name="run" value="{a.pk}" form="compare-form"' in html
    # What the form submits when a and b are ticked: the compare page overlays exactly those.
    page = dave.get(compare, {"run": [a.pk, b.pk]}).content.decode()
    assert f'href="{url("run_list", project)}" data-back-to-runs' in page
    assert f'data-compare-status="{a.pk}"' in page and f'data-compare-status="{b.pk}"' in page


# --- tags and notes ----------------------------------------------------------------------------------


def test_tags_are_cleaned_and_checked_before_anything_is_written(run):
    run_annotate(run=run, tags=" a, b ,A,, c ", note="  why  ")
    run.refresh_from_db()
    assert (run.tags, run.note) == (["a", "b", "c"], "why")
    with pytest.raises(ValidationError) as caught:
        run_annotate(run=run, tags=["x" * 41], note="n" * 5001)
    assert set(caught.value.message_dict) == {"tags", "note"}
    with pytest.raises(ValidationError):
        run_annotate(run=run, tags=[str(i) for i in range(13)])
    run.refresh_from_db()
    assert (run.tags, run.note) == (["a", "b", "c"], "why")  # untouched


def test_a_researcher_edits_tags_and_note_in_place_and_a_viewer_cannot(client_for, project, run):
    bob = client_for("bob")
    answer = bob.post(
        url("run_notes", project, run.pk),
        {"tags": "baseline, fast", "note": "<b>bold</b> idea"},
        HTTP_ACCEPT="application/json",
    )
    assert answer.json() == {"id": run.pk, "tags": ["baseline", "fast"], "note": "<b>bold</b> idea"}
    bad = bob.post(url("run_notes", project, run.pk), {"tags": "x" * 50}, HTTP_ACCEPT="application/json")
    assert bad.status_code == 400 and "tags" in bad.json()["errors"]
    page = client_for("dave").get(url("run_detail", project, run.pk)).content.decode()
    assert "&lt;b&gt;bold&lt;/b&gt; idea" in page and "<b>bold</b>" not in page
    assert "data-run-notes-edit" not in page  # dave views: no edit button
    assert client_for("dave").post(url("run_notes", project, run.pk), {"note": "mine"}).status_code == 403
    listed = client_for("bob").get(url("run_list", project)).content.decode()
    assert "data-run-notes-edit" in listed
    assert ">baseline</a>" in listed


def test_the_api_lists_filters_and_sets_tags_and_notes(users, project, three_runs):
    a, b, _c = three_runs
    api = APIClient()
    api.force_login(users["bob"])
    listed = api.get(f"/api/projects/{project.slug}/runs/", {"tag": "lr-sweep", "sort": "-reward"}).json()
    assert [r["name"] for r in listed["results"]] == ["Bravo", "alpha"]
    assert listed["results"][1]["tags"] == ["baseline", "lr-sweep"]
    changed = api.patch(f"/api/runs/{a.pk}/", {"tags": ["kept"], "note": "done"}, format="json")
    assert changed.status_code == 200 and (changed.json()["tags"], changed.json()["note"]) == (
        ["kept"],
        "done",
    )
    refused = api.patch(f"/api/runs/{a.pk}/", {"tags": ["y" * 41]}, format="json")
    assert refused.status_code == 400 and "tags" in json.dumps(refused.json())
    viewer = APIClient()
    viewer.force_login(users["dave"])
    assert viewer.patch(f"/api/runs/{a.pk}/", {"note": "x"}, format="json").status_code == 403
    assert Run.objects.get(pk=a.pk).note == "done"


# --- new run like this -------------------------------------------------------------------------------


def test_new_run_like_this_fills_the_form_with_the_runs_choices_and_knobs(
    client_for, project, environment, rubric, users
):
    source = make_run(
        project,
        environment,
        rubric,
        users["bob"],
        "tuned",
        preset="dapo",
        queue="gpu",
        overrides={"learning_rate": 3e-5, "max_new_tokens": 64, "lora": {"enabled": True}},
    )
    bob = client_for("bob")
    detail = bob.get(url("run_detail", project, source.pk)).content.decode()
    like = f"{url('run_create', project)}?like={source.pk}"
    assert f'href="{like}" data-run-like' in detail

    html = bob.get(like).content.decode()
    posted = flat(form_data(html, "run-form"))
    assert (posted["name"], posted["preset"], posted["queue"]) == ("tuned · again", "dapo", "gpu")
    assert posted["environment"] == str(environment.pk) and posted["rubric"] == str(rubric.pk)
    assert (posted["knob-learning_rate"], posted["knob-max_new_tokens"]) == ("3e-05", "64")
    assert posted["knob-eval_tasks"] == "32"  # the source's value, not the recommendation
    assert posted["knob-lora__enabled"] is True or posted["knob-lora__enabled"] == "on"
    assert "Starting from" in html

    # Launch it with another name and learning rate: the rest is the source's.
    posted.update({"name": "tuned again", "knob-learning_rate": "1e-05"})
    assert bob.post(url("run_create", project), posted).status_code == 302
    clone = Run.objects.get(name="tuned again")
    assert clone.preset == "dapo" and clone.queue == "gpu"
    assert clone.resolved_config["max_new_tokens"] == 64 and clone.resolved_config["learning_rate"] == 1e-05
    assert clone.resolved_config["lora"]["enabled"] is True


def test_new_run_like_a_run_of_another_project_is_not_found(client_for, project, users):
    from webapp.projects.services import project_create

    theirs = Run.objects.create(
        project=project_create(name="Other", owner=users["eve"]), name="x", preset="grpo"
    )
    assert client_for("bob").get(url("run_create", project), {"like": theirs.pk}).status_code == 404


# --- artifacts ---------------------------------------------------------------------------------------


@pytest.fixture
def saved(run, tmp_path):
    directory = tmp_path / "checkpoints" / "step-000005"
    (directory / "adapter").mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(b"\x08" * 100_000)
    (directory / "optimizer.pt").write_bytes(b"not for download")
    checkpoint = run.checkpoints.create(step=5, path=str(directory), metrics={"eval/accuracy": 2 / 3})
    return checkpoint


def test_a_member_downloads_a_checkpoints_weights_streamed(users, run, saved):
    viewer = APIClient()
    viewer.force_login(users["dave"])
    response = viewer.get(f"/api/runs/{run.pk}/checkpoints/{saved.pk}/weights/")
    assert response.status_code == 200 and response.streaming
    assert b"".join(response.streaming_content) == b"\x08" * 100_000
    assert response["Content-Disposition"].startswith("attachment;")
    assert "step5-model.safetensors" in response["Content-Disposition"]
    assert response["Content-Type"] == "application/octet-stream"


def test_weights_are_refused_to_outsiders_and_explained_when_missing(users, run, saved, tmp_path):
    outsider = APIClient()
    outsider.force_login(users["eve"])
    assert outsider.get(f"/api/runs/{run.pk}/checkpoints/{saved.pk}/weights/").status_code == 404
    member = APIClient()
    member.force_login(users["bob"])
    gone = run.checkpoints.create(step=9, path=str(tmp_path / "elsewhere"))
    missing = member.get(f"/api/runs/{run.pk}/checkpoints/{gone.pk}/weights/")
    assert missing.status_code == 404 and "not on this server" in missing.json()["detail"]
    (tmp_path / "checkpoints" / "step-000005" / "adapter" / "adapter_model.safetensors").write_bytes(b"a")
    # A LoRA checkpoint: the model's (merged) weights by default, its adapters on request.
    merged = member.get(f"/api/runs/{run.pk}/checkpoints/{saved.pk}/weights/")
    assert b"".join(merged.streaming_content) == b"\x08" * 100_000
    (tmp_path / "checkpoints" / "step-000005" / "model.safetensors").rename(
        tmp_path / "checkpoints" / "step-000005" / "model-00001-of-00002.safetensors"
    )
    several = member.get(f"/api/runs/{run.pk}/checkpoints/{saved.pk}/weights/")
    assert several.status_code == 400 and "adapter/adapter_model.safetensors" in json.dumps(several.json())
    chosen = member.get(
        f"/api/runs/{run.pk}/checkpoints/{saved.pk}/weights/", {"file": "adapter/adapter_model.safetensors"}
    )
    assert b"".join(chosen.streaming_content) == b"a"
    sneaky = member.get(f"/api/runs/{run.pk}/checkpoints/{saved.pk}/weights/", {"file": "optimizer.pt"})
    assert sneaky.status_code == 400


def test_a_checkpoint_downloads_as_a_model_directory_another_run_starts_from(users, run, tmp_path):
    """`file=model.tar`: weights, config and tokenizer in one folder, without the trainer's own state;
    unpacked, its folder is a `model` any run names (the tokenizer loads: fast, from tokenizer.json)."""
    import io
    import tarfile

    from tests.fixtures.tiny_model import save_tiny_llama
    from trainers.models import load_tokenizer

    directory = save_tiny_llama(tmp_path / "checkpoints" / "step-000007")
    (directory / "optimizer.pt").write_bytes(b"not part of the model")
    checkpoint = run.checkpoints.create(step=7, path=str(directory), kind="adapter")
    member = APIClient()
    member.force_login(users["dave"])
    response = member.get(f"/api/runs/{run.pk}/checkpoints/{checkpoint.pk}/weights/", {"file": "model.tar"})
    assert response.status_code == 200 and response["Content-Type"] == "application/x-tar"
    archive = tarfile.open(fileobj=io.BytesIO(b"".join(response.streaming_content)))
    names = archive.getnames()
    folder = names[0].split("/")[0]
    assert f"{folder}/config.json" in names and f"{folder}/tokenizer.json" in names
    assert f"{folder}/model.safetensors" in names and not any(n.endswith("optimizer.pt") for n in names)
    archive.extractall(tmp_path / "downloaded", filter="data")
    assert load_tokenizer(str(tmp_path / "downloaded" / folder)).is_fast


def test_the_event_log_downloads_as_json_lines(users, run):
    RunEvent.objects.create(run=run, seq=1, type="log", summary={"message": "hello", "level": "info"})
    RunEvent.objects.create(
        run=run, seq=2, type="metrics", summary={"step": 1, "values": {"reward/mean": 0.5}}
    )
    viewer = APIClient()
    viewer.force_login(users["dave"])
    response = viewer.get(f"/api/runs/{run.pk}/event-log/")
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert [(e["seq"], e["type"]) for e in lines] == [(1, "log"), (2, "metrics")]
    assert lines[0]["message"] == "hello" and lines[1]["values"] == {"reward/mean": 0.5}
    assert response["Content-Type"] == "application/x-ndjson"


def test_viewers_get_no_server_paths_and_launchers_do(users, run, saved, client_for, project):
    page = client_for("dave").get(url("run_detail", project, run.pk)).content.decode()
    assert saved.path not in page
    assert f"/api/runs/{run.pk}/checkpoints/{saved.pk}/weights/" in page
    assert f"/api/runs/{run.pk}/event-log/" in page
    assert '<td class="num metric">0.6667</td>' in page
    viewer, researcher = APIClient(), APIClient()
    viewer.force_login(users["dave"])
    researcher.force_login(users["bob"])
    assert viewer.get(f"/api/runs/{run.pk}/checkpoints/").json()["results"][0]["path"] is None
    assert researcher.get(f"/api/runs/{run.pk}/checkpoints/").json()["results"][0]["path"] == saved.path
