"""Importing ATIF trajectories into the real dashboard (live_server), through the importer's CLI."""

from __future__ import annotations

import json

import pytest

from tests.trainers.sdk.test_atif import wire_item, write_harbor_trial
from trainers.importers.cli import main as import_main
from trainers.sdk.atif import wire_to_atif
from webapp.experiments.models import Run, RunStatus
from webapp.rollouts.models import MetricPoint, Trajectory


@pytest.fixture
def token(live_server, transactional_db, project, users):
    from webapp.accounts.services import api_token_create

    return api_token_create(user=users["bob"], name="importer")[1]


def test_our_own_export_and_a_harbor_job_import_as_an_external_run(live_server, token, tmp_path, capsys):
    ours = tmp_path / "ours.jsonl"
    first, second = wire_item(), {**wire_item(), "sample": 4, "reward": 0.1, "advantage": -0.42}
    ours.write_text("\n".join(json.dumps(wire_to_atif(item, step=3)) for item in (first, second)) + "\n")
    harbor = tmp_path / "harbor-job"
    write_harbor_trial(harbor, "hello-world__a", 1.0)
    write_harbor_trial(harbor, "hello-world__b", 0.0)

    code = import_main(
        [
            "atif",
            str(ours),
            str(harbor),
            "--url",
            live_server.url,
            "--token",
            token,
            "--project",
            "agents",
            "--name",
            "agents in ATIF",
            "--timeout",
            "60",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    run = Run.objects.get()
    assert "4 trajectories" in printed and run.is_external and run.status == RunStatus.SUCCEEDED
    assert run.name == "agents in ATIF" and run.preset == "atif"

    exported = {
        t.sample_index: t for t in Trajectory.objects.filter(run=run, step=3).prefetch_related("turns")
    }
    assert sorted(exported) == [0, 1] and exported[0].reward == 1.1 and exported[1].advantage == -0.42
    turns = list(exported[0].turns.order_by("index"))
    assert [t.role for t in turns] == ["system", "user", "assistant", "tool", "assistant"]
    assert (turns[2].tool_name, turns[2].tool_args, turns[2].token_ids) == (
        "calculator",
        {"expression": "12+7"},
        [6, 7, 8],
    )
    assert turns[3].tool_result == "Result: 19" and turns[3].loss_mask == [0, 0] and turns[4].reward == 1.0

    trials = Trajectory.objects.filter(run=run, step=0)
    assert sorted(trials.values_list("reward", flat=True)) == [0.0, 1.0]
    assert set(trials.values_list("task_id", flat=True)) == {"hello-world"}
    assert MetricPoint.objects.get(run=run, key="reward/mean", step=0).value == 0.5
