"""Which checkpoint a tinker:// path names, when the dashboard keeps one checkpoint per run and step."""

from __future__ import annotations

import json

import pytest

from tests.webapp.factories import make_run
from trainers.tinker import paths
from webapp.experiments.models import RunKind
from webapp.tinker import selectors
from webapp.tinker.errors import TinkerRefusal


def saved(root, name: str, step: int):
    """A save_state directory as the worker writes it (trainers/learn/checkpoint.py's trainer state)."""
    directory = root / "tinker" / "weights" / name
    directory.mkdir(parents=True)
    (directory / "trainer_state.json").write_text(json.dumps({"step": step, "optimizer": True}))
    return directory


def test_a_state_whose_row_a_later_save_at_its_step_took_still_names_its_own_directory(
    project, environment, rubric, users, tmp_path
):
    """rl_loop saves batch 1's state and then its final one with no optimizer step between (nothing
    earned a reward): one row for the step, the final save's. Batch 1's path still loads batch 1's
    directory, with the step's row as the lineage."""
    run = make_run(project, environment, rubric, users["bob"], kind=RunKind.TINKER)
    first = saved(tmp_path, "000001", step=0)
    final = saved(tmp_path, "final", step=0)
    row = run.checkpoints.create(step=0, path=str(final), kind="adapter")

    for name, directory in (("000001", first), ("final", final)):
        target = paths.parse(paths.form(paths.model_id(run.pk), "weights", name))
        checkpoint = selectors.checkpoint_of(users["bob"], target)
        assert checkpoint == row
        assert selectors.saved_directory(checkpoint, target) == str(directory)


def test_a_path_never_saved_is_still_a_404(project, environment, rubric, users, tmp_path):
    run = make_run(project, environment, rubric, users["bob"], kind=RunKind.TINKER)
    run.checkpoints.create(step=0, path=str(saved(tmp_path, "final", step=0)), kind="adapter")
    target = paths.parse(paths.form(paths.model_id(run.pk), "weights", "never"))
    with pytest.raises(TinkerRefusal) as refused:
        selectors.checkpoint_of(users["bob"], target)
    assert refused.value.status == 404


def test_a_sampling_clients_run_is_not_listed_as_a_training_run(project, environment, rubric, users):
    trained = make_run(project, environment, rubric, users["bob"], kind=RunKind.TINKER)
    sampling = make_run(project, environment, rubric, users["bob"], kind=RunKind.TINKER)
    sampling.resolved_config = {**sampling.resolved_config, "sampler": {"base": True}}
    sampling.save(update_fields=["resolved_config"])
    listed = selectors.training_runs(users["bob"], None, None)
    assert [r["training_run_id"] for r in listed["training_runs"]] == [paths.model_id(trained.pk)]
