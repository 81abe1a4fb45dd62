"""The experiments pages' reads, against data whose answers we know."""

from __future__ import annotations

import pytest

from tests.conftest import RUBRIC_SPEC
from webapp.experiments import selectors
from webapp.experiments.models import Run, RunStatus
from webapp.experiments.services import (
    environment_create,
    environment_update,
    rubric_create,
    rubric_update,
    run_create,
)
from webapp.projects.services import project_create


@pytest.fixture
def lab(project, users):
    """Two environments (one edited to v2), one rubric, four runs, and a run in another project."""
    bob = users["bob"]
    sums = environment_create(project=project, name="sums", kind="arithmetic_calculator", config={}, user=bob)
    lake = environment_create(project=project, name="lake", kind="frozen_lake", config={}, user=bob)
    empty = environment_create(project=project, name="unused", kind="countdown", config={}, user=bob)
    rubric = rubric_create(project=project, name="correct", spec=RUBRIC_SPEC, user=bob)

    def launch(name, environment, **fields):
        run, _ = run_create(
            project=project,
            name=name,
            environment=environment,
            rubric=rubric,
            preset="grpo",
            overrides={},
            user=bob,
            dispatch=False,
        )
        Run.objects.filter(pk=run.pk).update(**fields)
        return Run.objects.get(pk=run.pk)

    old = launch("sums v1", sums, status=RunStatus.SUCCEEDED, best_reward=0.25)
    environment_update(environment=sums, user=bob, kind="arithmetic_calculator", config={"max_turns": 6})
    new = launch("sums v2", sums, status=RunStatus.RUNNING, best_reward=0.5)
    lake_run = launch("lake", lake, status=RunStatus.QUEUED)
    child = launch(
        "sums v2 resumed", sums, status=RunStatus.FAILED, parent=new, lineage="resume", best_reward=0.125
    )

    elsewhere = project_create(name="Elsewhere", owner=users["eve"])
    other_env = environment_create(
        project=elsewhere, name="sums", kind="countdown", config={}, user=users["eve"]
    )
    other_rubric = rubric_create(project=elsewhere, name="r", spec=RUBRIC_SPEC, user=users["eve"])
    foreign, _ = run_create(
        project=elsewhere,
        name="foreign",
        environment=other_env,
        rubric=other_rubric,
        preset="grpo",
        overrides={},
        user=users["eve"],
        dispatch=False,
    )
    Run.objects.filter(pk=foreign.pk).update(best_reward=99.0)
    return {
        "sums": sums,
        "lake": lake,
        "empty": empty,
        "rubric": rubric,
        "old": old,
        "new": new,
        "lake_run": lake_run,
        "child": child,
        "foreign": foreign,
    }


def test_run_list_gives_this_projects_runs_newest_first(project, lab):
    assert [r.name for r in selectors.run_list(project=project)] == [
        "sums v2 resumed",
        "lake",
        "sums v2",
        "sums v1",
    ]


def test_run_list_filters_by_status(project, lab):
    assert [r.name for r in selectors.run_list(project=project, status=RunStatus.RUNNING)] == ["sums v2"]
    assert list(selectors.run_list(project=project, status="NOT A STATUS")) == []


def test_a_run_of_another_project_is_not_found_from_this_projects_page(project, lab, users):
    from webapp.projects.access import NotFound, access_project, access_run

    access = access_project(users["alice"], project.slug)
    assert access_run(access, lab["new"].pk, queryset=selectors.run_detail_queryset()).name == "sums v2"
    with pytest.raises(NotFound):
        access_run(access, lab["foreign"].pk)


def test_run_children_are_the_runs_continued_from_a_run(lab):
    assert list(selectors.run_children(lab["new"])) == [lab["child"]]
    assert list(selectors.run_children(lab["old"])) == []


def test_environment_list_tells_each_latest_version_and_how_many_runs_used_it(project, lab):
    rows = {
        e.name: (e.latest_number, e.latest_kind, e.run_count)
        for e in selectors.environment_list(project=project)
    }
    assert rows == {
        "lake": (1, "frozen_lake", 1),
        "sums": (2, "arithmetic_calculator", 3),
        "unused": (1, "countdown", 0),
    }


def test_environment_versions_list_newest_first_with_the_runs_that_pinned_each(lab):
    versions = list(selectors.environment_versions(lab["sums"]))
    assert [v.number for v in versions] == [2, 1]
    assert [r.name for r in versions[0].runs.all()] == ["sums v2 resumed", "sums v2"]
    assert [r.name for r in versions[1].runs.all()] == ["sums v1"]


def test_rubric_list_and_versions(project, lab, users):
    rubric_update(
        rubric=lab["rubric"], user=users["bob"], spec={**RUBRIC_SPEC, "aggregation": "group_normalized_sum"}
    )
    (row,) = selectors.rubric_list(project=project)
    assert (row.name, row.latest_number, row.run_count) == ("correct", 2, 4)
    versions = list(selectors.rubric_versions(lab["rubric"]))
    assert [v.number for v in versions] == [2, 1]
    assert len(versions[1].runs.all()) == 4 and len(versions[0].runs.all()) == 0


def test_project_counts(project, lab):
    counts = selectors.project_counts(project)
    assert (counts.runs, counts.active_runs, counts.environments, counts.rubrics) == (4, 2, 3, 1)


def test_recent_runs_stops_at_the_limit(project, lab):
    assert [r.name for r in selectors.recent_runs(project, limit=2)] == ["sums v2 resumed", "lake"]


def test_best_reward_per_environment_ranks_rewarded_environments_first(project, lab):
    rows = [
        (e.name, e.rubric, e.best_reward, e.run_count) for e in selectors.best_reward_per_environment(project)
    ]
    # One row per environment and rubric version: rewards on different rubrics' scales are not compared.
    assert rows == [("sums", "correct v1", 0.5, 3), ("lake", "correct v1", None, 1), ("unused", "", None, 0)]


def test_rubric_preview_scores_what_it_can_and_leaves_models_and_custom_code_to_the_workers():
    from trainers.rubrics import parse_transcript

    spec = {
        "aggregation": "weighted_sum",
        "criteria": [
            {"name": "judge", "kind": "llm_judge", "weight": 1.0, "params": {}},
            {"name": "tagged", "kind": "regex", "weight": 0.5, "params": {"pattern": "<answer>"}},
            {
                "name": "bonus",
                "kind": "custom_python",
                "weight": 1.0,
                "params": {"function": "tests.trainers.reward_fns:length_bonus"},
            },
            {"name": "right", "kind": "exact_match", "weight": 2.0, "params": {}},
        ],
    }
    trajectory = parse_transcript("user: 2+2?\nassistant: <answer>4</answer>", answer="4")

    preview = selectors.rubric_preview(spec, trajectory)

    rows = [(c.name, c.scored, c.not_scored_because, c.weighted) for c in preview.components]
    assert rows == [
        ("judge", False, "needs a model", 0.0),
        ("tagged", True, "", 0.5),
        ("bonus", False, "runs custom code", 0.0),
        ("right", True, "", 2.0),
    ]
    assert preview.total == 2.5 and preview.partial
