"""A criterion filter inside chosen runs reads those runs' criterion rows, in trajectory order.

Runs are written one after another, so a run's rows sit together in id order; without this index,
"run 5, format = 1, newest first" walks the criterion rows of every later run backwards before it
reaches run 5 (the planner cannot know that run and id are correlated). Covering on Postgres, so the
walk never leaves the index.
"""

from django.db import migrations

NAME = "criterion_run_id"


def create_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX {NAME} ON rollouts_criterionscore (run_id, trajectory_id) "
            "INCLUDE (name, raw, weighted, step, split, status, reward)"
        )
    else:
        schema_editor.execute(f"CREATE INDEX {NAME} ON rollouts_criterionscore (run_id, trajectory_id)")


def drop_index(apps, schema_editor):
    schema_editor.execute(f"DROP INDEX IF EXISTS {NAME}")


class Migration(migrations.Migration):

    dependencies = [
        ("rollouts", "0005_explorer_criterion_filters"),
    ]

    operations = [migrations.RunPython(create_index, drop_index)]
