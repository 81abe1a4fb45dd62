"""The explorer's hand-made indexes exist in the migrated database, on SQLite (the embedded default) as on
Postgres: Django remakes a SQLite table to alter a column and drops every index it did not make itself,
which had left the embedded explorer without any of them (rollouts 0019)."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection

EXPLORER_INDEXES = importlib.import_module(
    "webapp.rollouts.migrations.0019_sqlite_explorer_indexes"
).EXPLORER_INDEXES


@pytest.mark.django_db
@pytest.mark.parametrize("table", sorted(EXPLORER_INDEXES))
def test_every_explorer_index_is_in_the_migrated_database(table):
    with connection.cursor() as cursor:
        present = set(connection.introspection.get_constraints(cursor, table))
    missing = set(EXPLORER_INDEXES[table]) - present
    assert not missing, f"{table} lacks {sorted(missing)}: a migration remade the table without them"


@pytest.mark.django_db
def test_the_embedded_explorer_sorts_by_reward_through_its_index():
    if connection.vendor != "sqlite":
        pytest.skip("the plan checked is SQLite's")
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN SELECT id FROM rollouts_trajectory ORDER BY reward, id LIMIT 50")
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "traj_explorer_reward" in plan and "TEMP B-TREE" not in plan, plan
