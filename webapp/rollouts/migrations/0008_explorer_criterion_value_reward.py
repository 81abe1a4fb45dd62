"""The (name, value) criterion indexes also order by reward within each value.

A criterion is usually part of the reward, so its rows in reward order are clustered: "correct = 1,
lowest reward first" would walk past every incorrect answer before the first match. Ordered by
(name, value, reward), the index gives the lowest and highest reward of each value in the range in one
step each (webapp.rollouts.search.criterion_reward_range), and the page query starts right there.
"""

from django.db import migrations

INDEXES = {
    "criterion_name_raw": ("name, raw, reward, trajectory_id", "weighted, run_id, step, split, status"),
    "criterion_name_weighted": ("name, weighted, reward, trajectory_id", "raw, run_id, step, split, status"),
}
PREVIOUS = {
    "criterion_name_raw": ("name, raw", "weighted, trajectory_id, run_id, step, split, status, reward"),
    "criterion_name_weighted": ("name, weighted", "raw, trajectory_id, run_id, step, split, status, reward"),
}


def _create(schema_editor, indexes):
    for name, (keys, included) in indexes.items():
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"CREATE INDEX {name} ON rollouts_criterionscore ({keys}) INCLUDE ({included})")
        else:
            schema_editor.execute(f"CREATE INDEX {name} ON rollouts_criterionscore ({keys})")


def forwards(apps, schema_editor):
    _create(schema_editor, INDEXES)


def backwards(apps, schema_editor):
    _create(schema_editor, {name: (keys if schema_editor.connection.vendor == "postgresql" else f"{keys}, trajectory_id",
                                   included) for name, (keys, included) in PREVIOUS.items()})


class Migration(migrations.Migration):

    dependencies = [
        ("rollouts", "0007_explorer_criterion_order_indexes"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
