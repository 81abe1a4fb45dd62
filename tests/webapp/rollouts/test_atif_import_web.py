"""Importing ATIF from the web: uploaded files become a finished external run, read by the same importer
as the CLI; a v1.7 trajectory built by Harbor's own models imports too."""

from __future__ import annotations

import json

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tests.trainers.sdk.test_atif import wire_item
from tests.trainers.sdk.test_atif_harbor import harbor
from trainers.sdk.atif import wire_to_atif
from webapp.experiments.models import Run, RunStatus
from webapp.rollouts.models import Trajectory


def upload(name: str, content: str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content.encode(), content_type="application/json")


def test_bob_imports_our_export_and_a_harbor_trajectory_as_a_finished_run(client_for, project):
    url = reverse("rollouts:atif_import", args=[project.slug])
    bob = client_for("bob")
    assert "Import ATIF" in bob.get(reverse("experiments:run_list", args=[project.slug])).content.decode()
    ours = "\n".join(json.dumps(wire_to_atif({**wire_item(), "sample": s}, step=2)) for s in (0, 1))
    harbors = harbor("make-atif-1.7")

    response = bob.post(
        url,
        {
            "name": "from Harbor",
            "split": "train",
            "files": [
                upload("ours.jsonl", ours),
                upload("trajectory.json", harbors),
                upload("config.json", "{}"),
            ],
        },
    )

    assert response.status_code == 302, response.content.decode()[-3000:]
    run = Run.objects.get(name="from Harbor")
    assert response.status_code == 302 and response.url.endswith(f"/runs/{run.pk}/")
    assert run.is_external and run.status == RunStatus.SUCCEEDED and run.preset == "atif"
    stored = {(t.step, t.sample_index): t for t in Trajectory.objects.filter(run=run)}
    assert set(stored) == {(2, 0), (2, 1), (0, 0)}
    assert stored[(2, 0)].reward == 1.1 and stored[(0, 0)].status == "error"  # Harbor's has no reward here
    turns = list(stored[(0, 0)].turns.order_by("index"))
    assert [t.role for t in turns] == ["system", "user", "assistant", "assistant", "tool", "assistant"]
    assert turns[2].loss_mask == [0, 0]  # copied context
    page = bob.get(response.url).content.decode()
    assert "Imported 3 trajectories over 2 steps." in page and "1 carried no reward" in page


def test_nothing_importable_is_a_field_error_and_no_run(client_for, project):
    url = reverse("rollouts:atif_import", args=[project.slug])
    bob = client_for("bob")

    empty = bob.post(url, {"name": "x", "split": "train"})
    wrong = bob.post(url, {"name": "x", "split": "train", "files": [upload("notes.txt", "hello")]})
    not_atif = bob.post(url, {"name": "x", "split": "train", "files": [upload("a.json", '{"steps": []}')]})

    assert "Choose one or more ATIF files" in empty.content.decode()
    assert "Only .json, .jsonl and .zip files: notes.txt." in wrong.content.decode()
    assert "No ATIF trajectory found in these files" in not_atif.content.decode()
    assert not Run.objects.filter(name="x").exists()


def test_readers_cannot_import_and_outsiders_do_not_see_the_page(client_for, project):
    url = reverse("rollouts:atif_import", args=[project.slug])
    assert client_for("dave").get(url).status_code == 403
    assert client_for("eve").get(url).status_code == 404


def test_a_zipped_harbor_job_brings_its_verifier_rewards(client_for, project, tmp_path):
    import io
    import zipfile

    from tests.trainers.sdk.test_atif import write_harbor_trial

    job = tmp_path / "job"
    write_harbor_trial(job, "hello-world__a", 1.0)
    write_harbor_trial(job, "hello-world__b", 0.0)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for file in job.rglob("*"):
            archive.write(file, f"job/{file.relative_to(job)}")
    evil = io.BytesIO()
    with zipfile.ZipFile(evil, "w") as archive:
        archive.writestr("../escape.json", "{}")
    url = reverse("rollouts:atif_import", args=[project.slug])
    bob = client_for("bob")

    response = bob.post(
        url,
        {"name": "job", "split": "train", "files": [SimpleUploadedFile("job.zip", buffer.getvalue())]},
    )
    refused = bob.post(
        url, {"name": "evil", "split": "train", "files": [SimpleUploadedFile("evil.zip", evil.getvalue())]}
    )

    run = Run.objects.get(name="job")
    assert response.status_code == 302 and run.status == RunStatus.SUCCEEDED
    rewards = sorted(t.reward for t in Trajectory.objects.filter(run=run))
    assert rewards == [0.0, 1.0]
    assert {t.task_id for t in Trajectory.objects.filter(run=run)} == {"hello-world"}
    assert "a member&#x27;s path leaves the archive" in refused.content.decode()
    assert not Run.objects.filter(name="evil").exists()
