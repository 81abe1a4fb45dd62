"""SQLite: the explorer's hand-made indexes, made again.

Django alters a column on SQLite by remaking the table (copy, drop, rename) and recreates only the
indexes it knows from the models; the explorer's keyset and criterion indexes (0003, 0006–0008) are made
by hand, so the remakes in 0009, 0011, 0013 and 0016 dropped every one of them from the embedded
database — fresh or upgraded — and its explorer sorted and filtered by scanning. Postgres alters in
place and kept them. `EXPLORER_INDEXES` is the one list: this migration makes them where they are
missing and tests/webapp/rollouts/test_explorer_indexes.py checks every one exists on either database,
so a later remake that drops them fails there.
"""

from django.db import migrations

# table → {index: its key columns on SQLite} (Postgres's versions INCLUDE more columns: 0003–0008).
EXPLORER_INDEXES = {
    "rollouts_trajectory": {
        "traj_explorer_run": "run_id, id",
        "traj_explorer_reward": "reward, id",
        "traj_explorer_step": "step, id",
    },
    "rollouts_criterionscore": {
        "criterion_run_id": "run_id, trajectory_id",
        "criterion_name_reward": "name, reward, trajectory_id",
        "criterion_name_step": "name, step, trajectory_id",
        "criterion_name_raw": "name, raw, reward, trajectory_id",
        "criterion_name_weighted": "name, weighted, reward, trajectory_id",
    },
}


def create_missing(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for table, indexes in EXPLORER_INDEXES.items():
        for name, keys in indexes.items():
            schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({keys})")


class Migration(migrations.Migration):

    dependencies = [
        ("rollouts", "0018_turn_token_stats"),
    ]

    operations = [migrations.RunPython(create_missing, migrations.RunPython.noop)]
