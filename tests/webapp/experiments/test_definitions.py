"""Environments and rubrics are one thing twice (`VersionedDefinition`): "the latest version" is one rule on
the model — the newest number, what a new run pins — free when the versions were prefetched; and the
API lists either kind in a fixed number of queries however many there are."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Prefetch
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from webapp.experiments import selectors
from webapp.experiments.models import Environment, Rubric, RubricVersion
from webapp.experiments.services import environment_create, environment_update, rubric_create, rubric_update

pytestmark = pytest.mark.django_db

CORRECT = {"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}}


def edited_twice(environment, rubric, users):
    for max_turns in (2, 3):
        environment_update(
            environment=environment,
            user=users["bob"],
            kind="arithmetic_calculator",
            config={"max_turns": max_turns},
        )
    for weight in (0.5, 0.25):
        rubric_update(rubric=rubric, user=users["bob"], spec={"criteria": [{**CORRECT, "weight": weight}]})


def test_the_latest_version_is_the_newest_edit_and_the_one_a_new_run_pins(environment, rubric, users):
    edited_twice(environment, rubric, users)
    assert environment.latest_version.number == 3 and environment.latest_version.config["max_turns"] == 3
    assert rubric.latest_version.number == 3 and rubric.latest_version.spec["criteria"][0]["weight"] == 0.25
    assert (environment.version_count, rubric.version_count) == (3, 3)
    from tests.conftest import make_run

    run = make_run(environment.project, environment, rubric, users)
    assert (run.environment_version.number, run.rubric_version.number) == (3, 3)


def test_prefetched_versions_answer_the_latest_version_without_a_query(environment, rubric, users):
    edited_twice(environment, rubric, users)
    project = environment.project
    (with_versions,) = selectors.environments_with_versions(project=project)
    plain = Rubric.objects.prefetch_related("versions").get(pk=rubric.pk)
    oldest_first = Rubric.objects.prefetch_related(
        Prefetch("versions", queryset=RubricVersion.objects.order_by("number"))
    ).get(pk=rubric.pk)
    with CaptureQueriesContext(connection) as queries:
        answers = [
            (with_versions.latest_version.number, with_versions.version_count),
            (plain.latest_version.number, plain.version_count),
            (oldest_first.latest_version.number, oldest_first.version_count),
        ]
    assert answers == [(3, 3)] * 3 and len(queries) == 0
    fresh = Environment.objects.get(pk=environment.pk)
    with CaptureQueriesContext(connection) as queries:
        assert fresh.latest_version.number == 3
    assert len(queries) == 1  # not prefetched: one query


@pytest.mark.parametrize("kind", ["environments", "rubrics"])
def test_the_api_lists_definitions_in_the_same_queries_however_many_there_are(project, users, kind):
    client = APIClient()
    client.force_login(users["bob"])

    def make(n: int) -> None:
        for i in range(n):
            if kind == "environments":
                environment_create(
                    project=project,
                    name=f"e{n}-{i}",
                    kind="arithmetic_calculator",
                    config={},
                    user=users["bob"],
                )
            else:
                rubric_create(
                    project=project, name=f"r{n}-{i}", spec={"criteria": [CORRECT]}, user=users["bob"]
                )

    def listed() -> tuple[int, list[dict]]:
        with CaptureQueriesContext(connection) as queries:
            response = client.get(f"/api/projects/{project.slug}/{kind}/")
        assert response.status_code == 200
        body = response.json()
        return len(queries), body["results"] if isinstance(body, dict) else body

    make(1)
    few, rows = listed()
    make(5)
    many, rows = listed()
    assert many == few and len(rows) == 6
    assert all(row["latest_version"]["number"] == 1 and row["version_count"] == 1 for row in rows)
