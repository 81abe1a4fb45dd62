"""Criterion rows in sort order: (name, id), (name, reward, id), (name, step, id), covering on Postgres.

With only the (name, value) ranges, "format = 1, highest reward first" sorted the whole range (60% of
the project) for every page. In sort order, the planner can instead walk the criterion's rows until a
page has matched, reading nothing but the index. Which of the two is cheaper depends on how much of the
range a page needs; Postgres chooses per query from its statistics.
"""

from django.db import migrations

INDEXES = {
    "criterion_name_id": ("name, trajectory_id", "raw, weighted, run_id, step, split, status, reward"),
    "criterion_name_reward": ("name, reward, trajectory_id", "raw, weighted, run_id, step, split, status"),
    "criterion_name_step": ("name, step, trajectory_id", "raw, weighted, run_id, reward, split, status"),
}


def create_indexes(apps, schema_editor):
    for name, (keys, included) in INDEXES.items():
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"CREATE INDEX {name} ON rollouts_criterionscore ({keys}) INCLUDE ({included})")
        else:
            schema_editor.execute(f"CREATE INDEX {name} ON rollouts_criterionscore ({keys})")


def drop_indexes(apps, schema_editor):
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):

    dependencies = [
        ("rollouts", "0006_explorer_criterion_run_index"),
    ]

    operations = [migrations.RunPython(create_indexes, drop_indexes)]
