"""A dispatched run keeps the ingestion token its creator was given: the worker hands the trainer that
same token, so a script attached with it keeps reporting after the claim."""

from __future__ import annotations

from workers import execution


def test_the_worker_gives_the_trainer_the_token_the_run_was_created_with(
    project, environment, rubric, users, monkeypatch
):
    from webapp.experiments.services import run_create

    run, created = run_create(
        project=project,
        name="r",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    given = []
    monkeypatch.setattr(execution, "_train", lambda claimed, token, cancel: given.append(token) or "done")
    assert execution.execute_run(run.pk, hostname="test@host") == "done"
    run.refresh_from_db()
    assert given == [created] and run.status == "STARTING"
    assert run.ingest_token() == created
