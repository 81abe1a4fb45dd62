"""The explorer's keyset indexes become covering indexes on Postgres.

A page is found in two steps (webapp.review.explorer): first the ids in sort order, reading only the
sort key and the filter columns, then the page's rows by id. With the filter columns INCLUDEd, the
first step is an index-only scan — no visit to the wide trajectory rows for every candidate. Postgres
needs the visibility map for that, so the table is vacuumed after every 2% of growth rather than 20%.

Full-text statistics: with the default sample, every word outside the ~1,000 most common is guessed
at ~0.2% of documents, and a search for a rare word walks the whole table in sort order looking for
matches. A larger sample lets the planner see that rare words are rare and use the GIN index.

SQLite (the embedded demo) gets the same keys without INCLUDE, which it does not have.
"""

from django.db import migrations

COVERING = {
    "traj_explorer_id": ("id", "run_id, step, reward, split, status"),
    "traj_explorer_run": ("run_id, id", "step, reward, split, status"),
    "traj_explorer_reward": ("reward, id", "run_id, step, split, status"),
    "traj_explorer_step": ("step, id", "run_id, reward, split, status"),
}


def create_indexes(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for name, (keys, included) in COVERING.items():
        if vendor == "postgresql":
            schema_editor.execute(f"CREATE INDEX {name} ON rollouts_trajectory ({keys}) INCLUDE ({included})")
        elif name != "traj_explorer_id":  # SQLite's rowid order is the id order already
            schema_editor.execute(f"CREATE INDEX {name} ON rollouts_trajectory ({keys})")
    if vendor == "postgresql":
        schema_editor.execute("ALTER TABLE rollouts_trajectory SET (autovacuum_vacuum_insert_scale_factor = 0.02)")
        schema_editor.execute("ALTER TABLE rollouts_trajectorysearch ALTER COLUMN document SET STATISTICS 1000")


def drop_indexes(apps, schema_editor):
    for name in COVERING:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE rollouts_trajectory RESET (autovacuum_vacuum_insert_scale_factor)")
        schema_editor.execute("ALTER TABLE rollouts_trajectorysearch ALTER COLUMN document SET STATISTICS -1")


class Migration(migrations.Migration):

    dependencies = [
        ("rollouts", "0002_explorer"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="trajectory", name="traj_run_id"),
        migrations.RemoveIndex(model_name="trajectory", name="traj_reward_id"),
        migrations.RemoveIndex(model_name="trajectory", name="traj_step_id"),
        migrations.RunPython(create_indexes, drop_indexes),
    ]
